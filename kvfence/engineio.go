package kvfence

import (
	"errors"
	"fmt"
	"time"

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
// applied. The digest and the known records then describe an older state:
// the run ends with errHeadMoved, and the caller re-verifies the store
// (resync) before it runs again.
func (r *Receiver) newWtx(tx engine.Tx) (*wtx, error) {
	read := auditChain.ReadHead
	if r.headMismatch != nil {
		read = auditChain.LastHead
	}
	head, err := read(tx)
	if err != nil {
		return nil, chainErr(r.path, err)
	}
	if head != r.head {
		return nil, fmt.Errorf("%w: from seq %d (%x) to seq %d (%x)", errHeadMoved, r.head.Seq, r.head.Hash[:8], head.Seq, head.Hash[:8])
	}
	if r.known == nil || r.known.broken {
		return nil, fmt.Errorf("%w: the receiver's known records must be rebuilt", errHeadMoved)
	}
	w := &wtx{tx: tx, chain: auditChain.NewWriter(tx, head), faults: &r.faults, state: r.state, stateSum: r.stateSum,
		recs: r.recs.reset(r.known), hw: r.hw}
	// Every checkpoint carries the consumed admission (audit.Checkpoint.
	// Admission); anchor stores refuse one that drops it. The anchor this
	// process last saw names it, unless another writer of the store
	// recovered it since: then the newest checkpoint that the last
	// re-verification found names a later one.
	admission := r.anchorNow().Admission
	if r.carried.At > admission.At {
		admission = r.carried
	}
	w.chain.Carry(admission)
	return w, nil
}

// errHeadMoved means a write transaction found the chain's head elsewhere
// than where this process last committed it, or the known records in
// doubt: the receiver re-verifies the store before it decides anything.
var errHeadMoved = errors.New("kvfence: the chain's head moved under the receiver")

// maxResyncs bounds how often one batch re-verifies the store because
// another writer moved the head meanwhile; past it the batch fails with
// ErrStorageBusy, having written nothing. A writer that commits without
// pause can keep another one re-verifying: each of its commits moves the
// head again.
const maxResyncs = 16

// resync re-verifies the store from scratch after another writer moved
// the chain's head: the newest checkpoint must be this receiver's
// signature of that head, of the digest recomputed from every state
// record and of the stored epoch high-water (checkState), and the known
// records are rebuilt from exactly the records hashed. Otherwise whoever
// can write the store without the key (edited records with the digest
// kept in step, an entry linked to the chain, the head key moved) would
// have the next commit sign it all. It costs a read of every state
// record, as Open does; it is needed only where two processes write one
// store, each time the other one committed.
func (r *Receiver) resync() error {
	head, mismatch := r.head, r.headMismatch
	// The store's chain must still hold the head this process last
	// committed or verified, checked in the transaction that reads the
	// new head (here on a file, in checkState's on a shared store). A
	// store put back, whole, to an older signed state passes checkState
	// when its high-water is the anchor's (a hold that did not raise it),
	// and the anchor's own rules compare only seqs: a batch of two calls
	// on the old head would carry the next checkpoint past the anchor's
	// seq, and the anchor would take a chain without the acknowledged
	// commits. The anchor itself may not yet cover the last commit (its
	// write overlaps the next batch), so the last head is the reference.
	r.resyncFrom = &head
	defer func() { r.resyncFrom = nil }()
	if r.file {
		// checkState reads the head itself only on a shared store.
		err := r.view(func(tx engine.Tx) error {
			got, mismatch, err := auditChain.LoadHead(tx)
			if err != nil {
				return chainErr(r.path, err)
			}
			if err := r.chainHolds(tx, got); err != nil {
				return fmt.Errorf("kvfence: %s: %w", r.path, err)
			}
			r.head, r.headMismatch = got, mismatch
			return nil
		})
		if err != nil {
			r.known = nil
			return err
		}
	}
	// Until a check passes, nothing is decided: the known records are
	// dropped, and a head that did not verify is not taken for this
	// receiver's.
	r.known = nil
	var anchor *audit.SignedCheckpoint
	if r.opts.Anchor != nil {
		// A store put back to an older signed state is not taken for
		// the current one: its high-water must reach the anchor's (the
		// write's own anchor checks then refuse a head behind it).
		a := r.anchorNow()
		anchor = &a
	}
	if _, err := r.checkState(anchor); err != nil {
		r.head, r.headMismatch = head, mismatch
		return fmt.Errorf("kvfence: %s: %w", r.path, err)
	}
	return nil
}

// chainHolds refuses a chain, ending at head, that does not hold
// r.resyncFrom (if set): the head this process last committed or
// verified.
func (r *Receiver) chainHolds(tx engine.Tx, head audit.Head) error {
	prev := r.resyncFrom
	if prev == nil {
		return nil
	}
	h := head.Hash
	switch {
	case head.Seq < prev.Seq:
		return fmt.Errorf("%w: the store's chain ends at seq %d, before seq %d (%x), which this receiver committed",
			audit.ErrRollbackDetected, head.Seq, prev.Seq, prev.Hash[:8])
	case head.Seq > prev.Seq:
		var err error
		if h, err = hashAt(tx, prev.Seq); err != nil {
			if !r.file && errors.Is(err, audit.ErrAnchorArchived) {
				// Another writer of the prefix archived past it; the
				// anchor read before the batch is checked against the
				// head instead.
				return nil
			}
			return err
		}
	}
	if h != prev.Hash {
		return fmt.Errorf("%w: the store's chain has another entry at seq %d than the one this receiver committed",
			audit.ErrForkDetected, prev.Seq)
	}
	return nil
}

// advanceAnchor moves the anchor to sc after its commit. An anchor moved
// by another writer of this store, or by a write of this process whose
// outcome was unknown, is adopted if it is signed by this receiver and in
// its chain; one at or past sc already covers the commit.
func (r *Receiver) advanceAnchor(sc audit.SignedCheckpoint) error {
	// One lock for the anchor read and the start mark: this runs once per
	// committed batch.
	r.anchorMu.Lock()
	cur := r.anchor
	r.anchorSince = time.Now()
	r.anchorMu.Unlock()
	// Any failure, a panic of the store included, leaves the anchor's
	// durability unknown (durableAnchor).
	stored := false
	defer func() {
		r.anchorMu.Lock()
		r.anchor, r.unsureSeq, r.anchorSince = cur, 0, time.Time{}
		if !stored {
			r.unsureSeq = sc.Seq
		}
		r.anchorMu.Unlock()
	}()
	err := chain.Advance(r.opts.Anchor, &cur, sc, func(got audit.SignedCheckpoint) error {
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
	stored = err == nil
	return err
}

// durableAnchor reports whether a, an anchor as read or written, may be
// taken as durable: false when it is the checkpoint whose anchor write
// last failed (unsureSeq), which the anchor may hold without its
// fdatasync.
func (r *Receiver) durableAnchor(a audit.SignedCheckpoint) bool {
	r.anchorMu.Lock()
	defer r.anchorMu.Unlock()
	return r.unsureSeq == 0 || a.Seq != r.unsureSeq
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
