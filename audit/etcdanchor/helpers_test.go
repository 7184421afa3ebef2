package etcdanchor

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/etcdproc"
)

var receiverKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))

const (
	testReceiver = "receiver-1"
	t0           = int64(1767225600_000000000) // 2026-01-01T00:00:00Z
)

// checkpoint returns a signed checkpoint of testReceiver at seq on the
// chain named by fork, with an epoch high-water that grows with seq.
func checkpoint(t testing.TB, receiver string, seq uint64, fork byte, ehw uint64) audit.SignedCheckpoint {
	t.Helper()
	var b [9]byte
	binary.BigEndian.PutUint64(b[:8], seq)
	b[8] = fork
	sc, err := audit.Sign(receiverKey, audit.Checkpoint{Root: audit.Hash{0x7e},
		Receiver:       receiver,
		Seq:            seq,
		Head:           sha256.Sum256(b[:]),
		State:          sha256.Sum256(append(b[:], 's')),
		EpochHighWater: ehw,
		At:             t0 + int64(seq)*int64(time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// at is the checkpoint at seq on the main chain.
func at(t testing.TB, seq uint64) audit.SignedCheckpoint {
	return checkpoint(t, testReceiver, seq, 0, 1+seq/4)
}

func ptr(sc audit.SignedCheckpoint) *audit.SignedCheckpoint { return &sc }

// startCluster starts a 3-member cluster of etcd processes and a client
// of all three members.
func startCluster(t *testing.T) (*etcdproc.Cluster, *clientv3.Client) {
	t.Helper()
	c := etcdproc.Start(t, 3)
	return c, newClient(t, c.Endpoints())
}

func newClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	eps := make([]string, len(endpoints))
	for i, e := range endpoints {
		eps[i] = "http://" + e
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// testKey returns a key of its own for the test t.
func testKey(t testing.TB) string {
	return "/kvfence-test/" + strings.NewReplacer(" ", "_", ",", "_", "#", "_").Replace(t.Name()) + "/anchor"
}

// put writes raw bytes at key, as an operator's tool would.
func put(t testing.TB, cl *clientv3.Client, key string, raw []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cl.Put(ctx, key, string(raw)); err != nil {
		t.Fatal(err)
	}
}

// get reads the raw bytes at key; nil if absent.
func get(t testing.TB, cl *clientv3.Client, key string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0].Value
}
