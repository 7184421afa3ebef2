package kvfence

import "time"

// Readiness is what a readiness probe may know of a receiver: whether it
// can acknowledge writes now, and nothing of the data it holds.
type Readiness struct {
	// Open is false once Close has been called.
	Open bool
	// AnchorChecked says Open compared the database with its anchor (a
	// receiver opened without an anchor, or by recovery, did not).
	AnchorChecked bool
	// AnchorWriteFailed says the most recent anchor write failed and no
	// write has succeeded since: the receiver's commits since then were
	// not acknowledged.
	AnchorWriteFailed bool
	// AnchorWriteSince is when the anchor write in progress started, zero
	// when none is. A write that never returns (a hung anchor volume)
	// neither fails nor succeeds, and holds every later acknowledgement:
	// a probe judges how long is too long.
	AnchorWriteSince time.Time
}

// Ready reports whether r is open, its anchor was checked at open, and
// its last anchor write (if any) succeeded.
func (r Readiness) Ready() bool {
	return r.Open && r.AnchorChecked && !r.AnchorWriteFailed
}

// Readiness returns the receiver's readiness. It takes no lock that a
// write holds for long, so a probe never waits on a commit.
func (r *Receiver) Readiness() Readiness {
	r.anchorMu.Lock()
	failed, since := r.unsureSeq != 0, r.anchorSince
	r.anchorMu.Unlock()
	return Readiness{
		Open: !r.closed.Load(),
		// Open sets the anchor store to nil when it skipped the check.
		AnchorChecked:     r.opts.Anchor != nil,
		AnchorWriteFailed: failed,
		AnchorWriteSince:  since,
	}
}
