package contain_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/kvfence/kvfence/ledger"
)

// Ensure that the successor's executor is the worker the ledger's chain
// gave the live claim to, not the one its record now names: a claim
// record edited in the file to name another worker (same length, so the
// CBOR still reads) does not get that worker a grant anywhere.
func TestRedteam20_LiveClaimWorkerEdited(t *testing.T) {
	w := newWorld(t, 2)
	sc := w.newScenario(2)
	if rec := mustContain(t, w.coordinator(testTimeout), sc); rec.State != ledger.ContainmentFull {
		t.Fatalf("state %s", rec.State)
	}
	w.reconcile(sc)
	w.reopenLedger(func(db *bolt.DB) {
		if err := db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("claims"))
			raw := b.Get([]byte(sc.claimB.Ref))
			if !bytes.Contains(raw, []byte("worker-b")) {
				return errors.New("claim record does not name worker-b")
			}
			return b.Put([]byte(sc.claimB.Ref), bytes.ReplaceAll(raw, []byte("worker-b"), []byte("mallory1")))
		}); err != nil {
			t.Fatal(err)
		}
	})
	co := w.coordinator(testTimeout)
	req := w.activateReq(sc)
	req.Executor = "mallory1"
	if _, err := co.Activate(context.Background(), req); err == nil {
		t.Fatal("successor activated for a worker the claim's entry does not name")
	}
	if g := w.successorGrants(sc); len(g) != 0 {
		t.Fatalf("grants for mallory1 at %v", g)
	}
}

// Ensure that an action record whose live claim was edited in the file to
// a ref the ledger never issued, its list of claims left as it was, does
// not pass the executor check vacuously: no claim record names that ref,
// so there is no worker to check it against.
func TestRedteam20_LiveClaimRefEdited(t *testing.T) {
	w := newWorld(t, 2)
	sc := w.newScenario(2)
	if rec := mustContain(t, w.coordinator(testTimeout), sc); rec.State != ledger.ContainmentFull {
		t.Fatalf("state %s", rec.State)
	}
	w.reconcile(sc)
	fake := "c-" + string(bytes.Repeat([]byte("Z"), len(sc.claimB.Ref)-2))
	w.reopenLedger(func(db *bolt.DB) {
		if err := db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("actions"))
			raw := b.Get([]byte(sc.action))
			i := bytes.LastIndex(raw, []byte(sc.claimB.Ref))
			j := bytes.Index(raw, []byte(sc.claimB.Ref))
			if i < 0 || i == j {
				return errors.New("action record does not name the live claim twice")
			}
			// Deterministic CBOR puts the shorter key "live" before
			// "claims": the first mention is the live claim.
			edited := append([]byte(nil), raw...)
			copy(edited[j:], fake)
			return b.Put([]byte(sc.action), edited)
		}); err != nil {
			t.Fatal(err)
		}
	})
	co := w.coordinator(testTimeout)
	req := w.activateReq(sc)
	req.Claim, req.Executor = fake, "mallory1"
	_, err := co.Activate(context.Background(), req)
	if err == nil {
		t.Fatal("successor activated under a claim the ledger never issued")
	}
	t.Logf("refused: %v", err)
	for _, b := range sc.bounds {
		if st := w.status(b); st.Grant != nil {
			t.Fatalf("grant at %s: %+v", b, st.Grant)
		}
	}
}
