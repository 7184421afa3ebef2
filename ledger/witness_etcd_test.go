package ledger

import (
	"crypto/ed25519"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/internal/witnesstest"
	"github.com/kvfence/kvfence/witness"
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
	errs := make(chan error, 2*perWriter+1)
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
	// A third process opens the ledger read-only, witnesses asked, while
	// the two write: a witness ahead of the newest checkpoint it read is
	// the writers' progress, not a rollback.
	stop := make(chan struct{})
	opens := 0
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() {
		defer rwg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			members, err := set.Members(nil)
			if err != nil {
				errs <- err
				return
			}
			r, err := OpenEngine(newEngine(), &Options{ReadOnly: true, Anchor: anchor, Witnesses: members, WitnessQuorum: 2, WitnessTimeout: 5 * time.Second})
			if err != nil {
				errs <- fmt.Errorf("read-only open during writes: %w", err)
				return
			}
			r.Close()
			opens++
		}
	}()
	wg.Wait()
	close(stop)
	rwg.Wait()
	close(errs)
	t.Logf("%d read-only opens during the writes", opens)
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

	// The same, made sure of: the opener's questions reach the witnesses
	// only after a write it did not read was cosigned.
	var slowMembers []witness.Member
	slow := &http.Client{Transport: slowTransport{300 * time.Millisecond}}
	for _, x := range set.Witnesses {
		m, err := x.Member(slow)
		if err != nil {
			t.Fatal(err)
		}
		slowMembers = append(slowMembers, m)
	}
	opened := make(chan error, 1)
	go func() {
		r, err := OpenEngine(newEngine(), &Options{ReadOnly: true, Anchor: anchor, Witnesses: slowMembers, WitnessQuorum: 2, WitnessTimeout: 5 * time.Second})
		if err == nil {
			r.Close()
		}
		opened <- err
	}()
	time.Sleep(100 * time.Millisecond)
	approve(t, ls[0], "while-opening")
	if err := <-opened; err != nil {
		t.Fatalf("read-only open while a write was cosigned: %v", err)
	}
}
