package bench

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/kvfence"
)

// etcdScale is Scale's receiver on etcd: the same units as scaleReceiver,
// under a fresh prefix, grown and prepared by concurrent callers on the
// durable receiver itself, whose file anchor is in the scale's directory.
type etcdScale struct {
	r      *kvfence.Receiver
	anchor *countingAnchor
	// cli is the harness's own client, for the member's status and the
	// prefix's deletion: the receiver's engine closes the one it has.
	cli    *clientv3.Client
	prefix string
	units  int
	// next is the scope the next prepared write goes to; ops counts the
	// writes prepared, for distinct action ids.
	next int
	ops  int64
}

// etcdStatusSettle is how long dataBytes waits before it asks for the
// member's status: the backend commits its writes every 100 ms by default,
// and reports its size as of its last commit.
const etcdStatusSettle = 300 * time.Millisecond

func newEtcdScale(dir string, newClient func() (*clientv3.Client, error)) (_ *etcdScale, err error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	prefix, err := freshPrefix()
	if err != nil {
		return nil, err
	}
	s := &etcdScale{prefix: prefix, anchor: &countingAnchor{FileAnchor: audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}}}
	if s.cli, err = newClient(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, deletePrefix(s.cli, prefix), s.cli.Close())
		}
	}()
	cli, err := newClient()
	if err != nil {
		return nil, err
	}
	e, err := etcdengine.New(cli, &etcdengine.Options{Prefix: prefix})
	if err != nil {
		return nil, errors.Join(err, cli.Close())
	}
	if err := kvfence.InitEngine(e, &kvfence.InitOptions{ReceiverID: benchReceiverID, Key: key, Anchor: s.anchor.FileAnchor}); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	// OpenEngine closes e, and with it cli, if it fails.
	if s.r, err = kvfence.OpenEngine(e, &kvfence.Options{Key: key, Anchor: s.anchor}); err != nil {
		return nil, err
	}
	return s, nil
}

// grow adds units until there are size, each a scope with a target and
// one applied write, etcdSetupWorkers at a time.
func (s *etcdScale) grow(ctx context.Context, size int, progress io.Writer) error {
	a := s.r.Admin()
	for s.units < size {
		lo, hi := s.units, min(size, s.units+buildBatch)
		if err := parallel(hi-lo, func(k int) error { return buildUnit(ctx, s.r, a, lo+k) }); err != nil {
			return err
		}
		s.units = hi
		if hi < size {
			progressf(progress, "scale: %d scopes\n", hi)
		}
	}
	return nil
}

// prepare holds n scopes from next onwards, round-robin, and activates
// them for applied writes, etcdSetupWorkers calls at a time.
func (s *etcdScale) prepare(ctx context.Context, n int) ([][]byte, error) {
	if n > s.units {
		return nil, fmt.Errorf("bench: %d writes prepared at once on %d scopes", n, s.units)
	}
	scopes := make([]int, n)
	for k := range scopes {
		scopes[k] = s.next
		s.next = (s.next + 1) % s.units
	}
	a := s.r.Admin()
	if err := parallel((n+etcdHoldChunk-1)/etcdHoldChunk, func(c int) error {
		chunk := scopes[c*etcdHoldChunk : min((c+1)*etcdHoldChunk, n)]
		names := make([]string, len(chunk))
		for k, i := range chunk {
			names[k] = scopeName(i)
		}
		_, err := a.Hold(ctx, kvfence.HoldRequest{Scopes: names, Reason: "bench: next round"})
		return err
	}); err != nil {
		return nil, err
	}
	base := s.ops
	s.ops += int64(n)
	envs := make([][]byte, n)
	err := parallel(n, func(k int) (err error) {
		op := base + int64(k) + 1
		envs[k], err = activateWrite(ctx, a, scopes[k], fmt.Sprintf("op-%d", op), benchExecutor, op)
		return err
	})
	return envs, err
}

func (s *etcdScale) timed() (*kvfence.Receiver, func() (float64, error)) {
	return s.r, func() (float64, error) { return float64(s.anchor.stores.Load()), nil }
}

// status returns the first endpoint's member's status once its backend
// has committed what was written before the call.
func (s *etcdScale) status(ctx context.Context) (*clientv3.StatusResponse, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(etcdStatusSettle):
	}
	st, err := s.cli.Status(ctx, s.cli.Endpoints()[0])
	if err != nil {
		return nil, fmt.Errorf("bench: the etcd member's status: %w", err)
	}
	return st, nil
}

// dataBytes is the member's backend in use: its pages less the free ones.
func (s *etcdScale) dataBytes(ctx context.Context) (int64, error) {
	st, err := s.status(ctx)
	if err != nil {
		return 0, err
	}
	return st.DbSizeInUse, nil
}

// sizeBytes is the member's backend database's size.
func (s *etcdScale) sizeBytes(ctx context.Context) (int64, error) {
	st, err := s.status(ctx)
	if err != nil {
		return 0, err
	}
	return st.DbSize, nil
}

// cpuP50 does nothing: a member always syncs.
func (s *etcdScale) cpuP50(context.Context, int) (float64, bool, error) { return 0, false, nil }

// close closes the receiver and deletes its prefix.
func (s *etcdScale) close() error {
	err := s.r.Close()
	return errors.Join(err, deletePrefixInChunks(s.cli, s.prefix), s.cli.Close())
}

// etcdDeleteChunk is how many keys deletePrefixInChunks deletes per
// request: a receiver of 100,000 scopes has about 1,500,000 keys, more
// than a member deletes within its request timeout.
var etcdDeleteChunk int64 = 10_000

// deletePrefixInChunks deletes every key under prefix, etcdDeleteChunk
// keys at a time, from the first key left to the last of the chunk.
func deletePrefixInChunks(cli *clientv3.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*etcdCleanupTimeout)
	defer cancel()
	for {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(etcdDeleteChunk))
		if err != nil {
			return fmt.Errorf("listing the bench prefix %s: %w", prefix, err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		first, last := string(resp.Kvs[0].Key), string(resp.Kvs[len(resp.Kvs)-1].Key)
		if _, err := cli.Delete(ctx, first, clientv3.WithRange(last+"\x00")); err != nil {
			return fmt.Errorf("deleting the bench prefix %s: %w", prefix, err)
		}
	}
}
