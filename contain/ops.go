package contain

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/kvfence/kvfence/internal/ident"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
)

// DeriveState returns the containment state that boundaries' results
// make: full when every boundary acknowledged, full_with_alternate when
// every one acknowledged or was contained by an alternate and at least one
// by an alternate, none when none did either, partial otherwise.
func DeriveState(bs []ledger.BoundaryContainment) ledger.ContainmentState {
	acked, alt := 0, 0
	for _, b := range bs {
		switch b.Result {
		case ledger.BoundaryAcknowledged:
			acked++
		case ledger.BoundaryAlternate:
			alt++
		}
	}
	switch {
	case len(bs) == 0 || acked+alt == 0:
		return ledger.ContainmentNone
	case acked == len(bs):
		return ledger.ContainmentFull
	case acked+alt == len(bs):
		return ledger.ContainmentFullWithAlternate
	}
	return ledger.ContainmentPartial
}

// Alternate records that a boundary which could not acknowledge was
// contained by another, independently authorised path. The state then
// reads full_with_alternate at best, never full.
func (c *Coordinator) Alternate(ctx context.Context, req ledger.AlternateRequest) (ledger.Containment, error) {
	return c.o.Ledger.RecordAlternate(ctx, req)
}

// Show returns the action's containment record.
func (c *Coordinator) Show(action string) (ledger.Containment, error) {
	return c.o.Ledger.Containment(action)
}

// Mismatch kinds that Verify reports.
const (
	// MismatchSignature: a stored acknowledgment or its checkpoint does not
	// verify under the receiver's pinned key, or does not say what the
	// record says.
	MismatchSignature = "signature"
	// MismatchEpoch: the receiver's scope is at an epoch below the one the
	// containment installed there (a restored receiver).
	MismatchEpoch = "epoch_below_installed"
	// MismatchState: the record's state is not the one its boundaries'
	// results make.
	MismatchState = "state"
)

// Mismatch is one thing Verify found wrong.
type Mismatch struct {
	// Receiver and Scope name the boundary; both empty for the record's
	// state.
	Receiver, Scope string
	// Kind is one of the Mismatch* constants.
	Kind string
	// Detail says what, for people.
	Detail string
}

// CheckedBoundary is what Verify found at one acknowledged boundary.
type CheckedBoundary struct {
	// Receiver and Scope name the boundary.
	Receiver, Scope string
	// InstalledEpoch is the epoch the containment installed.
	InstalledEpoch uint64
	// Reached says whether the receiver answered.
	Reached bool
	// CurrentEpoch is the scope's epoch at the receiver, when Reached.
	CurrentEpoch uint64
	// Error is why the receiver was not reached, if it was not.
	Error string
}

// VerifyResult is Verify's report.
type VerifyResult struct {
	// Containment is the record verified.
	Containment ledger.Containment
	// Checked lists every acknowledged boundary.
	Checked []CheckedBoundary
	// Mismatches lists what does not verify; empty when all does.
	Mismatches []Mismatch
}

// Verify re-checks the action's containment: every stored acknowledgment
// against the receiver's pinned key (offline), the record's state against
// its boundaries' results, and, at every receiver it reaches, that the
// scope's epoch is not below the one the containment installed. It
// returns the report, with an error wrapping ErrVerifyMismatch if
// anything does not verify. An unreachable receiver is reported, not a
// mismatch: its acknowledgment was still checked offline.
func (c *Coordinator) Verify(ctx context.Context, action string) (VerifyResult, error) {
	rec, err := c.o.Ledger.Containment(action)
	if err != nil {
		return VerifyResult{}, err
	}
	res := VerifyResult{Containment: rec}
	if want := DeriveState(rec.Boundaries); rec.State != want {
		res.Mismatches = append(res.Mismatches, Mismatch{Kind: MismatchState,
			Detail: fmt.Sprintf("record says %s, its boundaries make %s", rec.State, want)})
	}
	s := c.session()
	defer s.close()
	checked := make([]*CheckedBoundary, len(rec.Boundaries))
	found := make([][]Mismatch, len(rec.Boundaries))
	c.byReceiver(ctx, s, rec.Boundaries, func(ctx context.Context, i int, r ledger.Receiver, bd Boundary, derr error) {
		b := rec.Boundaries[i]
		if b.Result != ledger.BoundaryAcknowledged {
			return
		}
		cb := &CheckedBoundary{Receiver: b.Receiver, Scope: b.Scope, InstalledEpoch: b.InstalledEpoch}
		checked[i] = cb
		if r.Name == "" {
			// The receiver is not registered: nothing to verify against.
			found[i] = append(found[i], Mismatch{b.Receiver, b.Scope, MismatchSignature, derr.Error()})
			return
		}
		if err := verifyStored(b, r); err != nil {
			found[i] = append(found[i], Mismatch{b.Receiver, b.Scope, MismatchSignature, err.Error()})
		}
		if derr != nil {
			cb.Error = printable(derr.Error(), maxErrorText)
			return
		}
		sctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
		defer cancel()
		st, err := bd.Status(sctx, b.Scope)
		if err == nil && st.Scope != b.Scope {
			err = fmt.Errorf("%w: asked for scope %q, got %q", ErrBadAnswer, b.Scope, st.Scope)
		}
		if err != nil {
			cb.Error = printable(err.Error(), maxErrorText)
			return
		}
		cb.Reached, cb.CurrentEpoch = true, st.Epoch
		if st.Epoch < b.InstalledEpoch {
			found[i] = append(found[i], Mismatch{b.Receiver, b.Scope, MismatchEpoch,
				fmt.Sprintf("scope is at epoch %d, below the installed %d: the receiver may have been restored from a backup", st.Epoch, b.InstalledEpoch)})
		}
	})
	for i := range rec.Boundaries {
		if checked[i] != nil {
			res.Checked = append(res.Checked, *checked[i])
		}
		res.Mismatches = append(res.Mismatches, found[i]...)
	}
	if len(res.Mismatches) > 0 {
		return res, fmt.Errorf("%w: %d mismatches in containment %s", ErrVerifyMismatch, len(res.Mismatches), rec.ID)
	}
	return res, nil
}

// verifyStored checks a recorded acknowledgment: it verifies under the
// pinned key, and the record's epochs are the signed ones.
func verifyStored(b ledger.BoundaryContainment, r ledger.Receiver) error {
	ack, _, err := b.VerifyAcknowledgment(r)
	if err != nil {
		return err
	}
	if ack.Scope != b.Scope || ack.HoldID != b.HoldID || ack.PreviousEpoch != b.PreviousEpoch || ack.Epoch != b.InstalledEpoch {
		return fmt.Errorf("%w: the record says scope %q hold %q epoch %d to %d; its acknowledgment %q %q %d to %d",
			ErrBadAnswer, b.Scope, b.HoldID, b.PreviousEpoch, b.InstalledEpoch, ack.Scope, ack.HoldID, ack.PreviousEpoch, ack.Epoch)
	}
	return nil
}

// ActivateRequest asks Activate to activate a successor.
type ActivateRequest struct {
	// Action is the contained action.
	Action string
	// Executor is the identity that alone may submit under the grants.
	Executor string
	// Claim is the successor's claim: the action's live claim, not the
	// superseded one.
	Claim string
	// Request is the exact request bytes, the ones the action's approval
	// binds.
	Request []byte
	// Decision references the review that authorised the successor.
	Decision string
	// TTL is each grant's lifetime; zero means the receiver's default.
	TTL time.Duration
}

// BoundaryOutcome is a boundary at which a successor was not activated.
type BoundaryOutcome struct {
	// Receiver and Scope name the boundary.
	Receiver, Scope string
	// Code is the error's code, or "alternate" for a boundary contained by
	// an alternate, which no grant is activated at.
	Code string
	// Error says why, for people.
	Error string
}

// ActivateResult is what Activate did.
type ActivateResult struct {
	// Containment is the record, with the successor's grants.
	Containment ledger.Containment
	// Activated are the grants activated, one per acknowledged boundary
	// that took it.
	Activated []ledger.SuccessorGrant
	// NotActivated are the boundaries without a grant, and why.
	NotActivated []BoundaryOutcome
}

// CodeAlternate is BoundaryOutcome.Code for a boundary contained by an
// alternate path, where no grant is activated.
const CodeAlternate = "alternate"

// Activate activates a successor's grant at every acknowledged boundary
// of the action, each at the epoch the containment installed there, and
// records the grants in the ledger. It refuses, before anything is
// activated anywhere, unless the containment is full or full with an
// alternate (ledger.ErrNotContained), its acknowledgments still verify
// (ErrVerifyMismatch), the superseded claim is reconciled
// (ledger.ErrNotReconciled), req.Claim is the action's live claim and
// req.Request the approved request. A boundary held again since refuses
// its activation (an epoch mismatch); the result says which boundaries
// took the grant and which did not, and the error wraps
// ErrActivationIncomplete. If recording the grants fails, the error says
// so and the result still lists the grants activated: they exist at their
// receivers.
func (c *Coordinator) Activate(ctx context.Context, req ActivateRequest) (ActivateResult, error) {
	for _, f := range [][2]string{{"action", req.Action}, {"executor", req.Executor}, {"claim", req.Claim}, {"decision", req.Decision}} {
		if err := ident.Check(f[0], f[1]); err != nil {
			return ActivateResult{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
	}
	if req.TTL < 0 {
		return ActivateResult{}, fmt.Errorf("%w: negative ttl", ErrInvalidArgument)
	}
	rec, err := c.o.Ledger.Containment(req.Action)
	if err != nil {
		return ActivateResult{}, err
	}
	if err := c.checkSuccessor(rec, req); err != nil {
		return ActivateResult{Containment: rec}, err
	}
	// The grant names what it succeeds: the decision, the containment and
	// the superseded claim, within the receiver's rules for a name.
	decision := fmt.Sprintf("%s; containment %s; supersedes claim %s", req.Decision, rec.ID, rec.SupersededClaim)
	if err := ident.Check("decision", decision); err != nil {
		return ActivateResult{Containment: rec}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	s := c.session()
	defer s.close()
	grants := make([]*ledger.SuccessorGrant, len(rec.Boundaries))
	outcomes := make([]*BoundaryOutcome, len(rec.Boundaries))
	c.byReceiver(ctx, s, rec.Boundaries, func(ctx context.Context, i int, r ledger.Receiver, bd Boundary, derr error) {
		b := rec.Boundaries[i]
		if b.Result == ledger.BoundaryAlternate {
			outcomes[i] = &BoundaryOutcome{b.Receiver, b.Scope, CodeAlternate, "contained by an alternate path; no grant is activated there"}
			return
		}
		if derr != nil {
			outcomes[i] = &BoundaryOutcome{b.Receiver, b.Scope, "unreachable", printable(derr.Error(), maxErrorText)}
			return
		}
		actx, cancel := context.WithTimeout(ctx, c.o.Timeout)
		defer cancel()
		g, err := bd.Activate(actx, kvfence.ActivateRequest{Scope: b.Scope, Executor: req.Executor, Claim: req.Claim,
			Request: req.Request, Epoch: b.InstalledEpoch, TTL: req.TTL, Decision: decision})
		if err == nil && (g.Scope != b.Scope || g.Epoch != b.InstalledEpoch || g.ID == "") {
			err = fmt.Errorf("%w: asked for a grant of %q at epoch %d, got %q at %d", ErrBadAnswer, b.Scope, b.InstalledEpoch, g.Scope, g.Epoch)
		}
		if err != nil {
			// An activation whose answer was lost has opened the scope
			// with exactly the successor's grant: adopt it rather than
			// report a boundary that has it as one that does not.
			if found, ok := c.activeSuccessor(ctx, bd, b, req, decision); ok {
				g, err = found, nil
			}
		}
		if err != nil {
			// The code and text may be the receiver's: printed as they
			// are, they must print as text.
			_, code := classify(err)
			outcomes[i] = &BoundaryOutcome{b.Receiver, b.Scope, printable(code, 64), printable(err.Error(), maxErrorText)}
			return
		}
		grants[i] = &ledger.SuccessorGrant{Receiver: b.Receiver, Scope: b.Scope, Grant: g.ID, Epoch: g.Epoch,
			Executor: req.Executor, Claim: req.Claim, Decision: decision, ActivatedAt: g.CreatedAt.UTC()}
	})
	var res ActivateResult
	incomplete := false
	for i := range rec.Boundaries {
		if grants[i] != nil {
			res.Activated = append(res.Activated, *grants[i])
		}
		if o := outcomes[i]; o != nil {
			res.NotActivated = append(res.NotActivated, *o)
			incomplete = incomplete || o.Code != CodeAlternate
		}
	}
	res.Containment = rec
	if len(res.Activated) > 0 {
		// What was activated is recorded even when some boundary refused:
		// those grants exist at their receivers.
		if res.Containment, err = c.o.Ledger.RecordSuccessor(ctx, rec.ID, res.Activated); err != nil {
			return res, err
		}
	}
	if incomplete {
		return res, fmt.Errorf("%w: %d of %d boundaries did not take the grant", ErrActivationIncomplete,
			len(rec.Boundaries)-len(res.Activated), len(rec.Boundaries))
	}
	return res, nil
}

// activeSuccessor returns the grant that opens b's scope if it is the one
// req asks for, at the epoch the containment installed, under the
// decision Activate gives it: a grant for the same claim activated by
// other means, under another decision, is not the one the ledger records.
func (c *Coordinator) activeSuccessor(ctx context.Context, bd Boundary, b ledger.BoundaryContainment, req ActivateRequest,
	decision string) (kvfence.Grant, bool) {
	sctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	st, err := bd.Status(sctx, b.Scope)
	if err != nil || st.Scope != b.Scope || st.Mode != kvfence.ModeOpen || st.Grant == nil {
		return kvfence.Grant{}, false
	}
	g := *st.Grant
	if g.Scope != b.Scope || g.Epoch != b.InstalledEpoch || st.Epoch != b.InstalledEpoch || g.Claim != req.Claim ||
		g.Executor != req.Executor || g.RequestSHA256 != sha256.Sum256(req.Request) || g.Decision != decision || g.ID == "" {
		return kvfence.Grant{}, false
	}
	return g, true
}

// checkSuccessor is every refusal of Activate that comes before anything
// is sent to a receiver.
func (c *Coordinator) checkSuccessor(rec ledger.Containment, req ActivateRequest) error {
	if (rec.State != ledger.ContainmentFull && rec.State != ledger.ContainmentFullWithAlternate) || DeriveState(rec.Boundaries) != rec.State {
		return fmt.Errorf("%w: containment %s of %s is %s", ledger.ErrNotContained, rec.ID, rec.Action, rec.State)
	}
	for _, b := range rec.Boundaries {
		if b.Result != ledger.BoundaryAcknowledged {
			continue
		}
		r, err := c.o.Ledger.Receiver(b.Receiver)
		if err == nil {
			err = verifyStored(b, r)
		}
		if err != nil {
			return fmt.Errorf("%w: %s:%s: %w", ErrVerifyMismatch, b.Receiver, b.Scope, err)
		}
	}
	view, err := c.o.Ledger.Action(rec.Action)
	if err != nil {
		return err
	}
	// Reconciled by the ledger's own check: the record says so and the
	// audit chain holds the reconcile entry.
	if err := c.o.Ledger.CheckReconciled(rec.SupersededClaim); err != nil {
		return fmt.Errorf("claim %s of %s: %w", rec.SupersededClaim, rec.Action, err)
	}
	if req.Claim == rec.SupersededClaim || req.Claim != view.Live {
		return fmt.Errorf("%w: the successor's claim must be the action's live claim (%q), not %q", ErrNotSuccessor, view.Live, req.Claim)
	}
	// The grant goes to the worker that holds the live claim, by the name
	// the receiver authenticates (a SPIFFE ID when served); a grant to
	// anyone else would open the scope to a worker the ledger never
	// gave the action.
	found := false
	for _, cl := range view.Claims {
		if cl.Ref != view.Live {
			continue
		}
		found = true
		if cl.Worker != req.Executor {
			return fmt.Errorf("%w: the live claim %s is worker %q's; the grant names executor %q", ErrNotSuccessor, cl.Ref, cl.Worker, req.Executor)
		}
	}
	if !found {
		return fmt.Errorf("%w: the live claim %s of %s has no record", ErrNotSuccessor, view.Live, rec.Action)
	}
	// The claim records are not sealed: the chain says who holds it.
	if err := c.o.Ledger.CheckLiveClaim(rec.Action, req.Claim, req.Executor); err != nil {
		return fmt.Errorf("claim %s of %s: %w", req.Claim, rec.Action, err)
	}
	if view.Approval == nil {
		return fmt.Errorf("%w: %s", ledger.ErrNotApproved, rec.Action)
	}
	// The digest as the approval's audit entry recorded it, not only as
	// the file now says.
	approved, err := c.o.Ledger.ApprovedRequest(rec.Action)
	if err != nil {
		return err
	}
	if sha256.Sum256(req.Request) != approved || approved != view.Approval.RequestSHA256 {
		return fmt.Errorf("%w: the request is not the one approved for %s", ErrNotSuccessor, rec.Action)
	}
	return nil
}
