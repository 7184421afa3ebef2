package ledger

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	bolt "go.etcd.io/bbolt"
)

// treeFixture is a ledger with a few approvals, closed, and its head.
func treeFixture(t *testing.T) (*fixture, audit.Head) {
	t.Helper()
	f := newFixture(t)
	l := f.open()
	for _, a := range []string{"act-1", "act-2", "act-3", "act-4"} {
		if _, err := l.Approve(ctx, ApproveRequest{Action: a, RequestSHA256: sha256.Sum256([]byte("req " + a)), Approver: "alice", TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	head := l.Head()
	l.Close()
	return f, head
}

// editFile runs fn on the closed ledger file's buckets.
func editFile(t *testing.T, f *fixture, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(f.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// flipRecord flips a bit of the stored tree record of entry seq.
func flipRecord(seq uint64, at int) func(*testing.T, *fixture) {
	return func(t *testing.T, f *fixture) {
		editFile(t, f, func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketTree)
			v := bytes.Clone(b.Get(audit.SeqKey(seq - 1)))
			v[at] ^= 1
			return b.Put(audit.SeqKey(seq-1), v)
		})
	}
}

// otherRoot re-signs cp, with the ledger's key, with another root.
func otherRoot(t *testing.T, f *fixture, cp audit.Checkpoint) audit.SignedCheckpoint {
	t.Helper()
	cp.Root[0] ^= 1
	sc, err := audit.Sign(f.key, cp)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// Ensure that a ledger whose stored tree is not the one its entries make,
// or whose roots are not the ones its anchor and its newest checkpoint
// sign, is refused at open (audit.ErrTreeMismatch) and reported by
// VerifyChain as tree_mismatch: the tree check at open and in verify, and
// the root comparisons, each go red without their check.
func TestLedgerTree_Mismatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(*testing.T, *fixture)
	}{
		{"head leaf hash", func(t *testing.T, f *fixture) { flipRecord(5, 0)(t, f) }},
		{"inner subtree root", func(t *testing.T, f *fixture) { flipRecord(4, 2*tlog.HashSize)(t, f) }},
		{"first leaf hash", func(t *testing.T, f *fixture) { flipRecord(1, 0)(t, f) }},
		{"record missing", func(t *testing.T, f *fixture) {
			editFile(t, f, func(tx *bolt.Tx) error { return tx.Bucket(bucketTree).Delete(audit.SeqKey(2)) })
		}},
		{"anchor signs another root", func(t *testing.T, f *fixture) {
			cur, err := f.anchor.Load()
			if err != nil {
				t.Fatal(err)
			}
			if err := f.anchor.Supersede(cur, otherRoot(t, f, cur.Checkpoint)); err != nil {
				t.Fatal(err)
			}
		}},
		{"stored checkpoint signs another root", func(t *testing.T, f *fixture) {
			editFile(t, f, func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketCheckpoints)
				sc, err := audit.ParseSignedCheckpoint(b.Get(checkpointLatest))
				if err != nil {
					return err
				}
				raw, err := otherRoot(t, f, sc.Checkpoint).Marshal()
				if err != nil {
					return err
				}
				return b.Put(checkpointLatest, raw)
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, head := treeFixture(t)
			if head.Seq != 5 {
				t.Fatalf("head %d, the cases name entries of a head at 5", head.Seq)
			}
			tc.damage(t, f)
			if l, err := Open(f.path, f.opts()); !errors.Is(err, audit.ErrTreeMismatch) || !errors.Is(err, ErrBadFormat) {
				if err == nil {
					l.Close()
				}
				t.Fatalf("Open = %v, want ErrBadFormat wrapping ErrTreeMismatch", err)
			}
			rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: f.key.Public().(ed25519.PublicKey)})
			if err != nil || rep.Problem != audit.ProblemTreeMismatch || !errors.Is(rep.Err(), audit.ErrTreeMismatch) {
				t.Fatalf("VerifyChain = %+v, %v; want tree_mismatch", rep, err)
			}
		})
	}
}

// Ensure that a ledger file of an earlier format, or of one this code
// does not know, is refused with a message that names it; the first
// format, without the tree, says what it lacks.
func TestLedgerTree_OldFormatsRefused(t *testing.T) {
	for _, tc := range []struct {
		format string
		says   string
	}{
		{"kvfence-ledger/1", "predates the Merkle tree"},
		{"kvfence-ledger/3", `want "kvfence-ledger/2"`},
		{"", `want "kvfence-ledger/2"`},
	} {
		t.Run(tc.format, func(t *testing.T) {
			f, _ := treeFixture(t)
			editFile(t, f, func(tx *bolt.Tx) error {
				if tc.format == formatVersion1 {
					// The first format had no tree.
					if err := tx.DeleteBucket(bucketTree); err != nil {
						return err
					}
				}
				return tx.Bucket(bucketMeta).Put(metaFormat, []byte(tc.format))
			})
			// The fixture's final chain check opens the file as it is.
			_, err := Open(f.path, f.opts())
			if !errors.Is(err, ErrBadFormat) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Open of format %q = %v, want ErrBadFormat saying %q", tc.format, err, tc.says)
			}
		})
	}
}
