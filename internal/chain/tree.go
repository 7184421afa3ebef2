package chain

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
)

// ErrTreeMismatch means a record of the stored Merkle tree is not what its
// audit entry and the stored hashes before it make, or the stored tree's
// root is not the one a signed checkpoint names: the tree bucket was
// damaged or edited apart from the entries. It is audit.ErrTreeMismatch,
// so that every integrity check recognises it.
var ErrTreeMismatch = audit.ErrTreeMismatch

// The tree bucket (Layout.Tree) keeps the RFC 6962 tree over the audit
// entries: entry seq is leaf seq-1, whose leaf hash is tlog.RecordHash of
// the entry's stored bytes (the bytes the hash chain covers). Under the key
// audit.SeqKey(seq-1) it holds tlog.StoredHashes of that leaf, concatenated:
// the leaf hash and the root of every complete subtree that the leaf
// completes. One key per entry keeps the write to one Put; a stored hash
// index maps to its record by treeRecord.

// treeRecord returns the leaf whose stored hashes hold the stored hash
// index, and the hash's position among them.
func treeRecord(index int64) (leaf int64, pos int) {
	level, n := tlog.SplitStoredHashIndex(index)
	return (n+1)<<level - 1, level
}

// treeRecordLen is the length in bytes of leaf n's stored hashes.
func treeRecordLen(n int64) int {
	return (1 + bits.TrailingZeros64(uint64(n+1))) * tlog.HashSize
}

// treeReader is a tlog.HashReader over the tree bucket of one transaction;
// it sees what the transaction itself has written.
type treeReader struct {
	tx     engine.Tx
	bucket []byte
}

// ReadHashes returns the stored hashes at indexes, or an error wrapping
// ErrTreeMismatch for one that is missing or of the wrong length.
func (r treeReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, index := range indexes {
		if index < 0 {
			return nil, fmt.Errorf("%w: stored hash index %d", ErrTreeMismatch, index)
		}
		leaf, pos := treeRecord(index)
		v, err := r.tx.Get(r.bucket, audit.SeqKey(uint64(leaf)))
		if err != nil {
			return nil, err
		}
		if v == nil {
			return nil, fmt.Errorf("%w: no stored hashes for leaf %d (entry %d)", ErrTreeMismatch, leaf, leaf+1)
		}
		if len(v) != treeRecordLen(leaf) {
			return nil, fmt.Errorf("%w: the stored hashes of leaf %d are %d bytes, want %d", ErrTreeMismatch, leaf, len(v), treeRecordLen(leaf))
		}
		copy(out[i][:], v[pos*tlog.HashSize:])
	}
	return out, nil
}

// TreeReader returns a tlog.HashReader over the stored tree in tx. The
// layout must have a Tree bucket.
func (l Layout) TreeReader(tx engine.Tx) tlog.HashReader {
	return treeReader{tx: tx, bucket: l.Tree}
}

// treeRecordFor returns the stored hashes of the entry at seq, whose stored
// bytes are raw, computed from raw and the stored hashes before it.
func (l Layout) treeRecordFor(tx engine.Tx, seq uint64, raw []byte) ([]byte, error) {
	if seq == 0 {
		return nil, fmt.Errorf("%w: entry at seq 0", ErrBadChain)
	}
	hs, err := tlog.StoredHashes(int64(seq-1), raw, l.TreeReader(tx))
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(hs)*tlog.HashSize)
	for _, h := range hs {
		b = append(b, h[:]...)
	}
	return b, nil
}

// CheckTreeRecord returns an error wrapping ErrTreeMismatch unless the
// stored hashes of the entry at seq are what its stored bytes raw and the
// stored hashes before it make. Checked in seq order from the first entry,
// it proves the whole stored tree equal to the one the entries make.
func (l Layout) CheckTreeRecord(tx engine.Tx, seq uint64, raw []byte) error {
	want, err := l.treeRecordFor(tx, seq, raw)
	if err != nil {
		return err
	}
	got, err := tx.Get(l.Tree, audit.SeqKey(seq-1))
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%w: the stored hashes of entry %d are not its leaf's", ErrTreeMismatch, seq)
	}
	return nil
}

// TreeHash returns the root of the stored tree of size leaves.
func (l Layout) TreeHash(tx engine.Tx, size uint64) (tlog.Hash, error) {
	return tlog.TreeHash(int64(size), l.TreeReader(tx))
}

// FrontierKeys returns the tree keys that appending the leaf after a tree
// of size leaves reads, in no order: the records holding the roots of the
// complete subtrees the tree is made of. A batch that prefetches them
// reads nothing else of the tree, since each later append of the batch
// reads only hashes the batch wrote or these.
func FrontierKeys(size uint64) [][]byte {
	var keys [][]byte
	var start uint64
	for level := 63; level >= 0; level-- {
		if size&(1<<uint(level)) == 0 {
			continue
		}
		start += 1 << uint(level)
		keys = append(keys, audit.SeqKey(start-1))
	}
	return keys
}

// treeCheckChunk is how many leaves a TreeChecker checks with one scan of
// the tree bucket: a bound on its memory, and on etcd one range read.
var treeCheckChunk = 1024

// TreeChecker checks the stored tree against the entries in seq order,
// without a read per entry: it keeps the roots of the complete subtrees
// (the frontier) of the tree checked so far, and compares each stored
// record, read by a scan, with the one its leaf hash and the frontier
// make. Records before the first entry it is given (archived entries')
// are trusted as far as the frontier it starts from.
type TreeChecker struct {
	l        Layout
	tx       engine.Tx
	frontier []tlog.Hash
	// size is the number of leaves checked, or trusted at the start.
	size uint64
	// pending are the leaf hashes of the entries after size not yet
	// checked.
	pending []tlog.Hash
}

// NewTreeChecker returns a checker whose first entry is firstSeq, with
// the frontier of the stored tree of firstSeq-1 leaves.
func (l Layout) NewTreeChecker(tx engine.Tx, firstSeq uint64) (*TreeChecker, error) {
	if firstSeq == 0 {
		return nil, fmt.Errorf("%w: entry at seq 0", ErrBadChain)
	}
	c := &TreeChecker{l: l, tx: tx, size: firstSeq - 1}
	var start uint64
	for level := 63; level >= 0; level-- {
		if c.size&(1<<uint(level)) == 0 {
			continue
		}
		hs, err := l.TreeReader(tx).ReadHashes([]int64{tlog.StoredHashIndex(level, int64(start>>uint(level)))})
		if err != nil {
			return nil, err
		}
		c.frontier = append(c.frontier, hs[0])
		start += 1 << uint(level)
	}
	return c, nil
}

// Add takes the entry at seq, whose stored bytes are raw; entries must
// come in seq order from the first. It checks a chunk of records when
// enough entries are pending, and returns an error wrapping
// ErrTreeMismatch for the first record that differs.
func (c *TreeChecker) Add(seq uint64, raw []byte) error {
	if want := c.size + uint64(len(c.pending)) + 1; seq != want {
		return fmt.Errorf("%w: entry %d where entry %d comes next", ErrTreeMismatch, seq, want)
	}
	c.pending = append(c.pending, tlog.RecordHash(raw))
	if len(c.pending) == treeCheckChunk {
		return c.Flush()
	}
	return nil
}

// Flush checks the records of the pending entries.
func (c *TreeChecker) Flush() error {
	if len(c.pending) == 0 {
		return nil
	}
	i := 0
	var rec []byte
	err := c.tx.Scan(c.l.Tree, audit.SeqKey(c.size), func(k, v []byte) error {
		if i == len(c.pending) {
			return engine.StopScan
		}
		leaf := c.size
		if !bytes.Equal(k, audit.SeqKey(leaf)) {
			return fmt.Errorf("%w: no stored hashes for leaf %d (entry %d)", ErrTreeMismatch, leaf, leaf+1)
		}
		h := c.pending[i]
		rec = append(rec[:0], h[:]...)
		for n := leaf; n&1 == 1; n >>= 1 {
			left := c.frontier[len(c.frontier)-1]
			c.frontier = c.frontier[:len(c.frontier)-1]
			h = tlog.NodeHash(left, h)
			rec = append(rec, h[:]...)
		}
		c.frontier = append(c.frontier, h)
		if !bytes.Equal(v, rec) {
			return fmt.Errorf("%w: the stored hashes of entry %d are not its leaf's", ErrTreeMismatch, leaf+1)
		}
		c.size++
		i++
		return nil
	})
	if err == nil && i < len(c.pending) {
		err = fmt.Errorf("%w: no stored hashes for leaf %d (entry %d)", ErrTreeMismatch, c.size, c.size+1)
	}
	c.pending = c.pending[:0]
	return err
}

// Finish checks the pending entries' records, as Flush does, and then
// that the tree holds no record past the last leaf checked: no entry makes
// one, so it is damage, or a record left for a later append to find.
// Called after the last entry, it completes the check of the stored tree.
func (c *TreeChecker) Finish() error {
	if err := c.Flush(); err != nil {
		return err
	}
	var past []byte
	err := c.tx.Scan(c.l.Tree, audit.SeqKey(c.size), func(k, _ []byte) error {
		past = bytes.Clone(k)
		return engine.StopScan
	})
	if err != nil {
		return err
	}
	if past != nil {
		return fmt.Errorf("%w: a stored record at key %x, past the tree of %d leaves that the entries make", ErrTreeMismatch, past, c.size)
	}
	return nil
}

// CheckRoot returns an error wrapping ErrTreeMismatch unless the stored
// tree's root at cp.Seq is cp.Root: what names the checkpoint in messages
// ("the anchor", "the database's newest checkpoint"). Beside a TreeChecker
// run over the stored entries, it also covers the records of archived
// leaves that hold roots of the frontier at cp.Seq, which no stored leaf
// has combined with yet and which the checker therefore trusts.
func (l Layout) CheckRoot(tx engine.Tx, cp audit.Checkpoint, what string) error {
	root, err := l.TreeHash(tx, cp.Seq)
	if err != nil {
		return err
	}
	if audit.Hash(root) != cp.Root {
		return fmt.Errorf("%w: the stored tree's root at seq %d is %x, but %s signed by the receiver's key names %x: "+
			"the tree does not match what was signed", ErrTreeMismatch, cp.Seq, root[:], what, cp.Root[:])
	}
	return nil
}

// CheckTree runs a TreeChecker over every stored entry of the chain in
// tx, from the first stored one, and returns the first mismatch. A chain
// without entries has nothing to check.
func (l Layout) CheckTree(tx engine.Tx) error {
	var tree *TreeChecker
	var treeErr error
	err := tx.Scan(l.Audit, nil, func(k, v []byte) error {
		if len(k) != 8 {
			return nil
		}
		seq := binary.BigEndian.Uint64(k)
		if tree == nil {
			if tree, treeErr = l.NewTreeChecker(tx, seq); treeErr != nil {
				return engine.StopScan
			}
		}
		if treeErr = tree.Add(seq, v); treeErr != nil {
			return engine.StopScan
		}
		return nil
	})
	if treeErr != nil {
		return treeErr
	}
	if err != nil {
		return err
	}
	if tree == nil {
		return nil
	}
	return tree.Finish()
}
