package ledger

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Ensure that the ledger runs on etcd through the same chain protocol: it
// initialises, approves and claims, reopens against its anchor, and a
// prefix put back to its content from before a claim (what a snapshot
// restore gives it) is refused as a rollback. The member runs without
// fsync: the test is about the ledger, not etcd's durability.
func TestEngine_Etcd(t *testing.T) {
	const prefix = "/ledger-test/"
	c, newEngine, anchor := etcdLedger(t, prefix)
	if err := InitEngine(newEngine(), &InitOptions{LedgerID: "again", Key: testKey, Anchor: &audit.MemAnchor{}}); !errors.Is(err, ErrAlreadyInitialized) {
		t.Fatalf("InitEngine over a ledger = %v, want ErrAlreadyInitialized", err)
	}
	opts := &Options{Key: testKey, Anchor: anchor}
	l, err := OpenEngine(newEngine(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Approve(ctx, ApproveRequest{Action: "backup-45", RequestSHA256: sha256.Sum256([]byte("backup-45")),
		Approver: "alice", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	l.Close()

	cli := c.Client(t)
	before, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if l, err = OpenEngine(newEngine(), opts); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if _, err := l.Claim(ctx, ClaimRequest{Action: "backup-45", Worker: "worker-a", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	head := l.Head()
	l.Close()
	if head.Seq != 3 {
		t.Fatalf("head after init, approve and claim: %v", head)
	}
	if _, err := cli.Delete(context.Background(), prefix, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	for _, kv := range before.Kvs {
		if _, err := cli.Put(context.Background(), string(kv.Key), string(kv.Value)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := OpenEngine(newEngine(), opts); !errors.Is(err, audit.ErrRollbackDetected) {
		t.Fatalf("OpenEngine(restored prefix) = %v, want ErrRollbackDetected", err)
	}
}

// etcdLedger starts an etcd member and lays out a ledger under
// prefix with a memory anchor. newEngine gives a fresh engine on the
// prefix for each handle, as each process has its own.
func etcdLedger(t *testing.T, prefix string) (c *etcdtest.Cluster, newEngine func() *etcdengine.Engine, anchor *audit.MemAnchor) {
	t.Helper()
	c = etcdtest.Start(t)
	newEngine = func() *etcdengine.Engine {
		e, err := etcdengine.New(c.Client(t), &etcdengine.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	anchor = &audit.MemAnchor{}
	if err := InitEngine(newEngine(), &InitOptions{LedgerID: "ledger-etcd", Key: testKey, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	return c, newEngine, anchor
}
