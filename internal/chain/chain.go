// Package chain is the audit chain protocol that the receiver and the ledger
// share, over the engine seam: appending entries to an audit bucket, keeping
// the chain's head in a key of its own, signing a checkpoint of the head in
// the same transaction, and reading the chain back for the anchor checks.
//
// The head key is read and written by every transaction that appends or
// checkpoints. On an engine that commits optimistically (etcd) that read is
// compared at the commit, so two processes appending to one chain never
// both commit on the same head: the second one's transaction runs again on
// the new head, and a process whose cached head fell behind learns the
// stored one instead of forking the chain.
package chain

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
)

// Layout names the buckets and keys of one chain.
type Layout struct {
	// Audit is the bucket of the entries, keyed by audit.SeqKey.
	Audit []byte
	// Checkpoints is the bucket of the latest signed checkpoint (under
	// Latest) and of the head key (under HeadKey).
	Checkpoints []byte
	// Tree is the bucket of the RFC 6962 tree over the entries (tree.go),
	// written in the transaction of every append; nil keeps no tree.
	Tree []byte
}

// Keys in the checkpoints bucket.
var (
	// Latest is the key of the newest signed checkpoint.
	Latest = []byte("latest")
	// HeadKey is the key of the chain's head: 8-byte big-endian seq and
	// the 32-byte hash of the entry at it.
	HeadKey = []byte("head")
)

// ErrBadChain means the stored chain or its head key is not what this
// package writes. Callers wrap it in their own format error.
var ErrBadChain = errors.New("audit chain damaged")

// encodeHead is the head key's value.
func encodeHead(h audit.Head) []byte {
	b := make([]byte, 0, 8+len(h.Hash))
	b = append(b, audit.SeqKey(h.Seq)...)
	return append(b, h.Hash[:]...)
}

// ReadHead returns the chain's head as its head key says, or, in a store
// written before the head key existed, as its newest entry says. It is the
// one read a write transaction makes of the chain's position.
func (l Layout) ReadHead(tx engine.Tx) (audit.Head, error) {
	v, err := tx.Get(l.Checkpoints, HeadKey)
	if err != nil {
		return audit.Head{}, err
	}
	if v == nil {
		return l.LastHead(tx)
	}
	var h audit.Head
	if len(v) != 8+len(h.Hash) {
		return h, fmt.Errorf("%w: head key of %d bytes", ErrBadChain, len(v))
	}
	for _, c := range v[:8] {
		h.Seq = h.Seq<<8 | uint64(c)
	}
	copy(h.Hash[:], v[8:])
	if h.Seq == 0 {
		return h, fmt.Errorf("%w: head key at seq 0", ErrBadChain)
	}
	return h, nil
}

// LastHead returns the position of the newest entry in the audit bucket.
// On etcd it costs time in the chain's length: Open uses it, to check the
// head key, and the write path does not.
func (l Layout) LastHead(tx engine.Tx) (audit.Head, error) {
	k, raw, err := tx.Last(l.Audit)
	if err != nil {
		return audit.Head{}, err
	}
	if k == nil {
		return audit.Head{}, fmt.Errorf("%w: empty audit chain", ErrBadChain)
	}
	e, err := audit.DecodeEntry(raw)
	if err != nil {
		return audit.Head{}, fmt.Errorf("%w: newest audit entry: %v", ErrBadChain, err)
	}
	if string(k) != string(audit.SeqKey(e.Seq)) {
		return audit.Head{}, fmt.Errorf("%w: newest audit entry has seq %d under another key", ErrBadChain, e.Seq)
	}
	return audit.Head{Seq: e.Seq, Hash: audit.HashEntry(raw)}, nil
}

// ErrHeadMismatch means the head key names another entry than the newest
// one: entries were copied into the store without the bookkeeping that
// its commits keep beside them.
var ErrHeadMismatch = errors.New("the head key disagrees with the newest audit entry")

// LoadHead returns the head for Open: the newest entry's position. A head
// key that disagrees with it is reported as an error wrapping
// ErrHeadMismatch beside the head, for the caller's state check.
func (l Layout) LoadHead(tx engine.Tx) (audit.Head, error, error) {
	last, err := l.LastHead(tx)
	if err != nil {
		return last, nil, err
	}
	stored, err := l.ReadHead(tx)
	if err != nil {
		return last, nil, err
	}
	if stored != last {
		return last, fmt.Errorf("%w: it says seq %d (%x), the newest entry is seq %d (%x)",
			ErrHeadMismatch, stored.Seq, stored.Hash[:], last.Seq, last.Hash[:]), nil
	}
	return last, nil, nil
}

// HashAt returns the hash of the stored entry at seq.
func (l Layout) HashAt(tx engine.Tx, seq uint64) (audit.Hash, error) {
	raw, err := tx.Get(l.Audit, audit.SeqKey(seq))
	if err != nil {
		return audit.Hash{}, err
	}
	if raw == nil {
		return audit.Hash{}, fmt.Errorf("%w: no entry %d", audit.ErrSeqGap, seq)
	}
	return audit.HashEntry(raw), nil
}

// Writer appends to the chain inside one write transaction. A Writer is
// made afresh for every run of a transaction function, from the head that
// run read, so that nothing of a run that did not commit survives it.
type Writer struct {
	tx     engine.Tx
	layout Layout
	chain  audit.Chain
	// started is the head the writer began from.
	started audit.Head
	// admission is the consumed admission that Checkpoint signs in.
	admission audit.AdmissionRecord
}

// NewWriter returns a writer that extends the chain from head, the head
// that tx read (ReadHead) or, at Init, the empty head. It is a value, kept
// in its caller's transaction state, to spare the write path an
// allocation.
func (l Layout) NewWriter(tx engine.Tx, head audit.Head) Writer {
	return Writer{tx: tx, layout: l, chain: *audit.NewChain(head), started: head}
}

// Head returns the head as of the entries appended so far.
func (w *Writer) Head() audit.Head { return w.chain.Head() }

// Started returns the head the writer began from.
func (w *Writer) Started() audit.Head { return w.started }

// Append links e into the chain (its seq and prev are set) and stores it.
// It refuses to overwrite an existing entry: entries are never rewritten,
// and a head that fell behind must stop writes, not overwrite what it
// missed.
func (w *Writer) Append(e *audit.Entry) (uint64, error) {
	raw, _, err := w.chain.Append(e)
	if err != nil {
		return 0, err
	}
	key := audit.SeqKey(e.Seq)
	old, err := w.tx.Get(w.layout.Audit, key)
	if err != nil {
		return 0, err
	}
	if old != nil {
		return 0, fmt.Errorf("%w: audit entry %d already exists", ErrBadChain, e.Seq)
	}
	if err := w.tx.Put(w.layout.Audit, key, raw); err != nil {
		return 0, err
	}
	if w.layout.Tree != nil {
		// The leaf goes in with its entry, so that the tree's size is the
		// head's seq in every committed state.
		rec, err := w.layout.treeRecordFor(w.tx, e.Seq, raw)
		if err != nil {
			return 0, err
		}
		if err := w.tx.Put(w.layout.Tree, audit.SeqKey(e.Seq-1), rec); err != nil {
			return 0, err
		}
	}
	return e.Seq, nil
}

// Carry sets the consumed recovery admission (audit.Checkpoint.Admission)
// that Checkpoint signs into a checkpoint that names none: the one the
// chain's anchor names, or the one a recovery has just consumed. Anchor
// stores refuse a checkpoint that drops it.
func (w *Writer) Carry(rec audit.AdmissionRecord) { w.admission = rec }

// Checkpoint signs the head as of this transaction and stores it with the
// head key, so that the store carries its own newest signed statement; the
// anchor gets the same checkpoint after the commit. cp's Seq, Head and
// Root are filled in, the root from the stored tree as this transaction
// wrote it, and its Admission too if it names none (Carry).
func (w *Writer) Checkpoint(key ed25519.PrivateKey, cp audit.Checkpoint) (audit.SignedCheckpoint, error) {
	head := w.chain.Head()
	cp.Seq, cp.Head = head.Seq, head.Hash
	if w.layout.Tree == nil {
		return audit.SignedCheckpoint{}, fmt.Errorf("%w: a checkpoint signs the tree root, and this chain keeps no tree", ErrBadChain)
	}
	// The root is read from the records this transaction's appends wrote
	// beside the frontier they read: no more reads than the appends made.
	root, err := w.layout.TreeHash(w.tx, head.Seq)
	if err != nil {
		return audit.SignedCheckpoint{}, err
	}
	cp.Root = audit.Hash(root)
	if cp.Admission.IsZero() {
		cp.Admission = w.admission
	}
	sc, err := audit.Sign(key, cp)
	if err != nil {
		return sc, err
	}
	raw, err := sc.Marshal()
	if err != nil {
		return sc, err
	}
	if err := w.tx.Put(w.layout.Checkpoints, Latest, raw); err != nil {
		return sc, err
	}
	return sc, w.tx.Put(w.layout.Checkpoints, HeadKey, encodeHead(head))
}

// InitCheckpoint returns the stored signed checkpoint if it is the init
// checkpoint of a chain whose only entry is head: signed by pub for id, at
// seq 1, with head's hash. Init commits the store and then writes the
// first anchor; a crash in between leaves a store that holds only its init
// entry and no anchor, and this checkpoint is what the anchor would have
// been. With any later entry there is history for a missing anchor to
// hide, and it returns an error wrapping audit.ErrAnchorMissing.
func (l Layout) InitCheckpoint(tx engine.Tx, pub ed25519.PublicKey, id string, head audit.Head) (audit.SignedCheckpoint, error) {
	if head.Seq != 1 {
		return audit.SignedCheckpoint{}, audit.ErrAnchorMissing
	}
	raw, err := tx.Get(l.Checkpoints, Latest)
	if err != nil {
		return audit.SignedCheckpoint{}, err
	}
	sc, err := audit.ParseSignedCheckpoint(raw)
	if err != nil {
		return sc, fmt.Errorf("%w (and the store's own init checkpoint is unusable: %v)", audit.ErrAnchorMissing, err)
	}
	if err := sc.Verify(pub); err != nil || sc.Receiver != id || sc.Seq != head.Seq || sc.Head != head.Hash {
		return sc, fmt.Errorf("%w (and the store's own init checkpoint does not match it)", audit.ErrAnchorMissing)
	}
	return sc, nil
}

// Latest returns the store's own newest signed checkpoint, or an error
// wrapping ErrBadChain if there is none.
func (l Layout) LatestCheckpoint(tx engine.Tx) (audit.SignedCheckpoint, error) {
	raw, err := tx.Get(l.Checkpoints, Latest)
	if err != nil {
		return audit.SignedCheckpoint{}, err
	}
	if raw == nil {
		return audit.SignedCheckpoint{}, fmt.Errorf("%w: no checkpoint", ErrBadChain)
	}
	return audit.ParseSignedCheckpoint(raw)
}

// Advance moves the anchor from *cur to sc after the commit that sc
// checkpoints, and sets *cur to the anchor it leaves. A conflict means
// another writer of the same chain (another process on the same store, or
// this one's earlier write whose outcome was unknown and which landed
// late) moved the anchor: Advance reloads it and, if what it finds is in
// this chain (inChain), goes on from there. If the anchor already covers
// sc (it is sc, or a later checkpoint of the same chain), the commit is
// covered and nothing is written.
func Advance(store audit.AnchorStore, cur *audit.SignedCheckpoint, sc audit.SignedCheckpoint,
	inChain func(audit.SignedCheckpoint) error) error {
	err := store.Store(cur, sc)
	if err == nil {
		*cur = sc
		return nil
	}
	if !errors.Is(err, audit.ErrWriteConflict) && !errors.Is(err, audit.ErrAnchorRegression) {
		// A store can fail after its write took effect (an etcd Txn
		// that committed and whose answer was lost; a FileAnchor whose
		// fdatasync fails puts its slot back instead). The anchor then
		// holds sc: expect it next time, or every later write would
		// conflict with it.
		if got, lerr := store.Load(); lerr == nil && got == sc {
			*cur = sc
		}
		return err
	}
	for range 4 {
		got, lerr := store.Load()
		if lerr != nil {
			return fmt.Errorf("%w; reloading it: %w", err, lerr)
		}
		if got.Receiver != sc.Receiver {
			return err
		}
		if cerr := inChain(got); cerr != nil {
			return fmt.Errorf("%w: the anchor found on a conflict is not in this chain: %w", err, cerr)
		}
		if got.Seq >= sc.Seq {
			// A later checkpoint of this chain covers the commit.
			*cur = got
			return nil
		}
		if err = store.Store(&got, sc); err == nil {
			*cur = sc
			return nil
		}
		if !errors.Is(err, audit.ErrWriteConflict) && !errors.Is(err, audit.ErrAnchorRegression) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return err
}

// CurrentAnchor reads store's anchor before a write on a store that other
// processes write too (etcd). The anchor this process last wrote (last)
// can be far behind the one that covers other processes' commits, and a
// store put back between the two would pass a check against last: the
// write would decide on records a later commit superseded. An anchor other
// than last must be signed by pub and name id.
func CurrentAnchor(store audit.AnchorStore, last audit.SignedCheckpoint, pub ed25519.PublicKey, id string) (audit.SignedCheckpoint, error) {
	a, err := store.Load()
	if err != nil {
		return a, err
	}
	if a != last {
		if err := a.Verify(pub); err != nil {
			return a, err
		}
		if a.Receiver != id {
			return a, fmt.Errorf("%w: it is for %q", audit.ErrReceiverMismatch, a.Receiver)
		}
	}
	return a, nil
}
