package ledger

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/kvfence/kvfence/audit"
	bolt "go.etcd.io/bbolt"
)

// Ensure that a pinned key swapped in the file together with the audit
// entry that pinned it (its record digest rewritten to match) is not
// taken for the pinned key: the entry no longer links to the chain after
// it, which the anchor covers, and acknowledgments signed by the swapped
// key are not recorded.
func TestRedteam20_PinnedKeySwappedWithItsEntry(t *testing.T) {
	f, l, _, _, c := containedFixture(t)
	pinned, err := l.Receiver("r1")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	mallory := &fakeRecv{name: "r1", id: "id-r1", priv: keyFor("mallory")}
	db, err := bolt.Open(f.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		rb := tx.Bucket(bucketReceivers)
		var rec receiverRecord
		if err := recordDec.Unmarshal(rb.Get([]byte("r1")), &rec); err != nil {
			return err
		}
		rec.PublicKey = mallory.priv.Public().(ed25519.PublicKey)
		raw, err := recordEnc.Marshal(&rec)
		if err != nil {
			return err
		}
		ab := tx.Bucket(bucketAudit)
		e, err := audit.DecodeEntry(ab.Get(audit.SeqKey(pinned.AuditSeq)))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(raw)
		e.RequestSHA256 = sum[:]
		eraw, err := audit.EncodeEntry(&e)
		if err != nil {
			return err
		}
		if err := ab.Put(audit.SeqKey(pinned.AuditSeq), eraw); err != nil {
			return err
		}
		return rb.Put([]byte("r1"), raw)
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	f.problem = audit.ErrBrokenLink
	l = f.open()
	defer l.Close()
	before := l.Head()
	if _, err := l.RecordBoundaries(ctx, c.ID, []BoundaryContainment{mallory.ackFor(t, c.Boundaries[0], 1)}); err == nil {
		t.Fatal("an acknowledgment under a key swapped in the file with its entry was recorded")
	} else if !errors.Is(err, ErrContainmentTampered) {
		t.Fatalf("refused as %v, want ErrContainmentTampered", err)
	}
	unchanged(t, l, before, "swapped key")
}

// Ensure that a boundary dropped from an approval together with its audit
// entry's list does not begin a containment without it.
func TestRedteam20_BoundaryDroppedWithItsEntry(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	addRecv(t, l, "r1")
	addRecv(t, l, "r2")
	superseded(t, l, "act", Boundary{"r1", "a"}, Boundary{"r2", "a"})
	l.Close()
	db, err := bolt.Open(f.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		pb := tx.Bucket(bucketApprovals)
		var a approvalRecord
		if err := recordDec.Unmarshal(pb.Get([]byte("act")), &a); err != nil {
			return err
		}
		a.Boundaries = a.Boundaries[:1]
		raw, err := recordEnc.Marshal(&a)
		if err != nil {
			return err
		}
		ab := tx.Bucket(bucketAudit)
		e, err := audit.DecodeEntry(ab.Get(audit.SeqKey(a.AuditSeq)))
		if err != nil {
			return err
		}
		e.Note = boundariesNote(a.Boundaries)
		eraw, err := audit.EncodeEntry(&e)
		if err != nil {
			return err
		}
		if err := ab.Put(audit.SeqKey(a.AuditSeq), eraw); err != nil {
			return err
		}
		return pb.Put([]byte("act"), raw)
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	f.problem = audit.ErrBrokenLink
	l = f.open()
	defer l.Close()
	if c, err := l.BeginContainment(ctx, "act", "x"); !errors.Is(err, ErrContainmentTampered) {
		t.Fatalf("BeginContainment: %d boundaries, %v; want ErrContainmentTampered", len(c.Boundaries), err)
	}
}
