package kvfence

import (
	"errors"
	"fmt"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/chain"
)

// ErrOutcomeUnknown means a write was sent to the store and no answer says
// whether it applied (a timeout, a lost leader): it is never a verdict,
// neither applied nor denied. Retrying the same envelope is safe: if the
// first attempt applied, its receipt answers already_applied. It wraps
// engine.ErrOutcomeUnknown too.
var ErrOutcomeUnknown = errors.New("kvfence: outcome unknown: the write may or may not have been applied; retry the same envelope")

// ErrTooLarge means one call needs a transaction larger than the store
// accepts in one commit (etcd's request size or operation count). Nothing
// was written.
var ErrTooLarge = errors.New("kvfence: the call is too large for one transaction of the store; nothing written")

// engineErr maps the engine's failures of a transaction onto this
// package's errors: a conflict that outlasted the engine's retries is
// ErrStorageBusy, an unknown outcome ErrOutcomeUnknown, a closed engine
// ErrClosed. Each also still wraps the engine's sentinel.
func engineErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrOutcomeUnknown), errors.Is(err, ErrStorageBusy), errors.Is(err, ErrClosed):
		return err
	case errors.Is(err, engine.ErrOutcomeUnknown):
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	case errors.Is(err, engine.ErrConflict):
		return fmt.Errorf("%w: concurrent writers kept conflicting: %w", ErrStorageBusy, err)
	case errors.Is(err, engine.ErrClosed):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// writeErr is engineErr for a write transaction of the receiver.
func (r *Receiver) writeErr(err error) error {
	if errors.Is(err, engine.ErrClosed) {
		return ErrClosed
	}
	return engineErr(err)
}

// newWtx starts one run of a write transaction from the head the store
// holds. If it is not the head this process last committed, another
// writer moved the chain: another receiver process on the same store (the
// head key, read and written by every commit, makes the two take turns),
// or a commit of this process whose outcome was unknown and which
// applied. The cached state digest then describes an older state, and the
// run starts from the digest stored with that head, which every writer
// keeps current, instead of forking the chain or the digest.
func (r *Receiver) newWtx(tx engine.Tx) (*wtx, error) {
	read := auditChain.ReadHead
	if r.headMismatch != nil {
		read = auditChain.LastHead
	}
	head, err := read(tx)
	if err != nil {
		return nil, chainErr(r.path, err)
	}
	state, sum := r.state, r.stateSum
	// Every checkpoint carries the consumed admission that the anchor
	// names (audit.Checkpoint.Admission); anchor stores refuse one that
	// drops it.
	admission := r.anchorNow().Admission
	if head != r.head {
		if state, err = storedState(tx); err != nil {
			return nil, err
		}
		sum = state.Sum()
		if err := r.checkForeignHead(tx, head, sum); err != nil {
			return nil, err
		}
		// The checkpoint just checked is this receiver's, of this head:
		// its record is the newest, whatever this process last saw.
		latest, err := latestCheckpoint(tx)
		if err != nil {
			return nil, err
		}
		admission = latest.Admission
	}
	w := &wtx{tx: tx, chain: auditChain.NewWriter(tx, head), faults: &r.faults, state: state, stateSum: sum}
	w.chain.Carry(admission)
	return w, nil
}

// checkForeignHead accepts a head that this process did not commit, and
// the state digest stored with it, only if the store's newest checkpoint
// is this receiver's signature of exactly that head, that digest and the
// stored epoch high-water, as every commit writes it in its own
// transaction. Otherwise whoever can write the store without the key
// (edited records with the digest kept in step, an entry linked to the
// chain, the head key moved) would have the next commit sign it all, and
// the next Open accept it.
func (r *Receiver) checkForeignHead(tx engine.Tx, head audit.Head, sum audit.Hash) error {
	latest, err := latestCheckpoint(tx)
	if err != nil {
		return fmt.Errorf("%w: %s: the store's newest checkpoint: %w", audit.ErrStateMismatch, r.path, err)
	}
	hw, err := epochHighWater(tx)
	if err != nil {
		return err
	}
	switch {
	case latest.Receiver != r.id || latest.Verify(r.pub) != nil:
		return fmt.Errorf("%w: %s: the store's newest checkpoint is not signed by this receiver's key", audit.ErrStateMismatch, r.path)
	case latest.Seq != head.Seq || latest.Head != head.Hash:
		return fmt.Errorf("%w: %s: the chain's head moved to seq %d (%x), which no checkpoint of this receiver covers (the newest is seq %d)",
			audit.ErrStateMismatch, r.path, head.Seq, head.Hash[:], latest.Seq)
	case latest.State != sum:
		return fmt.Errorf("%w: %s: the stored state digest is not the one the checkpoint of seq %d signs", audit.ErrStateMismatch, r.path, latest.Seq)
	case latest.EpochHighWater != hw:
		return fmt.Errorf("%w: %s: the epoch high-water is %d, the checkpoint of seq %d signs %d", audit.ErrStateMismatch, r.path, hw, latest.Seq,
			latest.EpochHighWater)
	}
	return nil
}

// advanceAnchor moves the anchor to sc after its commit. An anchor moved
// by another writer of this store, or by a write of this process whose
// outcome was unknown, is adopted if it is signed by this receiver and in
// its chain; one at or past sc already covers the commit.
func (r *Receiver) advanceAnchor(sc audit.SignedCheckpoint) error {
	cur := r.anchorNow()
	defer func() { r.setAnchor(cur) }()
	return chain.Advance(r.opts.Anchor, &cur, sc, func(got audit.SignedCheckpoint) error {
		if err := got.Verify(r.pub); err != nil {
			return err
		}
		return r.view(func(tx engine.Tx) error {
			h, err := auditChain.HashAt(tx, got.Seq)
			if err != nil {
				return err
			}
			if h != got.Head {
				return fmt.Errorf("%w: the anchor's seq %d has another hash in the store", audit.ErrForkDetected, got.Seq)
			}
			return nil
		})
	})
}

// anchorNow returns the anchor as last read or written.
func (r *Receiver) anchorNow() audit.SignedCheckpoint {
	r.anchorMu.Lock()
	defer r.anchorMu.Unlock()
	return r.anchor
}

func (r *Receiver) setAnchor(a audit.SignedCheckpoint) {
	r.anchorMu.Lock()
	r.anchor = a
	r.anchorMu.Unlock()
}
