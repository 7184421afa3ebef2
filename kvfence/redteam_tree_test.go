package kvfence

import (
	"bytes"
	"crypto/ed25519"
	"testing"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/internal/defect"
)

// rtTreeDamage closes f's receiver and rewrites f's tree bucket with edit
// (the bbolt store only), returning the entries by seq as stored.
func rtTreeDamage(t *testing.T, f *fixture, edit func(entries map[uint64][]byte, tree *bolt.Bucket) error) {
	t.Helper()
	f.r.Close()
	db, err := bolt.Open(f.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	orig := map[string][]byte{}
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketTree).ForEach(func(k, v []byte) error { orig[string(k)] = bytes.Clone(v); return nil }); err != nil {
			return err
		}
		entries := map[uint64][]byte{}
		if err := tx.Bucket(bucketAudit).ForEach(func(k, v []byte) error {
			if len(k) == 8 {
				entries[uint64(k[0])<<56|uint64(k[1])<<48|uint64(k[2])<<40|uint64(k[3])<<32|
					uint64(k[4])<<24|uint64(k[5])<<16|uint64(k[6])<<8|uint64(k[7])] = bytes.Clone(v)
			}
			return nil
		}); err != nil {
			return err
		}
		return edit(entries, tx.Bucket(bucketTree))
	}); err != nil {
		t.Fatal(err)
	}
	// The fixture's own checks at the end want the store it made.
	t.Cleanup(func() {
		for k, v := range orig {
			storePutClosed(t, f, bucketTree, k, v)
		}
		f.reopen()
	})
}

// rtFlipLastLeaf flips a bit of the head entry's leaf hash.
func rtFlipLastLeaf(t *testing.T, f *fixture) {
	head := f.r.Head().Seq
	rtTreeDamage(t, f, func(_ map[uint64][]byte, tree *bolt.Bucket) error {
		v := bytes.Clone(tree.Get(audit.SeqKey(head - 1)))
		v[0] ^= 1
		return tree.Put(audit.SeqKey(head-1), v)
	})
}

// Ensure that verify-chain (VerifyChain) does not report ok for a store
// whose stored tree disagrees with its entries. Open checks the tree in
// its replay, but VerifyChain opens with the anchor unchecked, so the
// replay (and the tree check in it) never runs, and verifyChainAgainst
// checks the chain alone.
func TestRedteamTree_VerifyChainSeesDamagedTree(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-a", f.patchRequest("act-a"))
	f.submit("worker-a", a.envelope)
	rtFlipLastLeaf(t, f)
	if _, err := Open(f.path, f.opts()); err == nil {
		t.Fatal("Open of the damaged tree succeeded; the premise of this test is gone")
	}
	rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err == nil && rep.OK() {
		t.Fatalf("VerifyChain of a store whose tree disagrees with its entries = ok (%+v)", rep)
	}
}

// Ensure that a read-only receiver with the key (observe receipt --proof
// --key without --anchor) signs no note over a tree it has not checked
// against the entries. Today a read-only Open without an anchor checks
// nothing of the tree, and SignedCheckpoint signs whatever root the tree
// bucket gives.
func TestRedteamTree_ReadOnlySignsUncheckedTree(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-a", f.patchRequest("act-a"))
	f.submit("worker-a", a.envelope)
	rtFlipLastLeaf(t, f)
	ro, err := Open(f.path, &Options{ReadOnly: true, Key: testKey})
	if err != nil {
		return // refused at open: holds
	}
	defer ro.Close()
	if _, err := ro.SignedCheckpoint(); err == nil {
		t.Fatal("a read-only receiver signed a checkpoint note over a tree that disagrees with its entries")
	}
}

// Ensure that someone who can write the database file but does not hold
// the receiver key cannot get a receipt proof that verify-receipt accepts
// for a decision the receiver never made. The attack: rewrite the tree
// bucket so that the leaf of an applied submit is the hash of a forged
// entry (same seq and prev, another action), all records consistent; the
// operator's read-only observe receipt --proof then signs the forged root,
// and the forged entry's inclusion proof verifies under the receiver key.
func TestRedteamTree_ForgedLeafGetsSigned(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-a", f.patchRequest("act-a"))
	res := f.submit("worker-a", a.envelope)
	head := f.r.Head().Seq
	var forged []byte
	var stored memHashes
	rtTreeDamage(t, f, func(entries map[uint64][]byte, tree *bolt.Bucket) error {
		e, err := audit.DecodeEntry(entries[res.AuditSeq])
		if err != nil {
			return err
		}
		e.Action = "forged-action"
		c := audit.NewChain(audit.Head{Seq: res.AuditSeq - 1, Hash: audit.HashEntry(entries[res.AuditSeq-1])})
		if forged, _, err = c.Append(&e); err != nil {
			return err
		}
		for seq := uint64(1); seq <= head; seq++ {
			raw := entries[seq]
			if seq == res.AuditSeq {
				raw = forged
			}
			hs, err := tlog.StoredHashes(int64(seq-1), raw, stored)
			if err != nil {
				return err
			}
			stored = append(stored, hs...)
			var rec []byte
			for _, h := range hs {
				rec = append(rec, h[:]...)
			}
			if err := tree.Put(audit.SeqKey(seq-1), rec); err != nil {
				return err
			}
		}
		return nil
	})
	ro, err := Open(f.path, &Options{ReadOnly: true, Key: testKey})
	if err != nil {
		return // refused at open: holds
	}
	defer ro.Close()
	note, err := ro.SignedCheckpoint()
	if err != nil {
		return // refused to sign: holds
	}
	inc, err := tlog.ProveRecord(int64(head), int64(res.AuditSeq-1), stored)
	if err != nil {
		t.Fatal(err)
	}
	// What receiptproof.Verify checks (that package cannot be imported
	// here): the note opens under the receiver's origin and key, and the
	// forged entry's leaf is in its tree.
	pub := testKey.Public().(ed25519.PublicKey)
	origin, err := checkpoint.ReceiverOrigin(ro.ID(), pub)
	if err != nil {
		t.Fatal(err)
	}
	v, err := checkpoint.NewVerifier(origin, pub)
	if err != nil {
		t.Fatal(err)
	}
	cp, _, err := checkpoint.Open(note, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := tlog.CheckRecord(inc, int64(cp.Size), cp.Root, int64(res.AuditSeq-1), tlog.RecordHash(forged)); err == nil {
		e, _ := audit.DecodeEntry(forged)
		t.Fatalf("a note signed by the receiver key proves audit entry %d as an applied %q that was never submitted", e.Seq, e.Action)
	}
}

// Ensure that after an archive, a damaged record of an archived leaf that
// holds a root of the tree's frontier is caught at Open, or at least not
// signed. Open's TreeChecker trusts the frontier at the base ("trusted as
// far as the frontier it starts from") and checks only the records of
// stored entries against it; a frontier root that no stored leaf has
// combined with yet (here the root of leaves 0..3, combined only when the
// tree reaches 8) is checked by nothing, and the receiver signs a note
// with another root at a size it has already signed: a fork of its own
// log, which a witness would see as the receiver's equivocation.
func TestRedteamTree_ArchivedFrontierUnchecked(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-a", f.patchRequest("act-a"))
	f.submit("worker-a", a.envelope)
	if f.r.Head().Seq < 5 {
		t.Fatalf("head %d, want at least 5", f.r.Head().Seq)
	}
	f.archiveAt(4, "a.kva")
	head := f.r.Head().Seq
	if head >= 8 {
		t.Fatalf("head %d: the root of leaves 0..3 is already combined; the scenario needs a head under 8", head)
	}
	before, err := f.r.SignedCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	rtTreeDamage(t, f, func(entries map[uint64][]byte, tree *bolt.Bucket) error {
		if entries[4] != nil {
			t.Fatalf("entry 4 not archived")
		}
		v := bytes.Clone(tree.Get(audit.SeqKey(3)))
		v[2*tlog.HashSize] ^= 1 // the root of leaves 0..3
		return tree.Put(audit.SeqKey(3), v)
	})
	r, err := Open(f.path, f.opts())
	if err != nil {
		return // caught at open: holds
	}
	defer r.Close()
	after, err := r.SignedCheckpoint()
	if err != nil {
		return // refused to sign: holds
	}
	if r.Head().Seq == head && !bytes.Equal(before, after) {
		t.Fatalf("the receiver signed two notes for tree size %d with different roots:\n%s\n%s", head, before, after)
	}
}
