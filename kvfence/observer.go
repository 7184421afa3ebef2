package kvfence

import "time"

// Observer receives a measurement of every write transaction that a
// receiver commits, for metrics. It is called by the leader of the
// batch, with the receiver's write lock held, after the anchor write and
// before any caller of the batch returns: it must be quick, must not block,
// and must not call the receiver. A transaction that did not commit (and
// whose calls were therefore retried alone) is not reported; its retries
// are.
//
// This package imports no metrics library: the observer is the seam where
// one plugs in, so that an embedder that wants none links none.
type Observer interface {
	// Committed is told about one committed write transaction.
	Committed(CommitStats)
}

// CommitStats describes one committed write transaction.
type CommitStats struct {
	// Calls is the number of write calls that shared the transaction.
	Calls int
	// Duration is the time from the start of the transaction to the end
	// of its anchor write (and of the witnesses' round, with witnesses), on the monotonic clock: what the batch's
	// callers waited for once their batch began.
	Duration time.Duration
	// AuditSeq is the chain's head after the commit.
	AuditSeq uint64
	// Anchored says an anchor write was attempted.
	Anchored bool
	// AnchorErr is the anchor write's failure, or the witnesses' (fewer
	// than K cosigned, Options.Witnesses), after which the calls got
	// ErrNotAcknowledged; nil if it succeeded or was not attempted.
	AnchorErr error
	// Decisions are the Submit decisions the transaction recorded, in
	// chain order, including those whose anchor write then failed: they
	// are in the chain. The slice is valid only during the call.
	Decisions []Result
	// Activations counts the grants activated.
	Activations int
	// HeldScopes counts the scopes held.
	HeldScopes int
}

// commitStats collects the measurement of a committed batch, or returns
// nil when no observer is configured.
func (r *Receiver) commitStats(batch []*call) *CommitStats {
	if r.opts.Observer == nil {
		return nil
	}
	s := &CommitStats{Calls: len(batch), AuditSeq: r.head.Seq, Anchored: r.opts.Anchor != nil}
	for _, c := range batch {
		switch v := c.res.(type) {
		case Result:
			// A decision that met a remote target before its object was
			// read decided nothing yet (dispatch_submit.go).
			if v.Outcome != "" {
				s.Decisions = append(s.Decisions, v)
			}
		case Grant:
			s.Activations++
		case HoldResult:
			s.HeldScopes += len(v.Scopes)
		}
	}
	return s
}

// observe reports a committed batch once its anchor write is over.
func (r *Receiver) observe(s *CommitStats, start time.Time, anchorErr error) {
	if s == nil {
		return
	}
	s.Duration, s.AnchorErr = time.Since(start), anchorErr
	r.opts.Observer.Committed(*s)
}
