package kvfence

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/chain"
	"github.com/kvfence/kvfence/internal/defect"
)

// memHashes is a tlog.HashReader over hashes kept in memory.
type memHashes []tlog.Hash

func (m memHashes) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(m)) {
			return nil, fmt.Errorf("no stored hash %d", x)
		}
		out[i] = m[x]
	}
	return out, nil
}

// checkTree checks r's stored Merkle tree: one record per entry up to the
// head and none past it, and, where no entry was archived, every record
// equal to the one rebuilt from the entries alone, in memory, and the
// stored root equal to the rebuilt one. checkChain runs it at the end of
// every test of this package, so every kind of commit the tests make is
// covered.
func checkTree(t testing.TB, r *Receiver) {
	t.Helper()
	head := r.Head()
	err := r.view(func(tx engine.Tx) error {
		var n uint64
		if err := tx.Scan(bucketTree, nil, func(k, _ []byte) error {
			if !bytes.Equal(k, audit.SeqKey(n)) {
				return fmt.Errorf("tree record %d under key %x", n, k)
			}
			n++
			return nil
		}); err != nil {
			return err
		}
		if n != head.Seq {
			return fmt.Errorf("tree of %d leaves, audit head at seq %d", n, head.Seq)
		}
		var mem memHashes
		var archived bool
		for seq := uint64(1); seq <= head.Seq; seq++ {
			raw, err := tx.Get(bucketAudit, audit.SeqKey(seq))
			if err != nil {
				return err
			}
			if raw == nil {
				archived = true
				continue
			}
			if err := auditChain.CheckTreeRecord(tx, seq, raw); err != nil {
				return err
			}
			if archived {
				continue
			}
			hs, err := tlog.StoredHashes(int64(seq-1), raw, mem)
			if err != nil {
				return err
			}
			mem = append(mem, hs...)
			stored, err := tx.Get(bucketTree, audit.SeqKey(seq-1))
			if err != nil {
				return err
			}
			var want []byte
			for _, h := range hs {
				want = append(want, h[:]...)
			}
			if !bytes.Equal(stored, want) {
				return fmt.Errorf("tree record of entry %d differs from the one rebuilt from the entries", seq)
			}
		}
		if archived || head.Seq == 0 {
			return nil
		}
		got, err := auditChain.TreeHash(tx, head.Seq)
		if err != nil {
			return err
		}
		want, err := tlog.TreeHash(int64(head.Seq), mem)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("stored root %x, rebuilt %x", got, want)
		}
		return nil
	})
	if err != nil {
		t.Errorf("merkle tree: %v", err)
	}
}

// Ensure that the tree's size is the head's seq after every kind of
// commit, on both engines: init, scopes and targets, activations, applied,
// repeated and denied submits, holds, and concurrent submits that group
// commit batches together.
func TestTree_SizeIsHeadSeq(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		checkTree(t, f.r)
		a := f.activate("worker-a", "claim-a", f.patchRequest("act-a"))
		f.submit("worker-a", a.envelope)
		f.submit("worker-a", a.envelope) // already applied
		checkTree(t, f.r)
		f.hold("incident")
		if res := f.submit("worker-a", a.envelope); res.Outcome != Denied && res.Outcome != AlreadyApplied {
			t.Fatalf("stale submit = %+v", res)
		}
		b := f.activate("worker-b", "claim-b", f.patchRequest("act-b"))
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				env := b.envelope
				if i%2 == 1 {
					env = a.envelope // denied: a superseded grant
				}
				if _, err := f.r.Submit(f.ctx, "worker-x", env); err != nil {
					t.Errorf("Submit: %v", err)
				}
			})
		}
		wg.Wait()
		checkTree(t, f.r)
		f.reopen()
		checkTree(t, f.r)
		if testing.Short() {
			return
		}
		// Past one chunk of open's tree check (1024 leaves), so that it
		// scans the tree inside the scan of the entries.
		for w := range 32 {
			wg.Go(func() {
				for range 40 {
					if _, err := f.r.Submit(f.ctx, fmt.Sprintf("worker-%d", w), a.envelope); err != nil {
						t.Errorf("Submit: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		if f.r.Head().Seq <= 1100 {
			t.Fatalf("head at %d, want over 1100", f.r.Head().Seq)
		}
		f.reopen()
		checkTree(t, f.r)
	})
}

// Ensure that the checkpoint note verifies with note.Open and with
// checkpoint.Open under the receiver's origin and key, carries the stored
// checkpoint in its extension lines, and that consistency and inclusion
// proofs between notes verify with tlog.CheckTree and tlog.CheckRecord.
func TestSignedCheckpoint(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	pub := testKey.Public().(ed25519.PublicKey)
	origin, err := checkpoint.ReceiverOrigin(f.r.ID(), pub)
	if err != nil {
		t.Fatal(err)
	}
	v, err := checkpoint.NewVerifier(origin, pub)
	if err != nil {
		t.Fatal(err)
	}
	open := func() checkpoint.Checkpoint {
		t.Helper()
		n, err := f.r.SignedCheckpoint()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := note.Open(n, note.VerifierList(v)); err != nil {
			t.Fatalf("note.Open: %v", err)
		}
		c, _, err := checkpoint.Open(n, v)
		if err != nil {
			t.Fatalf("checkpoint.Open: %v", err)
		}
		if c.Origin != origin || c.Size != f.r.Head().Seq {
			t.Fatalf("note %q size %d, want %q size %d", c.Origin, c.Size, origin, f.r.Head().Seq)
		}
		st, err := checkpoint.ParseReceiverState(c.Extensions)
		if err != nil {
			t.Fatal(err)
		}
		var sc audit.SignedCheckpoint
		if err := f.r.view(func(tx engine.Tx) (err error) { sc, err = auditChain.LatestCheckpoint(tx); return err }); err != nil {
			t.Fatal(err)
		}
		want := checkpoint.ReceiverState{Head: sc.Head, State: sc.State, EpochHighWater: sc.EpochHighWater, At: sc.At, Admission: sc.Admission}
		if st != want || st.Head != f.r.Head().Hash {
			t.Fatalf("note state %+v, want %+v", st, want)
		}
		return c
	}
	old := open()
	a := f.activate("worker-a", "claim-a", f.patchRequest("act-a"))
	res := f.submit("worker-a", a.envelope)
	f.hold("incident")
	cur := open()
	tp, err := f.r.ConsistencyProof(old.Size, cur.Size)
	if err != nil {
		t.Fatal(err)
	}
	if err := tlog.CheckTree(tp, int64(cur.Size), cur.Root, int64(old.Size), old.Root); err != nil {
		t.Fatalf("consistency proof %d -> %d: %v", old.Size, cur.Size, err)
	}
	rp, err := f.r.InclusionProof(res.AuditSeq, cur.Size)
	if err != nil {
		t.Fatal(err)
	}
	var raw []byte
	if err := f.r.view(func(tx engine.Tx) (err error) {
		raw, err = tx.Get(bucketAudit, audit.SeqKey(res.AuditSeq))
		raw = bytes.Clone(raw)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := tlog.CheckRecord(rp, int64(cur.Size), cur.Root, int64(res.AuditSeq-1), tlog.RecordHash(raw)); err != nil {
		t.Fatalf("inclusion proof: %v", err)
	}
	// Another entry's bytes are not proven by it.
	if err := tlog.CheckRecord(rp, int64(cur.Size), cur.Root, int64(res.AuditSeq-1), tlog.RecordHash(append(raw, 0))); err == nil {
		t.Fatal("inclusion proof verified other bytes")
	}
	for _, tc := range []struct{ lo, hi uint64 }{{0, 1}, {2, 1}, {1, cur.Size + 1}} {
		if _, err := f.r.ConsistencyProof(tc.lo, tc.hi); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ConsistencyProof(%d, %d) = %v, want ErrInvalidArgument", tc.lo, tc.hi, err)
		}
		if _, err := f.r.InclusionProof(tc.lo, tc.hi); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("InclusionProof(%d, %d) = %v, want ErrInvalidArgument", tc.lo, tc.hi, err)
		}
	}
	// A read-only receiver signs a note only with the receiver's own key.
	f.r.Close()
	defer f.reopen()
	for _, tc := range []struct {
		key      ed25519.PrivateKey
		want     error
		anchored bool
	}{
		{nil, ErrInvalidArgument, true},
		{ed25519.NewKeyFromSeed(make([]byte, 32)), ErrKeyMismatch, true},
		{testKey, nil, true},
		// Without the anchor, open checks no tree, and nothing is signed
		// over a tree that may have been edited in the file.
		{testKey, ErrInvalidArgument, false},
	} {
		opts := &Options{ReadOnly: true, Key: tc.key}
		if tc.anchored {
			opts.Anchor = f.anchor
		}
		ro, err := f.openStore(opts, defect.Variant{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ro.SignedCheckpoint()
		ro.Close()
		if !errors.Is(err, tc.want) {
			t.Fatalf("read-only SignedCheckpoint = %v, want %v", err, tc.want)
		}
	}
}

// Ensure that Open refuses a store whose stored tree disagrees with its
// entries: a flipped hash, a missing record, a record of the wrong length.
// Without the tree check in open's replay each of these opens.
func TestOpen_DamagedTree(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(v []byte) []byte
	}{
		{"hash flipped", func(v []byte) []byte { v = bytes.Clone(v); v[0] ^= 1; return v }},
		{"record deleted", func([]byte) []byte { return nil }},
		{"record shortened", func(v []byte) []byte { return v[:len(v)-1] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, defect.Variant{})
			a := f.activate("worker-a", "claim-a", f.patchRequest("act-a"))
			f.submit("worker-a", a.envelope)
			seq := f.r.Head().Seq - 1
			key := audit.SeqKey(seq - 1)
			f.r.Close()
			db, err := bolt.Open(f.path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			var orig []byte
			err = db.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketTree)
				orig = bytes.Clone(b.Get(key))
				if v := tc.damage(orig); v != nil {
					return b.Put(key, v)
				}
				return b.Delete(key)
			})
			db.Close()
			if err != nil {
				t.Fatal(err)
			}
			_, err = Open(f.path, f.opts())
			if !errors.Is(err, ErrBadFormat) || !errors.Is(err, chain.ErrTreeMismatch) {
				t.Fatalf("Open(damaged tree) = %v, want ErrBadFormat wrapping ErrTreeMismatch", err)
			}
			storePutClosed(t, f, bucketTree, string(key), orig)
			f.reopen()
		})
	}
}

// Ensure that a database of an earlier format is refused at Open with an
// error that says what it is and what to do: format "2", without the
// tree, format "3", whose checkpoints do not sign its root, and format
// "4", whose state digest is of SHAKE128 terms; and that a format this
// code does not know is refused too.
func TestOpen_OldFormatsRefused(t *testing.T) {
	for _, tc := range []struct {
		format   string
		dropTree bool
		says     []string
	}{
		{"1", true, []string{"format version 1 predates the state digest", "initialise a new receiver"}},
		{"2", true, []string{"format version 2 predates the Merkle tree", "initialise a new receiver"}},
		{"3", false, []string{"format version 3 predates checkpoints that sign the root", "initialise a new receiver"}},
		{"4", false, []string{"format version 4 predates the state digest of format 5", "BLAKE3", "initialise a new receiver"}},
		{"6", false, []string{`format version "6", want "5"`}},
	} {
		t.Run(tc.format, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.db")
			anchor := &audit.MemAnchor{}
			if err := Init(path, &InitOptions{ReceiverID: "r1", Key: testKey, Anchor: anchor}); err != nil {
				t.Fatal(err)
			}
			if r, err := Open(path, &Options{Key: testKey, Anchor: anchor}); err != nil {
				t.Fatalf("Open(format %s) = %v", formatVersion, err)
			} else {
				r.Close()
			}
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error {
				if tc.dropTree {
					if err := tx.DeleteBucket(bucketTree); err != nil {
						return err
					}
				}
				return tx.Bucket(bucketMeta).Put(metaFormat, []byte(tc.format))
			})
			db.Close()
			if err != nil {
				t.Fatal(err)
			}
			_, err = Open(path, &Options{Key: testKey, Anchor: anchor})
			if !errors.Is(err, ErrBadFormat) {
				t.Fatalf("Open(format %s) = %v, want ErrBadFormat", tc.format, err)
			}
			for _, want := range tc.says {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("Open(format %s) = %v, want it to say %q", tc.format, err, want)
				}
			}
		})
	}
}
