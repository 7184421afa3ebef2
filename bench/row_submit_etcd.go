package bench

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/kvfence"
)

// etcdHoldChunk bounds the scopes held in one transaction on etcd, whose
// Txn takes at most 128 operations by default.
const etcdHoldChunk = 16

// etcdSetupWorkers is how many calls the setup runs at once on etcd, so
// that group commit batches them: one by one, each would wait for its own
// round trip and the setup of a round would outlast the round.
const etcdSetupWorkers = 64

// etcdSubmitCell is kvfence_submit on the etcd engine: each operation an
// applied fenced write, on a scope of its own activated beforehand, the
// receiver under a fresh prefix and its anchor a file in the row's
// directory (on a real deployment, a key on another cluster).
type etcdSubmitCell struct {
	r         *kvfence.Receiver
	newClient func() (*clientv3.Client, error)
	prefix    string
	anchor    *countingAnchor
	scopes    int
	active    int
	base      int64
	envs      [][]byte
}

func openSubmitEtcd(ctx context.Context, dir string, newClient func() (*clientv3.Client, error)) (cell, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	prefix, err := freshPrefix()
	if err != nil {
		return nil, err
	}
	cli, err := newClient()
	if err != nil {
		return nil, err
	}
	e, err := etcdengine.New(cli, &etcdengine.Options{Prefix: prefix})
	if err != nil {
		cli.Close()
		return nil, err
	}
	anchor := &countingAnchor{FileAnchor: audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}}
	c := &etcdSubmitCell{newClient: newClient, prefix: prefix, anchor: anchor}
	if err := kvfence.InitEngine(e, &kvfence.InitOptions{ReceiverID: "bench", Key: key, Anchor: anchor.FileAnchor}); err != nil {
		return nil, errors.Join(err, deletePrefix(cli, prefix), e.Close())
	}
	if c.r, err = kvfence.OpenEngine(e, &kvfence.Options{Key: key, Anchor: anchor}); err != nil {
		// OpenEngine closed e, and with it cli.
		return nil, err
	}
	return c, nil
}

// parallel runs fn(i) for i from 0 to n-1 on etcdSetupWorkers goroutines
// and returns the first error.
func parallel(n int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan int)
	)
	for range min(n, etcdSetupWorkers) {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

func (c *etcdSubmitCell) prepare(ctx context.Context, from, n int64) error {
	a := c.r.Admin()
	held := c.active
	if err := parallel((held+etcdHoldChunk-1)/etcdHoldChunk, func(k int) error {
		return holdScopesChunk(ctx, a, k*etcdHoldChunk, min((k+1)*etcdHoldChunk, held), etcdHoldChunk)
	}); err != nil {
		return err
	}
	c.active = 0
	if need := int(n); need > c.scopes {
		have := c.scopes
		if err := parallel(need-have, func(k int) error { return createScopes(ctx, a, have+k, have+k+1) }); err != nil {
			return err
		}
		c.scopes = need
	}
	envs := make([][]byte, n)
	err := parallel(int(n), func(k int) (err error) {
		op := from + int64(k)
		envs[k], err = activateWrite(ctx, a, k, fmt.Sprintf("op-%d", op), benchExecutor, op)
		return err
	})
	c.active = int(n) // a failed activation leaves its scope held: holding it again is harmless
	c.base, c.envs = from, envs
	return err
}

func (c *etcdSubmitCell) op(ctx context.Context, _ int, i int64) error {
	k := i - c.base
	env := c.envs[k]
	c.envs[k] = nil
	res, err := c.r.Submit(ctx, benchExecutor, env)
	if err != nil {
		return err
	}
	if res.Outcome != kvfence.Applied {
		return fmt.Errorf("operation %d: %s %s: %s", i, res.Outcome, res.Reason, res.Detail)
	}
	return nil
}

// syncs counts the anchor file's syncs only, one per commit: the members'
// are not counted here.
func (c *etcdSubmitCell) syncs() (float64, error) { return float64(c.anchor.stores.Load()), nil }

// close closes the receiver and deletes its prefix through a client of its
// own, since the receiver's engine closes the one it was given.
func (c *etcdSubmitCell) close() error {
	err := c.r.Close()
	cli, cerr := c.newClient()
	if cerr != nil {
		return errors.Join(err, cerr)
	}
	return errors.Join(err, deletePrefix(cli, c.prefix), cli.Close())
}
