package ledger

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/ident"
	"github.com/kvfence/kvfence/internal/reqwire"
)

// Approve records an approval of req.Action for the request whose exact
// bytes are req.Request (or, by digest alone, whose SHA-256 is
// req.RequestSHA256). Request bytes that name another action than
// req.Action are ErrActionMismatch, and bytes that are not a well-formed
// request ErrInvalidArgument; either way nothing is written. An action is
// approved once; a second approval is ErrAlreadyApproved.
func (l *Ledger) Approve(ctx context.Context, req ApproveRequest) (Approval, error) {
	if err := checkIdents("action", req.Action, "approver", req.Approver); err != nil {
		return Approval{}, err
	}
	if req.Decision != "" {
		if err := checkIdents("decision", req.Decision); err != nil {
			return Approval{}, err
		}
	}
	checked := false
	if req.Request != nil {
		named, err := reqwire.Action(req.Request)
		if err != nil {
			return Approval{}, fmt.Errorf("%w: the request: %v", ErrInvalidArgument, err)
		}
		if named != req.Action {
			return Approval{}, fmt.Errorf("%w: the approval names %q, the request names %q", ErrActionMismatch, req.Action, named)
		}
		sum := sha256.Sum256(req.Request)
		if req.RequestSHA256 != ([32]byte{}) && req.RequestSHA256 != sum {
			return Approval{}, fmt.Errorf("%w: the request digest %x is not the SHA-256 of the request bytes (%x)",
				ErrInvalidArgument, req.RequestSHA256, sum)
		}
		req.RequestSHA256, checked = sum, true
	}
	if req.RequestSHA256 == ([32]byte{}) {
		return Approval{}, fmt.Errorf("%w: the request or its digest is required", ErrInvalidArgument)
	}
	if req.TTL <= 0 {
		return Approval{}, fmt.Errorf("%w: the approval's TTL must be positive", ErrInvalidArgument)
	}
	bounds, err := checkBoundaries(req.Boundaries)
	if err != nil {
		return Approval{}, err
	}
	if err := ctx.Err(); err != nil {
		return Approval{}, err
	}
	var out Approval
	err = l.update(func(w *wtx) error {
		var existing approvalRecord
		if ok, err := get(w.tx, bucketApprovals, []byte(req.Action), &existing); err != nil {
			return err
		} else if ok {
			return fmt.Errorf("%w: %q", ErrAlreadyApproved, req.Action)
		}
		for _, b := range bounds {
			if _, err := w.receiver(b.Receiver); err != nil {
				return fmt.Errorf("boundary %s: %w", b, err)
			}
		}
		// The boundaries go into the entry as well as the record: a
		// containment reads them from the record and checks them against
		// the entry, so that a boundary dropped from the file is seen.
		seq, err := w.appendAudit(&audit.Entry{Kind: KindApprove, Action: req.Action, Executor: req.Approver,
			RequestSHA256: req.RequestSHA256[:], Decision: req.Decision, Note: boundariesNote(bounds)})
		if err != nil {
			return err
		}
		rec := approvalRecord{Action: req.Action, RequestSHA256: req.RequestSHA256[:], ActionChecked: checked, Approver: req.Approver,
			Decision: req.Decision, ApprovedAt: w.now.UnixNano(), ExpiresAt: w.now.Add(req.TTL).UnixNano(), AuditSeq: seq,
			Boundaries: bounds}
		out = rec.public()
		return put(w.tx, bucketApprovals, []byte(req.Action), &rec)
	})
	return out, err
}

// Claim gives req.Worker the live claim of an approved action. If the worker
// already holds it (it restarted), Claim returns that claim with Resumed set
// and writes nothing. Another worker's live claim is ErrClaimed even if its
// lease expired: only Takeover moves a claim. A settled action is ErrSettled.
func (l *Ledger) Claim(ctx context.Context, req ClaimRequest) (Claim, error) {
	if err := checkIdents("action", req.Action, "worker", req.Worker); err != nil {
		return Claim{}, err
	}
	lease, err := checkLease(req.Lease)
	if err != nil {
		return Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return Claim{}, err
	}
	var out Claim
	err = l.update(func(w *wtx) error {
		var appr approvalRecord
		if ok, err := get(w.tx, bucketApprovals, []byte(req.Action), &appr); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w: %q", ErrNotApproved, req.Action)
		}
		var act actionRecord
		if _, err := get(w.tx, bucketActions, []byte(req.Action), &act); err != nil {
			return err
		}
		if act.Live != "" {
			live, err := w.liveClaim(req.Action, act.Live)
			if err != nil {
				return err
			}
			if live.Worker != req.Worker {
				expired := ""
				if w.now.UnixNano() > live.LeaseExpiresAt {
					expired = "; its lease expired, but only an operator's takeover releases it"
				}
				return fmt.Errorf("%w: %q holds %q as claim %s%s", ErrClaimed, live.Worker, req.Action, live.Ref, expired)
			}
			out = live.public()
			out.Resumed = true
			return errResumed
		}
		if len(act.Claims) > 0 {
			return fmt.Errorf("%w: %q has no live claim (its last claim is settled or awaits reconciliation)", ErrSettled, req.Action)
		}
		if w.now.UnixNano() >= appr.ExpiresAt {
			return fmt.Errorf("%w: %q expired at %s", ErrApprovalExpired, req.Action, unixTime(appr.ExpiresAt).Format(time.RFC3339Nano))
		}
		rec, err := w.newClaim(&act, req.Action, req.Worker, lease, audit.Entry{Kind: KindClaim})
		if err != nil {
			return err
		}
		out = rec.public()
		return nil
	})
	if errors.Is(err, errResumed) {
		return out, l.idleAcknowledged()
	}
	return out, err
}

// errResumed rolls back Claim's transaction when the worker found its own
// claim: nothing changed, so nothing is written or signed.
var errResumed = errors.New("ledger: claim resumed")

// Heartbeat renews the lease of the worker's live claim ref.
func (l *Ledger) Heartbeat(ctx context.Context, ref, worker string, lease time.Duration) (Claim, error) {
	d, err := checkLease(lease)
	if err != nil {
		return Claim{}, err
	}
	return l.change(ctx, ref, worker, KindHeartbeat, func(w *wtx, c *claimRecord) error {
		c.HeartbeatAt, c.LeaseExpiresAt = w.now.UnixNano(), w.now.Add(d).UnixNano()
		return nil
	})
}

// Dispatch records that the worker is about to send its request: claimed
// becomes dispatched. From here on a takeover leaves the effect uncertain.
func (l *Ledger) Dispatch(ctx context.Context, ref, worker string) (Claim, error) {
	return l.change(ctx, ref, worker, KindDispatch, func(w *wtx, c *claimRecord) error {
		if c.State != StateClaimed {
			return fmt.Errorf("%w: %s is %s, not %s", ErrBadTransition, c.Ref, c.State, StateClaimed)
		}
		c.State, c.DispatchedAt = StateDispatched, w.now.UnixNano()
		return nil
	})
}

// Finish settles the worker's live claim: a dispatched claim may succeed or
// fail, a claim never dispatched may only fail.
func (l *Ledger) Finish(ctx context.Context, ref, worker string, outcome State) (Claim, error) {
	if outcome != StateSucceeded && outcome != StateFailed {
		return Claim{}, fmt.Errorf("%w: outcome must be %s or %s", ErrInvalidArgument, StateSucceeded, StateFailed)
	}
	return l.change(ctx, ref, worker, KindFinish, func(w *wtx, c *claimRecord) error {
		if outcome == StateSucceeded && c.State != StateDispatched {
			return fmt.Errorf("%w: %s was never dispatched, so it cannot have succeeded", ErrBadTransition, c.Ref)
		}
		c.State, c.SettledAt = outcome, w.now.UnixNano()
		return w.settle(c.Action)
	})
}

// change applies fn to the live claim ref of worker and records it.
func (l *Ledger) change(ctx context.Context, ref, worker, kind string, fn func(w *wtx, c *claimRecord) error) (Claim, error) {
	if err := checkIdents("claim ref", ref, "worker", worker); err != nil {
		return Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return Claim{}, err
	}
	var out Claim
	err := l.update(func(w *wtx) error {
		c, err := w.claim(ref)
		if err != nil {
			return err
		}
		switch {
		case c.Worker != worker:
			return fmt.Errorf("%w: %s belongs to %q", ErrNotOwner, ref, c.Worker)
		case c.SupersededBy != "":
			return fmt.Errorf("%w: %s was taken over by %q (claim %s)", ErrSuperseded, ref, c.TakeoverBy, c.SupersededBy)
		case !c.State.Live():
			return fmt.Errorf("%w: %s is already %s", ErrBadTransition, ref, c.State)
		}
		if err := fn(w, c); err != nil {
			return err
		}
		seq, err := w.appendAudit(&audit.Entry{Kind: kind, Action: c.Action, Executor: worker, Decision: ref,
			Epoch: c.Generation, Outcome: string(c.State)})
		if err != nil {
			return err
		}
		c.AuditSeq = seq
		out = c.public()
		return put(w.tx, bucketClaims, []byte(ref), c)
	})
	return out, err
}

// Takeover supersedes req.Action's live claim: that claim becomes uncertain
// (its worker may still have an effect in flight) and req.Worker, which
// must not be the superseded claim's worker, gets a new claim. It returns
// the new claim. Takeover is an operator's decision; the
// ledger never takes over on its own.
func (l *Ledger) Takeover(ctx context.Context, req TakeoverRequest) (Claim, error) {
	if err := checkIdents("action", req.Action, "operator", req.Operator, "worker", req.Worker); err != nil {
		return Claim{}, err
	}
	if err := ident.Check("takeover reason", req.Reason); err != nil {
		return Claim{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	lease, err := checkLease(req.Lease)
	if err != nil {
		return Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return Claim{}, err
	}
	var out Claim
	err = l.update(func(w *wtx) error {
		var act actionRecord
		if _, err := get(w.tx, bucketActions, []byte(req.Action), &act); err != nil {
			return err
		}
		if act.Live == "" {
			return fmt.Errorf("%w: %q has no live claim to take over", ErrNoClaim, req.Action)
		}
		old, err := w.liveClaim(req.Action, act.Live)
		if err != nil {
			return err
		}
		// Workers are known by name only: a new claim for the name it
		// supersedes would be the superseded instance's to resume.
		if old.Worker == req.Worker {
			return fmt.Errorf("%w: %q holds the claim being superseded; a takeover gives the action to another worker",
				ErrInvalidArgument, req.Worker)
		}
		ref := newRef()
		old.SupersededBy, old.SupersededState, old.State = ref, old.State, StateUncertain
		old.SettledAt, old.TakeoverBy, old.TakeoverReason = w.now.UnixNano(), req.Operator, req.Reason
		rec, err := w.newClaimRef(&act, ref, req.Action, req.Worker, lease, audit.Entry{Kind: KindTakeover,
			Reason: req.Reason, Note: "operator " + req.Operator + " superseded claim " + old.Ref + " (" + string(old.SupersededState) + ", now uncertain)"})
		if err != nil {
			return err
		}
		old.AuditSeq = rec.AuditSeq
		if err := put(w.tx, bucketClaims, []byte(old.Ref), old); err != nil {
			return err
		}
		out = rec.public()
		return nil
	})
	return out, err
}

// Reconcile settles an uncertain claim once an operator has found out what
// its worker did: outcome is succeeded or failed.
func (l *Ledger) Reconcile(ctx context.Context, ref, operator string, outcome State) (Claim, error) {
	if err := checkIdents("claim ref", ref, "operator", operator); err != nil {
		return Claim{}, err
	}
	if outcome != StateSucceeded && outcome != StateFailed {
		return Claim{}, fmt.Errorf("%w: outcome must be %s or %s", ErrInvalidArgument, StateSucceeded, StateFailed)
	}
	if err := ctx.Err(); err != nil {
		return Claim{}, err
	}
	var out Claim
	err := l.update(func(w *wtx) error {
		c, err := w.claim(ref)
		if err != nil {
			return err
		}
		if c.State != StateUncertain {
			return fmt.Errorf("%w: %s is %s; only an uncertain claim is reconciled", ErrBadTransition, ref, c.State)
		}
		c.State, c.ReconciledBy, c.ReconciledAt = outcome, operator, w.now.UnixNano()
		seq, err := w.appendAudit(&audit.Entry{Kind: KindReconcile, Action: c.Action, Executor: operator, Decision: ref,
			Epoch: c.Generation, Outcome: string(outcome)})
		if err != nil {
			return err
		}
		c.AuditSeq = seq
		out = c.public()
		return put(w.tx, bucketClaims, []byte(ref), c)
	})
	return out, err
}

// Action returns everything the ledger holds about action, or ErrNotFound.
func (l *Ledger) Action(action string) (ActionView, error) {
	var v ActionView
	err := l.view(func(tx engine.Tx) error {
		var err error
		v, err = actionView(tx, action)
		return err
	})
	return v, err
}

// Actions returns every action the ledger knows, in name order.
func (l *Ledger) Actions() ([]ActionView, error) {
	var out []ActionView
	err := l.view(func(tx engine.Tx) error {
		out = out[:0] // the function may run more than once
		// The names are collected first: reads during a scan cost a round
		// trip each on etcd, and are simplest kept apart from it.
		var names []string
		if err := tx.Scan(bucketApprovals, nil, func(k, _ []byte) error {
			names = append(names, string(k))
			return nil
		}); err != nil {
			return err
		}
		for _, name := range names {
			v, err := actionView(tx, name)
			out = append(out, v)
			if err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

func actionView(tx engine.Tx, action string) (ActionView, error) {
	v := ActionView{Action: action}
	var appr approvalRecord
	ok, err := get(tx, bucketApprovals, []byte(action), &appr)
	if err != nil {
		return v, err
	}
	if !ok {
		return v, fmt.Errorf("%w: action %q", ErrNotFound, action)
	}
	a := appr.public()
	v.Approval = &a
	var act actionRecord
	if _, err := get(tx, bucketActions, []byte(action), &act); err != nil {
		return v, err
	}
	v.Live = act.Live
	for _, ref := range act.Claims {
		var c claimRecord
		if ok, err := get(tx, bucketClaims, []byte(ref), &c); err != nil {
			return v, err
		} else if !ok {
			return v, fmt.Errorf("%w: action %q lists missing claim %s", ErrBadFormat, action, ref)
		}
		v.Claims = append(v.Claims, c.public())
	}
	return v, nil
}

// claim loads the claim ref, or ErrNoClaim.
func (w *wtx) claim(ref string) (*claimRecord, error) {
	var c claimRecord
	ok, err := get(w.tx, bucketClaims, []byte(ref), &c)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNoClaim, ref)
	}
	return &c, nil
}

// liveClaim loads the claim an action names as live. Its absence is a
// damaged file, not a refusal.
func (w *wtx) liveClaim(action, ref string) (*claimRecord, error) {
	c, err := w.claim(ref)
	if errors.Is(err, ErrNoClaim) {
		return nil, fmt.Errorf("%w: action %q names missing live claim %s", ErrBadFormat, action, ref)
	}
	return c, err
}

func (w *wtx) newClaim(act *actionRecord, action, worker string, lease time.Duration, e audit.Entry) (*claimRecord, error) {
	return w.newClaimRef(act, newRef(), action, worker, lease, e)
}

// newClaimRef stores a new live claim of action for worker, makes it the
// action's live claim and records entry e for it.
func (w *wtx) newClaimRef(act *actionRecord, ref, action, worker string, lease time.Duration, e audit.Entry) (*claimRecord, error) {
	n, err := claimCount(w.tx)
	if err != nil {
		return nil, err
	}
	n++
	if err := setClaimCount(w.tx, n); err != nil {
		return nil, err
	}
	now := w.now.UnixNano()
	rec := &claimRecord{Ref: ref, Action: action, Worker: worker, Generation: uint64(len(act.Claims) + 1),
		State: StateClaimed, ClaimedAt: now, HeartbeatAt: now, LeaseExpiresAt: w.now.Add(lease).UnixNano()}
	e.Action, e.Executor, e.Decision, e.Epoch, e.Outcome = action, worker, ref, rec.Generation, string(StateClaimed)
	seq, err := w.appendAudit(&e)
	if err != nil {
		return nil, err
	}
	rec.AuditSeq = seq
	act.Live = ref
	act.Claims = append(act.Claims, ref)
	if err := put(w.tx, bucketActions, []byte(action), act); err != nil {
		return nil, err
	}
	return rec, put(w.tx, bucketClaims, []byte(ref), rec)
}

// settle clears action's live claim.
func (w *wtx) settle(action string) error {
	var act actionRecord
	if _, err := get(w.tx, bucketActions, []byte(action), &act); err != nil {
		return err
	}
	act.Live = ""
	return put(w.tx, bucketActions, []byte(action), &act)
}

// newRef returns a fresh claim ref: 130 random bits, so a ref cannot be
// guessed by a worker that does not hold it.
func newRef() string { return "c-" + rand.Text() }

func checkIdents(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := ident.Check(pairs[i], pairs[i+1]); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
	}
	return nil
}

func checkLease(d time.Duration) (time.Duration, error) {
	switch {
	case d == 0:
		return DefaultLease, nil
	case d < 0 || d > MaxLease:
		return 0, fmt.Errorf("%w: lease %s is outside (0, %s]", ErrInvalidArgument, d, MaxLease)
	}
	return d, nil
}
