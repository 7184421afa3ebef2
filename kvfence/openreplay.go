package kvfence

import (
	"encoding/binary"
	"fmt"
	"iter"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/chain"
)

// replayChain verifies the stored chain against the anchor a, which Open
// has just checked, as verify-chain does: every entry from the base (the
// newest archived entry, whose base record holds each scope's fence state
// there, or the start) to the head, its encoding and its link, with the
// fence replayed over them. A chain that records a mutation under a
// superseded grant (audit.ErrFenceViolation) or that does not verify is
// refused with the error verify-chain reports for it: a receiver that ran
// without its fence checks, or records edited under a running receiver,
// leave such an entry, and nothing more is decided on that store.
//
// The replay starts from the base because that is the newest point whose
// fence state the chain vouches for (the archive entry records the base
// record's digest, and the anchor covers that entry): an archive refuses
// to move the base past a violation, so every violation is after it. Its
// cost grows with the entries since the last archive; archiving bounds it.
func (r *Receiver) replayChain(a audit.SignedCheckpoint) error {
	var rep audit.Report
	err := r.view(func(tx engine.Tx) error {
		var scanErr, treeErr error
		var tree *chain.TreeChecker
		entries := func(yield func(k, v []byte) bool) {
			scanErr = tx.Scan(bucketAudit, nil, func(k, v []byte) error {
				// The tree is checked beside the chain, a chunk of
				// records at a time, against the entries' leaf hashes.
				if len(k) == 8 && treeErr == nil {
					seq := binary.BigEndian.Uint64(k)
					if tree == nil {
						tree, treeErr = auditChain.NewTreeChecker(tx, seq)
					}
					if treeErr == nil {
						treeErr = tree.Add(seq, v)
					}
					if treeErr != nil {
						return engine.StopScan
					}
				}
				if !yield(k, v) {
					return engine.StopScan
				}
				return nil
			})
		}
		base, err := tx.Get(bucketCheckpoints, checkpointBase)
		if err != nil {
			return err
		}
		rep, err = audit.Verify(audit.VerifyOptions{Entries: iter.Seq2[[]byte, []byte](entries), Anchor: &fixedAnchor{sc: a},
			PublicKey: r.pub, Receiver: r.id, BaseRecord: base})
		if treeErr == nil && tree != nil {
			// A scan that Verify stopped early leaves records past the
			// last entry it read: only a whole scan is checked to its end.
			if err == nil && rep.OK() {
				treeErr = tree.Finish()
			} else {
				treeErr = tree.Flush()
			}
		}
		if treeErr == nil && err == nil && rep.OK() {
			// The records are the entries' own; the roots they make must
			// be the ones signed, which also covers the archived frontier
			// records the checker trusts.
			treeErr = checkSignedRoots(tx, a.Checkpoint)
		}
		if treeErr != nil {
			return fmt.Errorf("kvfence: %s: %w: %w", r.path, ErrBadFormat, treeErr)
		}
		if err == nil {
			err = scanErr
		}
		if err != nil || !rep.OK() {
			return err
		}
		// The replay reads the chain in a transaction of its own: it must
		// hold the head the state check verified. Otherwise entries past
		// the anchor (a commit whose anchor write failed) could be taken
		// away while the replay runs and put back after it, and a
		// violation among them would never be replayed. Another writer of
		// a shared store may have extended it since.
		h := rep.Head.Hash
		if rep.Head.Seq > r.head.Seq {
			if h, err = hashAt(tx, r.head.Seq); err != nil {
				return err
			}
		}
		if rep.Head.Seq < r.head.Seq || h != r.head.Hash {
			return fmt.Errorf("kvfence: %s: %w: the replayed chain ends at %v and does not hold the verified head %v: the store changed while it was opened",
				r.path, audit.ErrStateMismatch, rep.Head, r.head)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("kvfence: %s: the audit chain does not verify (%s): %w", r.path, rep.Problem, rep.Err())
	}
	return nil
}

// checkSignedRoots compares the stored tree's roots with the ones the
// receiver signed: the anchor a's, and the database's newest
// checkpoint's. A record of an archived leaf that holds a root of the
// frontier, which no stored leaf has combined with yet, is checked by
// nothing else; a tree whose root at a signed size is another is one the
// receiver would sign a second root for (audit.ErrTreeMismatch).
func checkSignedRoots(tx engine.Tx, a audit.Checkpoint) error {
	if err := auditChain.CheckRoot(tx, a, "the anchor"); err != nil {
		return err
	}
	latest, err := auditChain.LatestCheckpoint(tx)
	if err != nil {
		return err
	}
	return auditChain.CheckRoot(tx, latest.Checkpoint, "the database's newest checkpoint")
}
