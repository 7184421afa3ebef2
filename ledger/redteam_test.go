package ledger

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Ensure that a ledger running on a shared store (etcd) whose prefix is put
// back under it, to exactly its own last commit, while another process on
// the prefix had claimed since and moved the anchor, commits nothing on
// it: the anchor that covers the other process's commits is read and
// checked before each write, not only the one this process last wrote.
// Otherwise the restored ledger hands out a second claim for one action.
func TestRedteam_RestoredPrefixUnderRunningLedger(t *testing.T) {
	const prefix = "/ledger-redteam/"
	c, newEngine, anchor := etcdLedger(t, prefix)
	opts := &Options{Key: testKey, Anchor: anchor}
	one, err := OpenEngine(newEngine(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	two, err := OpenEngine(newEngine(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()
	if _, err := one.Approve(ctx, ApproveRequest{Action: "backup-45", RequestSHA256: sha256.Sum256([]byte("backup-45")),
		Approver: "alice", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	cli := c.Client(t)
	before, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := two.Claim(ctx, ClaimRequest{Action: "backup-45", Worker: "worker-a", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(context.Background(), prefix, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	for _, kv := range before.Kvs {
		if _, err := cli.Put(context.Background(), string(kv.Key), string(kv.Value)); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := one.Claim(ctx, ClaimRequest{Action: "backup-45", Worker: "worker-b", Lease: time.Minute})
	if !errors.Is(err, audit.ErrRollbackDetected) {
		t.Fatalf("claim on the restored prefix = %+v, %v; want ErrRollbackDetected and nothing committed", cl, err)
	}
}
