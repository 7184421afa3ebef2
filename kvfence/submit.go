package kvfence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/kvfence/kvfence/audit"
)

// submission is a Submit call after the work that needs no lock: strict
// decoding and hashing. Exactly one of denial and env/req describes it.
type submission struct {
	caller string
	env    *Envelope
	req    *Request
	digest [32]byte
	// denial is set when decoding failed (check 0).
	denial Reason
	detail string
	// rawSHA is the digest of the raw envelope bytes, recorded for a
	// malformed envelope so an operator can match the audit entry to a file.
	rawSHA [32]byte
}

// prepare runs check 0 outside the transaction.
func (r *Receiver) prepare(caller string, envelope []byte) *submission {
	s := &submission{caller: caller}
	env, err := DecodeEnvelope(envelope, r.opts.MaxEnvelopeSize)
	if err != nil {
		s.denial, s.detail, s.rawSHA = ReasonMalformedEnvelope, err.Error(), sha256.Sum256(envelope)
		return s
	}
	s.env = env
	s.digest = sha256.Sum256(env.Request)
	req, err := DecodeRequest(env.Request, r.opts.MaxEnvelopeSize)
	if err != nil {
		s.denial, s.detail = ReasonMalformedRequest, err.Error()
		return s
	}
	s.req = req
	return s
}

// Submit decides an envelope from caller, the identity the embedding
// application authenticated on its own channel. It runs every check of
// DESIGN §4 in order inside one write transaction, and applies the mutation
// only if all pass. A denial is a Result, recorded in the audit chain, not an
// error; an error is a fault, after which nothing was changed — except
// ErrNotAcknowledged, which says the decision committed but its anchor write
// failed (retrying the same envelope is safe).
//
// Concurrent calls are group-committed: they share one transaction, one
// checkpoint and one anchor write, and each gets the result it would have
// got had the calls run one by one in the order they were queued. ctx is
// checked before the call is queued; a queued call is not abandoned, so
// Submit then waits for its result.
func (r *Receiver) Submit(ctx context.Context, caller string, envelope []byte) (Result, error) {
	if err := checkName("caller", caller); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	// Decoding and hashing need no lock, so they happen before the call
	// joins the commit queue; the leader of its batch runs only decide.
	s := r.prepare(caller, envelope)
	return update(r, len(envelope), func(w *wtx) (Result, error) { return r.decide(w, s) })
}

// decide runs checks 1-12 for one submission inside w.
func (r *Receiver) decide(w *wtx, s *submission) (Result, error) {
	if s.env == nil {
		return w.deny(nil, s, s.denial, s.detail)
	}
	env, req := s.env, s.req
	ctl, err := w.control(env.Scope)
	if err != nil {
		return Result{}, err
	}
	if s.req == nil {
		return w.deny(ctl, s, s.denial, s.detail)
	}
	// 1
	if ctl == nil {
		return w.deny(nil, s, ReasonUnknownScope, "no such scope")
	}
	// 2-4: the fence. Only a test-only defective receiver skips them.
	if !r.defect.SkipAuthority {
		if ctl.Mode != ModeOpen {
			return w.deny(ctl, s, ReasonReceiverHeld, fmt.Sprintf("scope is held at epoch %d", ctl.Epoch))
		}
		if env.Epoch != ctl.Epoch {
			return w.deny(ctl, s, ReasonStaleEpoch, fmt.Sprintf("envelope epoch %d, scope epoch %d", env.Epoch, ctl.Epoch))
		}
		if env.Grant != ctl.ActiveGrant {
			return w.deny(ctl, s, ReasonInactiveGrant, "the grant is not the scope's active grant")
		}
	}
	// 5
	g, err := w.grant(env.Grant)
	if err != nil {
		return Result{}, err
	}
	if g == nil || g.Scope != env.Scope || g.Epoch != env.Epoch {
		return w.deny(ctl, s, ReasonUnknownGrant, "no grant with this id for this scope and epoch")
	}
	// 6: the caller's identity comes from the embedding application; the
	// envelope's executor field is a claim that must agree with it.
	if s.caller != env.Executor || env.Executor != g.Executor {
		return w.deny(ctl, s, ReasonExecutorMismatch, fmt.Sprintf("caller %q, envelope executor %q, grant executor %q", s.caller, env.Executor, g.Executor))
	}
	// 7
	if env.Claim != g.Claim {
		return w.deny(ctl, s, ReasonClaimMismatch, fmt.Sprintf("envelope claim %q, grant claim %q", env.Claim, g.Claim))
	}
	// 8
	if !bytes.Equal(s.digest[:], g.RequestSHA256) || req.Action != g.Action {
		return w.deny(ctl, s, ReasonRequestMismatch, fmt.Sprintf("request sha256 %x, grant binds %x", s.digest, g.RequestSHA256))
	}
	// 9
	now := w.now.UnixNano()
	if now < g.NotBefore {
		return w.deny(ctl, s, ReasonGrantNotYetValid, "valid from "+fromNanos(g.NotBefore).Format(time.RFC3339Nano))
	}
	if now >= g.NotAfter {
		return w.deny(ctl, s, ReasonGrantExpired, "expired at "+fromNanos(g.NotAfter).Format(time.RFC3339Nano))
	}
	// 10
	rc, err := w.receipt(env.Scope, req.Action)
	if err != nil {
		return Result{}, err
	}
	if rc != nil {
		if !bytes.Equal(rc.RequestSHA256, s.digest[:]) {
			return w.deny(ctl, s, ReasonActionReuseConflict, fmt.Sprintf("action applied earlier with request sha256 %x", rc.RequestSHA256))
		}
		seq, err := w.appendAudit(s.entry(AlreadyApplied, "", ""))
		if err != nil {
			return Result{}, err
		}
		res := s.result(AlreadyApplied, "", "", seq)
		res.Revision = rc.RevAfter
		return res, nil
	}
	// 11
	t, err := w.target(req.Target)
	if err != nil {
		return Result{}, err
	}
	if t == nil || t.Scope != env.Scope {
		return w.deny(ctl, s, ReasonUnknownTarget, "no such target in this scope")
	}
	if req.ExpectRevision != nil && *req.ExpectRevision != t.Revision {
		return w.deny(ctl, s, ReasonPreconditionFailed, fmt.Sprintf("expected revision %d, target is at %d", *req.ExpectRevision, t.Revision))
	}
	if req.ExpectValue != nil && !bytes.Equal(*req.ExpectValue, t.Value) {
		return w.deny(ctl, s, ReasonPreconditionFailed, "expected value differs from the target's value")
	}
	var value []byte
	if req.Set != nil {
		value = *req.Set
	} else {
		value, err = applyPatch(req.patch, t.Value)
		if err != nil {
			return w.deny(ctl, s, ReasonPreconditionFailed, err.Error())
		}
	}
	if len(value) > MaxTargetValueSize {
		return w.deny(ctl, s, ReasonPreconditionFailed, fmt.Sprintf("new value is %d bytes, over the %d-byte limit", len(value), MaxTargetValueSize))
	}
	// 12: value, receipt and audit entry commit together or not at all.
	before := t.Revision
	t.Revision++
	t.Value = value
	if err := w.put(bucketTargets, []byte(req.Target), t); err != nil {
		return Result{}, err
	}
	e := s.entry(Applied, "", "")
	e.RevBefore, e.RevAfter = before, t.Revision
	sum := sha256.Sum256(value)
	e.ValueSHA256 = sum[:]
	// The receipt names the audit seq, which is the chain's next one.
	seq := w.chain.Head().Seq + 1
	if err := w.putReceipt(env.Scope, req.Action, &receiptRecord{Grant: env.Grant, RequestSHA256: s.digest[:],
		Target: req.Target, RevBefore: before, RevAfter: t.Revision, AuditSeq: seq, At: now}); err != nil {
		return Result{}, err
	}
	if got, err := w.appendAudit(e); err != nil {
		return Result{}, err
	} else if got != seq {
		return Result{}, fmt.Errorf("kvfence: internal error: receipt names audit seq %d, entry got %d", seq, got)
	}
	res := s.result(Applied, "", "", seq)
	res.Revision = t.Revision
	return res, nil
}

// deny records a denial in the audit chain and, for a known scope, in its
// control record's counters.
func (w *wtx) deny(ctl *controlRecord, s *submission, reason Reason, detail string) (Result, error) {
	if ctl != nil {
		if ctl.Denials == nil {
			ctl.Denials = make(map[Reason]uint64, 1)
		}
		ctl.Denials[reason]++
		if reason.isStale() {
			ctl.LastStaleRejectionAt = w.now.UnixNano()
			ctl.StaleRejections++
		}
		if err := w.putControl(s.env.Scope, ctl); err != nil {
			return Result{}, err
		}
	}
	seq, err := w.appendAudit(s.entry(Denied, reason, detail))
	if err != nil {
		return Result{}, err
	}
	return s.result(Denied, reason, detail, seq), nil
}

// entry is the audit entry for this submission's decision.
func (s *submission) entry(o Outcome, reason Reason, detail string) *audit.Entry {
	e := &audit.Entry{Kind: KindSubmit, Outcome: string(o), Reason: string(reason), Executor: s.caller}
	if s.env == nil {
		e.RequestSHA256 = nil
		e.Note = fmt.Sprintf("envelope sha256 %x: %s", s.rawSHA, detail)
		return e
	}
	e.Scope, e.Epoch, e.Grant = s.env.Scope, s.env.Epoch, s.env.Grant
	e.RequestSHA256 = s.digest[:]
	if s.req != nil {
		e.Action, e.Target = s.req.Action, s.req.Target
	}
	if s.caller != s.env.Executor {
		e.Note = fmt.Sprintf("envelope executor %q", s.env.Executor)
	}
	if detail != "" {
		if e.Note != "" {
			e.Note += "; "
		}
		e.Note += detail
	}
	return e
}

func (s *submission) result(o Outcome, reason Reason, detail string, seq uint64) Result {
	res := Result{Outcome: o, Reason: reason, Detail: detail, AuditSeq: seq}
	if s.env != nil {
		res.Scope, res.Epoch, res.Grant = s.env.Scope, s.env.Epoch, s.env.Grant
	}
	if s.req != nil {
		res.Action, res.Target = s.req.Action, s.req.Target
	}
	return res
}
