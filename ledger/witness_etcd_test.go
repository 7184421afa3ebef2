package ledger

import (
	"crypto/ed25519"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/internal/witnesstest"
)

// Ensure that two processes writing one ledger on etcd, each with its own
// quorum of the same three witnesses, get every write acknowledged: a
// round that finds a witness already at the other process's newer
// checkpoint is no rollback when that checkpoint, anchored, covers the
// write.
func TestWitnesses_EtcdTwoWriters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd member")
	}
	_, newEngine, anchor := etcdLedger(t, "/ledger-witnessed/")
	set, err := witnesstest.Start(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	pub := testKey.Public().(ed25519.PublicKey)
	origin, _ := checkpoint.LedgerOrigin("ledger-etcd", pub)
	if err := set.Trust(origin, pub); err != nil {
		t.Fatal(err)
	}
	var ls []*Ledger
	for range 2 {
		members, err := set.Members(nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := OpenEngine(newEngine(), &Options{Key: testKey, Anchor: anchor, Witnesses: members, WitnessQuorum: 2, WitnessTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ls = append(ls, l)
	}
	const perWriter = 25
	var wg sync.WaitGroup
	errs := make(chan error, 2*perWriter)
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perWriter {
				action := fmt.Sprintf("w%d-%d", i, j)
				if _, err := l.Approve(ctx, ApproveRequest{Action: action, RequestSHA256: [32]byte{byte(i + 1), byte(j + 1)}, Approver: "alice", TTL: time.Hour}); err != nil {
					errs <- fmt.Errorf("%s: %w", action, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		n++
		if n <= 3 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d writes not acknowledged", n, 2*perWriter)
	}
}
