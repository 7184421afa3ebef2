package kvfence

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"math/bits"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// noteSizeRoot returns the tree size and root lines of a checkpoint note.
func noteSizeRoot(t *testing.T, n []byte) (string, string) {
	t.Helper()
	lines := bytes.SplitN(n, []byte("\n"), 4)
	if len(lines) < 4 {
		t.Fatalf("note %q has no size and root lines", n)
	}
	return string(lines[1]), string(lines[2])
}

// Ensure that the receiver never signs two roots for one tree size in its
// checkpoint notes when someone who can only restore the database file
// takes away a commit that its anchor never covered: the note must not
// vouch for a checkpoint that the anchor does not hold (the commit is not
// acknowledged, and a copy of the database from before it opens on the
// anchor), or the restored receiver's next commit signs another root for
// the same size, the equivocation a witness holds against the receiver.
func TestRedteamRoot_NoteBeforeAnchorTwoRoots(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.hold("before")
	f.r.Close()
	backup := filepath.Join(t.TempDir(), "before.db")
	copyFile(t, f.path, backup)
	f.reopen()

	fa := &failingAnchor{AnchorStore: f.anchor}
	f.r.opts.Anchor = fa
	fa.fail = true
	if _, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "history one"}); err == nil {
		t.Fatal("Hold acknowledged a write its anchor does not cover")
	}
	first, err := f.r.SignedCheckpoint()
	if err != nil {
		t.Logf("SignedCheckpoint after the unacknowledged commit: %v", err)
	}

	// The database is put back as it was before that commit; its anchor,
	// never advanced, agrees with it.
	f.r.Close()
	copyFile(t, backup, f.path)
	f.reopen()
	f.hold("history two")
	second, err := f.r.SignedCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	if first == nil {
		return
	}
	s1, r1 := noteSizeRoot(t, first)
	s2, r2 := noteSizeRoot(t, second)
	if s1 == s2 && r1 != r2 {
		t.Fatalf("the receiver signed two roots for tree size %s:\n%s\n%s", s1, first, second)
	}
}

// Ensure that a recovery does not sign a root over a stored tree it never
// checked: the recovery opens the database without its anchor, and its
// entry's checkpoint takes the root from the stored frontier records, so a
// record edited in the file (here the one holding the root of the largest
// complete subtree at the head) becomes a root the receiver signs and
// anchors. The recovery must check the tree against the entries and the
// database's newest signed checkpoint first (audit.ErrTreeMismatch).
func TestRedteamRoot_RecoverySignsUncheckedTree(t *testing.T) {
	f, _ := lostAnchorFixture(t)
	q, err := InspectDatabase(f.path)
	if err != nil {
		t.Fatal(err)
	}
	k := bits.Len64(q.Head.Seq) - 1
	treeEdit(t, f, 1<<k-1, k*tlog.HashSize)
	adm := signed(t, recoveryKey, f.lostAnchorAdmission(0))
	res, err := Recover(f.path, adm, f.recoverOpts())
	if err == nil {
		_, oerr := Open(f.path, f.opts())
		t.Fatalf("Recover over an edited tree = %+v, signed and anchored; the next Open: %v", res, oerr)
	}
	if !errors.Is(err, audit.ErrTreeMismatch) {
		t.Fatalf("Recover over an edited tree = %v, want audit.ErrTreeMismatch", err)
	}
	// Put the record back, so that the fixture's checks see a whole tree.
	treeEdit(t, f, 1<<k-1, k*tlog.HashSize)
	f.r, err = Open(f.path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.r.Close() })
}

// Ensure that verify-chain does not print ok for a tree bucket holding a
// record past the head: no entry makes it, so it is damage (or a record
// planted for the next append to find), and the tree check that stops at
// the head's record never reads it.
func TestRedteamRoot_VerifyChainRecordPastHead(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.hold("one")
	head := f.r.Head().Seq
	rtTreeDamage(t, f, func(_ map[uint64][]byte, tree *bolt.Bucket) error {
		// Leaf head is entry head+1's, which does not exist.
		return tree.Put(audit.SeqKey(head), bytes.Repeat([]byte{1}, tlog.HashSize))
	})
	// Taken away again before the fixture's restore and checks run.
	t.Cleanup(func() {
		db, err := bolt.Open(f.path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketTree).Delete(audit.SeqKey(head)) }); err != nil {
			t.Fatal(err)
		}
	})
	rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err == nil && rep.OK() {
		t.Fatalf("VerifyChain of a tree with a record past the head = ok (%+v)", rep)
	}
	if rep.Problem != audit.ProblemTreeMismatch {
		t.Fatalf("VerifyChain of a tree with a record past the head = %s (%v), want tree_mismatch", rep.Problem, err)
	}
}
