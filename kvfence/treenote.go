package kvfence

import (
	"bytes"
	"crypto/ed25519"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
)

// SignedCheckpoint returns the receiver's anchored checkpoint (the one its
// anchor holds as last read or written, never a newer commit that no
// anchor covers yet, ErrNotAcknowledged if a failed anchor write left it
// unsure) as a C2SP signed note (docs/design.md §7): origin
// checkpoint.ReceiverOrigin of the receiver's id and key, tree size the
// checkpoint's seq, root the checkpoint's own Root (a stored tree with
// another root at that size is refused, ErrBadFormat wrapping
// audit.ErrTreeMismatch), and the extension lines of
// checkpoint.ReceiverState, signed by Options.Key as a note signer whose
// name is the origin. It needs the signing key: without one it returns
// ErrInvalidArgument.
func (r *Receiver) SignedCheckpoint() ([]byte, error) {
	var note []byte
	err := r.view(func(tx engine.Tx) error {
		var err error
		note, _, err = r.signedCheckpoint(tx)
		return err
	})
	return note, err
}

// signedCheckpoint signs the anchored checkpoint as a note and
// returns it with its tree size.
func (r *Receiver) signedCheckpoint(tx engine.Tx) ([]byte, uint64, error) {
	if r.opts.Key == nil {
		return nil, 0, fmt.Errorf("%w: a checkpoint note is signed with the receiver's key, and none was given", ErrInvalidArgument)
	}
	if len(r.opts.Key) != ed25519.PrivateKeySize || !r.pub.Equal(r.opts.Key.Public()) {
		// A read-only receiver's key is checked here, not at Open.
		return nil, 0, fmt.Errorf("%w: %s", ErrKeyMismatch, r.path)
	}
	if !r.treeChecked {
		return nil, 0, fmt.Errorf("%w: %s: a checkpoint note is signed only by a receiver whose open checked its stored tree "+
			"against the entries (opened with its anchor checked)", ErrInvalidArgument, r.path)
	}
	// The note signs the anchored checkpoint, never the database's newer
	// one: a commit past the anchor is not acknowledged, and a copy of the
	// database from before it opens on that anchor and commits another
	// entry at the same seq; a note for it would be a second root for one
	// tree size, signed by this key.
	sc := r.anchorNow()
	if r.opts.Anchor != nil {
		// Another writer of a shared store may have moved the anchor
		// past this process's view: a newer one is taken if it is this
		// receiver's and in the chain this transaction reads.
		if a, err := r.opts.Anchor.Load(); err == nil && a.Seq > sc.Seq && a.Receiver == r.id && r.durableAnchor(a) && a.Verify(r.pub) == nil {
			if h, err := auditChain.HashAt(tx, a.Seq); err == nil && h == a.Head {
				sc = a
			}
		}
	}
	if sc.Seq == 0 || !r.durableAnchor(sc) {
		return nil, 0, fmt.Errorf("%w: %s: no durable anchored checkpoint to sign a note for", ErrNotAcknowledged, r.path)
	}
	if sc.Receiver != r.id || sc.Verify(r.pub) != nil {
		return nil, 0, fmt.Errorf("%w: %s: the stored checkpoint is not this receiver's", ErrBadFormat, r.path)
	}
	// The note's root is the one the checkpoint signs, which the anchor
	// holds too; a stored tree that disagrees with it would make proofs
	// this note does not vouch for, so nothing is signed over it.
	if err := auditChain.CheckRoot(tx, sc.Checkpoint, "the database's newest checkpoint"); err != nil {
		return nil, 0, fmt.Errorf("%w: %s: %w", ErrBadFormat, r.path, err)
	}
	n, err := r.signNote(sc)
	return n, sc.Seq, err
}

// checkTreeSizes returns ErrInvalidArgument unless 1 <= lo <= hi <= head.
func (r *Receiver) checkTreeSizes(what string, lo, hi uint64, tx engine.Tx) error {
	head, err := auditChain.ReadHead(tx)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadFormat, r.path, err)
	}
	if lo == 0 || lo > hi || hi > head.Seq {
		return fmt.Errorf("%w: %s %d and %d: want 1 <= %d <= %d <= the audit head %d", ErrInvalidArgument, what, lo, hi, lo, hi, head.Seq)
	}
	return nil
}

// ConsistencyProof returns the RFC 6962 proof that the tree of newSize
// audit entries extends the tree of oldSize (tlog.CheckTree checks it).
// Sizes outside 1 <= oldSize <= newSize <= the head are ErrInvalidArgument.
func (r *Receiver) ConsistencyProof(oldSize, newSize uint64) (tlog.TreeProof, error) {
	var p tlog.TreeProof
	err := r.view(func(tx engine.Tx) error {
		if err := r.checkTreeSizes("tree sizes", oldSize, newSize, tx); err != nil {
			return err
		}
		var err error
		p, err = tlog.ProveTree(int64(newSize), int64(oldSize), auditChain.TreeReader(tx))
		return err
	})
	return p, err
}

// InclusionProof returns the RFC 6962 proof that the audit entry at seq
// is leaf seq-1 of the tree of size entries (tlog.CheckRecord checks it).
// Anything outside 1 <= seq <= size <= the head is ErrInvalidArgument.
func (r *Receiver) InclusionProof(seq, size uint64) (tlog.RecordProof, error) {
	var p tlog.RecordProof
	err := r.view(func(tx engine.Tx) error {
		if err := r.checkTreeSizes("seq and tree size", seq, size, tx); err != nil {
			return err
		}
		var err error
		p, err = tlog.ProveRecord(int64(size), int64(seq-1), auditChain.TreeReader(tx))
		return err
	})
	return p, err
}

// ReceiptProof is a receipt with what proves it offline: its audit entry's
// stored bytes, the receiver's signed checkpoint note, and the inclusion
// proof of the entry in the note's tree.
type ReceiptProof struct {
	// Receipt is the receipt, as Receipt returns it.
	Receipt Receipt
	// Entry is the stored bytes of the audit entry at Receipt.AuditSeq.
	Entry []byte
	// Checkpoint is the signed note (SignedCheckpoint) the proof is to.
	Checkpoint []byte
	// TreeSize is the note's tree size.
	TreeSize uint64
	// Proof is the inclusion proof of leaf AuditSeq-1 in that tree.
	Proof tlog.RecordProof
}

// ReceiptProof returns the receipt of action in scope with its proof, all
// read in one transaction. With witnesses, the proof is to the newest
// note they cosigned (CosignedCheckpoint) when it covers the receipt, and
// otherwise to the anchored checkpoint's note, as without them. A receipt whose entry was archived has no proof
// from this store: ErrNotFound. It needs the signing key, as
// SignedCheckpoint does.
func (r *Receiver) ReceiptProof(scope, action string) (ReceiptProof, error) {
	var out ReceiptProof
	err := r.view(func(tx engine.Tx) error {
		rc, err := appliedReceipt(tx, scope, action)
		if err != nil {
			return err
		}
		out.Receipt = rc.public(scope, action)
		raw, err := tx.Get(bucketAudit, audit.SeqKey(rc.AuditSeq))
		if err != nil {
			return err
		}
		if raw == nil {
			return fmt.Errorf("%w: the audit entry %d of the receipt was archived; its proof is in the archive's records, not in this store",
				ErrNotFound, rc.AuditSeq)
		}
		out.Entry = bytes.Clone(raw)
		if c := r.cosigned.Load(); c != nil && rc.AuditSeq <= c.size {
			// The witnesses' cosigned note covers the entry: the proof is
			// to it, so that whoever trusts the witnesses can check it.
			out.Checkpoint, out.TreeSize = bytes.Clone(c.note), c.size
		} else if out.Checkpoint, out.TreeSize, err = r.signedCheckpoint(tx); err != nil {
			return err
		}
		if rc.AuditSeq == 0 || rc.AuditSeq > out.TreeSize {
			return fmt.Errorf("%w: %s: receipt at audit seq %d, the checkpoint at %d", ErrBadFormat, r.path, rc.AuditSeq, out.TreeSize)
		}
		out.Proof, err = tlog.ProveRecord(int64(out.TreeSize), int64(rc.AuditSeq-1), auditChain.TreeReader(tx))
		return err
	})
	return out, err
}
