package ledger

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/boltengine"
)

// forgeAlternate appends to the ledger's file, closed, what RecordAlternate
// would have written for boundary i of containment id, as someone who can
// write the file but does not hold the ledger's key: the entry is linked
// to the chain and seals the edited record, and the store's checkpoint is
// signed by another key.
func forgeAlternate(t *testing.T, path, id string, i int) {
	t.Helper()
	e, err := boltengine.OpenFile(path, boltengine.FileOptions{NoSync: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	forgeAlternateIn(t, e, id, i)
}

// forgeAlternateIn is forgeAlternate on a store opened as e.
func forgeAlternateIn(t *testing.T, e engine.Engine, id string, i int) {
	t.Helper()
	seed := sha256.Sum256([]byte("not the ledger's key"))
	other := ed25519.NewKeyFromSeed(seed[:])
	if err := e.Update(context.Background(), func(tx engine.Tx) error {
		head, err := ledgerChain.ReadHead(tx)
		if err != nil {
			return err
		}
		w := &wtx{tx: tx, chain: ledgerChain.NewWriter(tx, head), now: time.Now()}
		c, _, err := loadContainment(tx, id)
		if err != nil {
			return err
		}
		c.Boundaries[i].Result = BoundaryAlternate
		c.Boundaries[i].Alternate = &alternateRecord{Operator: "mallory", Reason: "trust me", At: w.now.UnixNano()}
		if err := w.writeContainment(&c, KindContainAlternate, "forged"); err != nil {
			return err
		}
		_, err = w.chain.Checkpoint(other, audit.Checkpoint{Receiver: "forged", At: w.now.UnixNano()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// Ensure that an entry appended to the ledger's file past its anchored
// head by someone without the ledger's key (here one that seals a
// containment record edited to read full_with_alternate) is not taken
// for a commit whose anchor write was lost: the ledger does not open it,
// and does not sign over it.
func TestRedteam20_ForgedEntryPastAnchor(t *testing.T) {
	f, l, rs, _, c := containedFixture(t)
	if _, err := l.RecordBoundaries(ctx, c.ID, []BoundaryContainment{rs["r1"].ackFor(t, c.Boundaries[0], 0),
		rs["r1"].ackFor(t, c.Boundaries[1], 0)}); err != nil {
		t.Fatal(err)
	}
	before := l.Head()
	l.Close()
	forgeAlternate(t, f.path, c.ID, 2)
	l2, err := Open(f.path, f.opts())
	if err == nil {
		defer l2.Close()
		got, cerr := l2.Containment("act")
		t.Fatalf("opened with a forged entry past the anchor (head %d, was %d): containment %s, %v", l2.Head().Seq, before.Seq,
			got.State, cerr)
	}
	if !errors.Is(err, ErrContainmentTampered) {
		t.Fatalf("open: %v, want ErrContainmentTampered", err)
	}
}

// Ensure that on etcd an entry appended past the anchor under a running
// ledger, by an etcd user of the prefix without the ledger's key, is not
// read as the ledger's: the containment it seals is refused, and so is
// the next write.
func TestRedteam20_ForgedEntryUnderRunningLedgerEtcd(t *testing.T) {
	_, newEngine, anchor := etcdLedger(t, "/ledger-forged/")
	l, err := OpenEngine(newEngine(), &Options{Key: testKey, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rs := map[string]*fakeRecv{"r1": addRecv(t, l, "r1"), "r2": addRecv(t, l, "r2")}
	superseded(t, l, "act", Boundary{"r1", "a"}, Boundary{"r2", "a"})
	c := begin(t, l, "act")
	if _, err := l.RecordBoundaries(ctx, c.ID, []BoundaryContainment{rs["r1"].ackFor(t, c.Boundaries[0], 0)}); err != nil {
		t.Fatal(err)
	}
	forgeAlternateIn(t, newEngine(), c.ID, 1)
	if got, err := l.Containment("act"); !errors.Is(err, ErrContainmentTampered) {
		t.Fatalf("containment sealed by a forged entry: %s, %v", got.State, err)
	}
	if err := l.CheckReconciled(c.SupersededClaim); !errors.Is(err, ErrContainmentTampered) {
		t.Fatalf("CheckReconciled over a forged entry: %v", err)
	}
	if _, err := l.RecordAlternate(ctx, AlternateRequest{Action: "act", Receiver: "r2", Operator: "op", Reason: "x"}); err == nil {
		t.Fatal("a write over a forged entry")
	}
}
