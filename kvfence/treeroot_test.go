package kvfence

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"testing"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// keepFiles saves f's database and anchor files, with f's receiver
// closed, and puts them back at the test's end, so that the fixture's own
// checks see the store it made.
func keepFiles(t *testing.T, f *fixture) {
	t.Helper()
	f.r.Close()
	saved := map[string][]byte{}
	for _, p := range []string{f.path, f.anchor.Path} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		saved[p] = b
	}
	t.Cleanup(func() {
		for p, b := range saved {
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		f.reopen()
	})
}

// resignedRoot returns cp signed by the receiver key with another root.
func resignedRoot(t *testing.T, cp audit.Checkpoint) audit.SignedCheckpoint {
	t.Helper()
	cp.Root[0] ^= 1
	sc, err := audit.Sign(testKey, cp)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// Ensure that a stored tree that disagrees with the entries, or whose
// root at a signed size is not the signed one, keeps the receiver from
// opening (ErrBadFormat wrapping audit.ErrTreeMismatch, an integrity
// error) and is verify-chain's tree_mismatch. "archived frontier record"
// goes red without the anchor's root compared with the tree at open and in
// verify-chain (the TreeChecker trusts that record); "newest checkpoint
// signs another root" without the newest checkpoint's; "first leaf" in
// verify-chain without its tree check over the entries, since the roots
// at the signed sizes do not read that record.
func TestTreeRoot_SignedRootsChecked(t *testing.T) {
	for _, tc := range []struct {
		name    string
		archive bool
		damage  func(t *testing.T, f *fixture)
	}{
		{"head leaf", false, func(t *testing.T, f *fixture) {
			head := f.r.Head().Seq
			keepFiles(t, f)
			treeEdit(t, f, head-1, 0)
		}},
		{"first leaf, which no root at the head reads", false, func(t *testing.T, f *fixture) {
			keepFiles(t, f)
			treeEdit(t, f, 0, 0)
		}},
		{"archived frontier record", true, func(t *testing.T, f *fixture) {
			keepFiles(t, f)
			// Leaf 3's record holds the root of leaves 0..3, which no
			// stored leaf has combined with below a tree of 8.
			treeEdit(t, f, 3, 2*tlog.HashSize)
		}},
		{"anchor signs another root", false, func(t *testing.T, f *fixture) {
			keepFiles(t, f)
			cur, err := f.anchor.Load()
			if err != nil {
				t.Fatal(err)
			}
			if err := f.anchor.Supersede(cur, resignedRoot(t, cur.Checkpoint)); err != nil {
				t.Fatal(err)
			}
		}},
		{"newest checkpoint signs another root", false, func(t *testing.T, f *fixture) {
			keepFiles(t, f)
			db, err := bolt.Open(f.path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := db.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketCheckpoints)
				sc, err := audit.ParseSignedCheckpoint(b.Get([]byte("latest")))
				if err != nil {
					return err
				}
				raw, err := resignedRoot(t, sc.Checkpoint).Marshal()
				if err != nil {
					return err
				}
				return b.Put([]byte("latest"), raw)
			}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, defect.Variant{})
			a := f.activate("worker-a", "claim-a", f.patchRequest("act-a"))
			f.submit("worker-a", a.envelope)
			if tc.archive {
				f.archiveAt(4, "a.kva")
				if h := f.r.Head().Seq; h < 5 || h >= 8 {
					t.Fatalf("head %d, the case needs 5 to 7", h)
				}
			}
			tc.damage(t, f)
			r, err := Open(f.path, f.opts())
			if err == nil {
				r.Close()
			}
			if !errors.Is(err, audit.ErrTreeMismatch) || !errors.Is(err, ErrBadFormat) || !IsIntegrityError(err) {
				t.Fatalf("Open = %v, want ErrBadFormat wrapping audit.ErrTreeMismatch", err)
			}
			rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
			if err != nil || rep.Problem != audit.ProblemTreeMismatch || !errors.Is(rep.Err(), audit.ErrTreeMismatch) {
				t.Fatalf("VerifyChain = %v (%s), %v; want tree_mismatch", rep.Problem, rep.Detail, err)
			}
		})
	}
}

// treeEdit flips a bit at offset at of the stored tree record of leaf.
func treeEdit(t *testing.T, f *fixture, leaf uint64, at int) {
	t.Helper()
	db, err := bolt.Open(f.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTree)
		v := bytes.Clone(b.Get(audit.SeqKey(leaf)))
		if len(v) <= at {
			t.Fatalf("the record of leaf %d is %d bytes", leaf, len(v))
		}
		v[at] ^= 1
		return b.Put(audit.SeqKey(leaf), v)
	}); err != nil {
		t.Fatal(err)
	}
}
