package chain

import (
	"context"
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/boltengine"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/tlog"
)

var layout = Layout{Audit: []byte("audit"), Checkpoints: []byte("checkpoints"), Tree: []byte("tree")}

func newEngine(t *testing.T) engine.Engine {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "c.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := boltengine.New(db, nil)
	t.Cleanup(func() { e.Close() })
	err = e.Update(context.Background(), func(tx engine.Tx) error {
		for _, b := range [][]byte{layout.Audit, layout.Tree} {
			if err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		return tx.CreateBucket(layout.Checkpoints)
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Ensure that InitCheckpoint returns only the init checkpoint of a chain
// whose only entry is the head, signed by the right key for the right id.
func TestInitCheckpoint(t *testing.T) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	other := ed25519.NewKeyFromSeed(append(make([]byte, ed25519.SeedSize-1), 1))
	pub := key.Public().(ed25519.PublicKey)
	c := audit.NewChain(audit.Head{})
	if _, _, err := c.Append(&audit.Entry{Kind: "init", At: 1}); err != nil {
		t.Fatal(err)
	}
	head := c.Head()
	sign := func(k ed25519.PrivateKey, id string, seq uint64) []byte {
		sc, err := audit.Sign(k, audit.Checkpoint{Root: audit.Hash{0x7e}, Receiver: id, Seq: seq, Head: head.Hash, At: 1})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := sc.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	for _, tc := range []struct {
		name   string
		stored []byte
		head   audit.Head
		ok     bool
	}{
		{"the init checkpoint", sign(key, "r", 1), head, true},
		{"a chain with history", sign(key, "r", 1), audit.Head{Seq: 2, Hash: head.Hash}, false},
		{"another key", sign(other, "r", 1), head, false},
		{"another id", sign(key, "s", 1), head, false},
		{"another head", sign(key, "r", 1), audit.Head{Seq: 1, Hash: audit.Hash{1}}, false},
		{"nothing stored", nil, head, false},
		{"garbage stored", []byte("garbage"), head, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t)
			if tc.stored != nil {
				if err := e.Update(context.Background(), func(tx engine.Tx) error {
					return tx.Put(layout.Checkpoints, Latest, tc.stored)
				}); err != nil {
					t.Fatal(err)
				}
			}
			err := e.View(context.Background(), func(tx engine.Tx) error {
				sc, err := layout.InitCheckpoint(tx, pub, "r", tc.head)
				switch {
				case tc.ok && (err != nil || sc.Seq != 1 || sc.Head != head.Hash):
					t.Fatalf("InitCheckpoint = %+v, %v; want the init checkpoint", sc, err)
				case !tc.ok && !errors.Is(err, audit.ErrAnchorMissing):
					t.Fatalf("InitCheckpoint = %v, want ErrAnchorMissing", err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Ensure that a writer appends linked entries, refuses to overwrite one,
// and that its checkpoint moves the head key, which ReadHead and LoadHead
// then agree on; a head key that disagrees with the newest entry is
// reported by LoadHead.
func TestWriterAndHead(t *testing.T) {
	e := newEngine(t)
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	ctx := context.Background()
	var head audit.Head
	var last audit.SignedCheckpoint
	var leaves []tlog.Hash
	for range 3 {
		err := e.Update(ctx, func(tx engine.Tx) error {
			h := audit.Head{}
			if head.Seq > 0 {
				var err error
				if h, err = layout.ReadHead(tx); err != nil {
					return err
				}
			}
			w := layout.NewWriter(tx, h)
			if _, err := w.Append(&audit.Entry{Kind: "note", At: 1}); err != nil {
				return err
			}
			sc, err := w.Checkpoint(key, audit.Checkpoint{Receiver: "r", At: 1})
			head, last = w.Head(), sc
			raw, gerr := tx.Get(layout.Audit, audit.SeqKey(head.Seq))
			leaves = append(leaves, tlog.RecordHash(raw))
			return errors.Join(err, gerr)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The checkpoint signs the root of the entries' tree, as a verifier
	// computes it from the entries alone.
	if want := treeOf(t, leaves); last.Root != audit.Hash(want) || last.Seq != 3 {
		t.Fatalf("checkpoint at seq %d has root %x, want the entries' root %x", last.Seq, last.Root, want)
	}
	err := e.Update(ctx, func(tx engine.Tx) error {
		got, mismatch, err := layout.LoadHead(tx)
		if err != nil || mismatch != nil || got != head || got.Seq != 3 {
			t.Fatalf("LoadHead = %v, %v, %v; want %v", got, mismatch, err, head)
		}
		// A writer on a stale head must not overwrite entry 3.
		stale := layout.NewWriter(tx, audit.Head{Seq: 2})
		if _, err := stale.Append(&audit.Entry{Kind: "note", At: 1}); !errors.Is(err, ErrBadChain) {
			t.Fatalf("Append over entry 3 = %v, want ErrBadChain", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = e.Update(ctx, func(tx engine.Tx) error { return tx.Put(layout.Checkpoints, HeadKey, encodeHead(audit.Head{Seq: 2})) })
	if err != nil {
		t.Fatal(err)
	}
	err = e.View(ctx, func(tx engine.Tx) error {
		if _, mismatch, err := layout.LoadHead(tx); err != nil || !errors.Is(mismatch, ErrHeadMismatch) {
			t.Fatalf("LoadHead with a stale head key = %v, %v; want ErrHeadMismatch", mismatch, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// lateAnchor is an anchor store whose next Store fails without writing
// and lands later, just before the Store after it: a write whose outcome
// was unknown and which applied late.
type lateAnchor struct {
	audit.MemAnchor
	late *audit.SignedCheckpoint
	fail bool
}

func (a *lateAnchor) land() {
	if a.late != nil {
		sc := *a.late
		a.late = nil
		cur, _ := a.MemAnchor.Load()
		if err := a.MemAnchor.Store(&cur, sc); err != nil {
			panic(err)
		}
	}
}

func (a *lateAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	a.land()
	if a.fail {
		a.fail, a.late = false, &next
		return errors.New("anchor write timed out")
	}
	return a.MemAnchor.Store(old, next)
}

// Ensure that Advance goes on from an anchor that another writer of the
// chain, or a late write of this one, moved: a conflict reloads it and
// adopts it if it is in the chain, or refuses it if it is not.
func TestAdvance(t *testing.T) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	sign := func(seq uint64) audit.SignedCheckpoint {
		sc, err := audit.Sign(key, audit.Checkpoint{Root: audit.Hash{0x7e}, Receiver: "r", Seq: seq, Head: audit.Hash{byte(seq)}, At: int64(seq)})
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	inChain := func(audit.SignedCheckpoint) error { return nil }
	store := &lateAnchor{}
	var cur audit.SignedCheckpoint
	if err := store.MemAnchor.Store(nil, sign(1)); err != nil {
		t.Fatal(err)
	}
	cur = sign(1)
	// The write of 2 times out; it lands later.
	store.fail = true
	if err := Advance(store, &cur, sign(2), inChain); err == nil || cur.Seq != 1 {
		t.Fatalf("Advance with a failed write = %v, cached %d; want an error and 1", err, cur.Seq)
	}
	// The write of 3 meets the anchor at 2 and goes on from it.
	if err := Advance(store, &cur, sign(3), inChain); err != nil {
		t.Fatalf("Advance after a late write: %v", err)
	}
	if got, _ := store.Load(); got.Seq != 3 || cur.Seq != 3 {
		t.Fatalf("anchor at %d, cached %d; want 3", got.Seq, cur.Seq)
	}
	// Another writer moved the anchor past this commit: it is covered.
	if err := store.MemAnchor.Store(&cur, sign(5)); err != nil {
		t.Fatal(err)
	}
	if err := Advance(store, &cur, sign(4), inChain); err != nil || cur.Seq != 5 {
		t.Fatalf("Advance behind a newer anchor = %v, cached %d; want covered by 5", err, cur.Seq)
	}
	// An anchor that is not in this chain is refused, not adopted.
	cur = sign(3)
	notOurs := errors.New("not in this chain")
	err := Advance(store, &cur, sign(6), func(audit.SignedCheckpoint) error { return notOurs })
	if !errors.Is(err, notOurs) || cur.Seq != 3 {
		t.Fatalf("Advance over a foreign anchor = %v, cached %d; want refused", err, cur.Seq)
	}
}

// treeOf returns the RFC 6962 root of leaves, computed in memory.
func treeOf(t *testing.T, leaves []tlog.Hash) tlog.Hash {
	t.Helper()
	var stored memStored
	for i, l := range leaves {
		hs, err := tlog.StoredHashesForRecordHash(int64(i), l, stored)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, hs...)
	}
	root, err := tlog.TreeHash(int64(len(leaves)), stored)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// memStored is a tlog.HashReader over stored hashes in a slice.
type memStored []tlog.Hash

func (m memStored) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		out[i] = m[x]
	}
	return out, nil
}
