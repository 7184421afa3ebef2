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
	f, l, _, _, _ := containedFixture(t)
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
	// The edited entry's leaf is no longer the stored tree's, whose root
	// the anchor signs: the open refuses the file before anything is
	// recorded on it.
	if l, err := Open(f.path, f.opts()); !errors.Is(err, audit.ErrTreeMismatch) {
		if err == nil {
			l.Close()
		}
		t.Fatalf("Open of a ledger with an entry edited = %v, want ErrTreeMismatch", err)
	}
	_ = mallory
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
	// As above: the open refuses the file, whose tree no longer matches.
	if l, err := Open(f.path, f.opts()); !errors.Is(err, audit.ErrTreeMismatch) {
		if err == nil {
			l.Close()
		}
		t.Fatalf("Open of a ledger with an entry edited = %v, want ErrTreeMismatch", err)
	}
}
