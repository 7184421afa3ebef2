package chain

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
)

var treeLayout = Layout{Audit: []byte("audit"), Checkpoints: []byte("checkpoints"), Tree: []byte("tree")}

// treeStore appends n entries, a few per transaction, to a new store with
// a tree.
func treeStore(t *testing.T, n int) engine.Engine {
	t.Helper()
	e := newEngine(t) // with the tree bucket
	ctx := context.Background()
	var head audit.Head
	for i := 0; i < n; {
		err := e.Update(ctx, func(tx engine.Tx) error {
			w := treeLayout.NewWriter(tx, head)
			for j := 0; j < 3 && i+j < n; j++ {
				if _, err := w.Append(&audit.Entry{Kind: "hold", At: int64(i + j)}); err != nil {
					return err
				}
			}
			head = w.Head()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		i += 3
	}
	return e
}

// Ensure that the tree written beside the entries is the one tlog builds
// from them, that TreeChecker accepts it from any first entry and over
// several chunks, and that it finds a changed, missing or extra-short
// record, where CheckTreeRecord does too.
func TestTreeChecker(t *testing.T) {
	defer func(n int) { treeCheckChunk = n }(treeCheckChunk)
	treeCheckChunk = 4
	const n = 37
	e := treeStore(t, n)
	ctx := context.Background()
	check := func(tx engine.Tx, first uint64) error {
		c, err := treeLayout.NewTreeChecker(tx, first)
		if err != nil {
			return err
		}
		for seq := first; seq <= n; seq++ {
			raw, err := tx.Get(treeLayout.Audit, audit.SeqKey(seq))
			if err != nil {
				return err
			}
			if err := c.Add(seq, raw); err != nil {
				return err
			}
		}
		return c.Flush()
	}
	err := e.View(ctx, func(tx engine.Tx) error {
		var mem []tlog.Hash
		for seq := uint64(1); seq <= n; seq++ {
			raw, _ := tx.Get(treeLayout.Audit, audit.SeqKey(seq))
			hs, err := tlog.StoredHashes(int64(seq-1), raw, tlog.HashReaderFunc(func(ix []int64) ([]tlog.Hash, error) {
				out := make([]tlog.Hash, len(ix))
				for i, x := range ix {
					out[i] = mem[x]
				}
				return out, nil
			}))
			if err != nil {
				return err
			}
			mem = append(mem, hs...)
			var want []byte
			for _, h := range hs {
				want = append(want, h[:]...)
			}
			if got, _ := tx.Get(treeLayout.Tree, audit.SeqKey(seq-1)); !bytes.Equal(got, want) {
				t.Errorf("record of entry %d is not tlog's", seq)
			}
			if err := treeLayout.CheckTreeRecord(tx, seq, raw); err != nil {
				t.Errorf("CheckTreeRecord(%d): %v", seq, err)
			}
		}
		for _, first := range []uint64{1, 2, 8, 16, 31, n} {
			if err := check(tx, first); err != nil {
				t.Errorf("from entry %d: %v", first, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		seq    uint64
		damage func(v []byte) []byte
	}{
		{"flipped in the first chunk", 3, func(v []byte) []byte { v = bytes.Clone(v); v[5] ^= 1; return v }},
		{"flipped subtree root", 32, func(v []byte) []byte { v = bytes.Clone(v); v[len(v)-1] ^= 1; return v }},
		{"deleted", 20, func([]byte) []byte { return nil }},
		{"shortened", 36, func(v []byte) []byte { return v[:32] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := audit.SeqKey(tc.seq - 1)
			var orig []byte
			err := e.Update(ctx, func(tx engine.Tx) error {
				v, err := tx.Get(treeLayout.Tree, key)
				if err != nil {
					return err
				}
				orig = bytes.Clone(v)
				if d := tc.damage(orig); d != nil {
					return tx.Put(treeLayout.Tree, key, d)
				}
				return tx.Delete(treeLayout.Tree, key)
			})
			if err != nil {
				t.Fatal(err)
			}
			err = e.View(ctx, func(tx engine.Tx) error { return check(tx, 1) })
			if !errors.Is(err, ErrTreeMismatch) {
				t.Errorf("TreeChecker over a damaged record %d = %v, want ErrTreeMismatch", tc.seq, err)
			}
			if err := e.Update(ctx, func(tx engine.Tx) error { return tx.Put(treeLayout.Tree, key, orig) }); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Ensure that FrontierKeys names every tree record that appending the next
// leaves of a batch reads, other than those the batch writes itself, so
// that a prefetched batch reads nothing else of the tree.
func TestFrontierKeys(t *testing.T) {
	var mem []tlog.Hash
	for size := int64(0); size < 300; size++ {
		for batch := int64(1); batch <= 5; batch++ {
			frontier := map[string]bool{}
			for _, k := range FrontierKeys(uint64(size)) {
				frontier[string(k)] = true
			}
			local := append([]tlog.Hash(nil), mem...)
			for n := size; n < size+batch; n++ {
				hs, err := tlog.StoredHashes(n, []byte{byte(n)}, tlog.HashReaderFunc(func(ix []int64) ([]tlog.Hash, error) {
					out := make([]tlog.Hash, len(ix))
					for i, x := range ix {
						leaf, _ := treeRecord(x)
						if leaf < size && !frontier[string(audit.SeqKey(uint64(leaf)))] {
							t.Fatalf("size %d: leaf %d reads record %d, not in the frontier %v", size, n, leaf, FrontierKeys(uint64(size)))
						}
						out[i] = local[x]
					}
					return out, nil
				}))
				if err != nil {
					t.Fatal(err)
				}
				local = append(local, hs...)
			}
		}
		hs, err := tlog.StoredHashes(size, []byte{byte(size)}, tlog.HashReaderFunc(func(ix []int64) ([]tlog.Hash, error) {
			out := make([]tlog.Hash, len(ix))
			for i, x := range ix {
				out[i] = mem[x]
			}
			return out, nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		mem = append(mem, hs...)
	}
}
