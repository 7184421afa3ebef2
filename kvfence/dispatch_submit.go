package kvfence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
)

// A write to a remote target (docs/design.md §4.2) runs in three steps:
// Submit reads the object outside any transaction (readRemote); the
// decision, checks 1-11 against what was read, commits a receipt in state
// dispatching with its audit entry and anchor (decideDispatch); then,
// outside the transaction and the commit queue, the write is made unless
// a hold of the scope committed meanwhile, and its outcome is committed
// in a second transaction (finishDispatch, settleDispatch).

// remoteRead is what Submit read of a remote target's object.
type remoteRead struct {
	state RemoteState
	// err is the read's failure; noDispatcher says no dispatcher was
	// given for the kind, and nothing was read.
	err          error
	noDispatcher bool
}

// pendingDispatch is a committed dispatching decision, whose write is yet
// to be made.
type pendingDispatch struct {
	key           []byte
	scope, action string
	id            string
	epoch         uint64
	deadline      int64
	in            DispatchInput
}

// readRemote reads the object of s's target, if it is a remote one,
// through its kind's dispatcher, with a bounded timeout.
func (r *Receiver) readRemote(ctx context.Context, s *submission) {
	rr := &remoteRead{}
	s.remote = rr
	var t *targetRecord
	if err := r.view(func(tx engine.Tx) (err error) { t, err = getTargetKey(tx, s.keys.target); return err }); err != nil {
		rr.err = err
		return
	}
	if t == nil || t.Kind != TargetKubernetes {
		// The decision finds the target as it is then and denies.
		rr.err = ErrRemoteNotFound
		return
	}
	d := r.opts.Dispatchers[t.Kind]
	if d == nil {
		rr.noDispatcher = true
		return
	}
	rctx, cancel := context.WithTimeout(ctx, min(remoteReadTimeout, r.opts.DispatchTimeout))
	defer cancel()
	rr.state, rr.err = d.Read(rctx, *t.Object)
}

// refusal is the denial, if any, that what was read of t's object calls
// for: every check of it here is of input from another system.
func (rr *remoteRead) refusal(t *targetRecord) (Reason, string) {
	switch {
	case rr.noDispatcher:
		return ReasonPreconditionFailed, fmt.Sprintf("no dispatcher for kind %s", t.Kind)
	case errors.Is(rr.err, ErrRemoteNotFound):
		return ReasonPreconditionFailed, "the object does not exist"
	case rr.err != nil:
		return ReasonPreconditionFailed, "the object could not be read: " + clip(rr.err.Error(), maxEffectDetail)
	case rr.state.UID != t.UID:
		return ReasonPreconditionFailed, "object was deleted and recreated"
	case checkRemoteID("object version", rr.state.Version) != nil:
		return ReasonPreconditionFailed, "the object's version is not one the receiver records"
	case len(rr.state.Value) > MaxTargetValueSize:
		return ReasonPreconditionFailed, fmt.Sprintf("the object's value is %d bytes, over the %d-byte limit", len(rr.state.Value), MaxTargetValueSize)
	}
	return "", ""
}

// decideDispatch is check 12 for a remote target: the receipt in state
// dispatching and the decision's audit entry. The target's record is not
// written: its revision moves when the write is applied.
func (r *Receiver) decideDispatch(w *wtx, s *submission, t *targetRecord, value []byte) (Result, error) {
	env, req := s.env, s.req
	id, err := newGrantID(r.opts.Rand)
	if err != nil {
		return Result{}, err
	}
	now := w.now.UnixNano()
	deadline := w.now.Add(r.opts.DispatchTimeout).UnixNano()
	sum := sha256.Sum256(value)
	version := s.remote.state.Version
	seq := w.chain.Head().Seq + 1
	rc := &receiptRecord{Grant: env.Grant, RequestSHA256: s.digest[:], Target: req.Target, RevBefore: t.Revision, RevAfter: t.Revision,
		AuditSeq: seq, At: now, Dispatch: DispatchDispatching, DispatchID: id, Epoch: env.Epoch, Precondition: version,
		UID: t.UID, Deadline: deadline, ValueSHA256: sum[:]}
	if err := w.putReceiptAt(env.Scope, req.Action, s.keys.receipt, rc); err != nil {
		return Result{}, err
	}
	e := s.entry(Dispatching, "", "")
	e.RevBefore, e.RevAfter, e.ValueSHA256 = t.Revision, t.Revision, sum[:]
	e.Note = clip(fmt.Sprintf("dispatch %s; precondition %s", id, version), maxDenialDetail*4)
	if got, err := w.appendAudit(e); err != nil {
		return Result{}, err
	} else if got != seq {
		return Result{}, fmt.Errorf("kvfence: internal error: receipt names audit seq %d, entry got %d", seq, got)
	}
	s.pending = &pendingDispatch{key: s.keys.receipt, scope: env.Scope, action: req.Action, id: id, epoch: env.Epoch, deadline: deadline,
		in: DispatchInput{Object: *t.Object, UID: t.UID, Precondition: version, Value: bytes.Clone(value),
			Stamp: Stamp{Scope: env.Scope, Epoch: env.Epoch, Grant: env.Grant, Receipt: id}}}
	res := s.result(Dispatching, "", "", seq)
	res.Revision, res.Dispatch, res.DispatchID = t.Revision, DispatchDispatching, id
	return res, nil
}

// repeatDispatch answers a repeat of an envelope whose action has a
// remote receipt: with the receipt's state, never a second write.
func (w *wtx) repeatDispatch(s *submission, rc *receiptRecord) (Result, error) {
	o := outcomeOf(rc.Dispatch)
	if o == Applied {
		o = AlreadyApplied
	}
	e := s.entry(o, "", "")
	e.Note = clip(fmt.Sprintf("repeat of dispatch %s, %s", rc.DispatchID, rc.Dispatch), maxDenialDetail*4)
	seq, err := w.appendAudit(e)
	if err != nil {
		return Result{}, err
	}
	res := s.result(o, "", "", seq)
	res.Revision, res.Dispatch, res.DispatchID, res.Version = rc.RevAfter, rc.Dispatch, rc.DispatchID, rc.Version
	return res, nil
}

// realDeadline turns a deadline on the receiver's clock into one on this
// process's monotonic clock, by the time left now, at most DispatchTimeout:
// a clock stepped back after the decision (or another process's longer
// timeout) must not stretch a write or a hold's wait past it; a fence
// ends a write cut short.
func (r *Receiver) realDeadline(deadline int64) time.Time {
	return time.Now().Add(min(time.Duration(deadline-r.opts.Now().UnixNano()), r.opts.DispatchTimeout))
}

// finishDispatch makes the write a committed decision handed over, unless
// a hold of its scope committed since, and commits its outcome. decided
// and err are the decision's answer.
func (r *Receiver) finishDispatch(p *pendingDispatch, decided Result, err error) (Result, error) {
	if err != nil {
		// The decision may have committed (ErrNotAcknowledged: no anchor
		// covers it; ErrOutcomeUnknown) or not: the write must not start.
		// A receipt of this dispatch, if any, says so, so that neither a
		// repeat nor a hold waits for it; a random id names no other.
		_, _, _ = r.settleDispatch(p.key, p.id, DispatchCancelled, "", "the decision was not acknowledged")
		return decided, err
	}
	if r.faults.beforeGate != nil {
		r.faults.beforeGate(p.scope)
	}
	d := r.opts.Dispatchers[p.in.Object.kind()]
	if d == nil || !r.gate.mayStart(p.scope, p.epoch) {
		return r.dispatchResult(decided, p, DispatchCancelled, "", "a hold of the scope committed before the write started")
	}
	ctx, cancel := context.WithDeadline(context.Background(), r.realDeadline(p.deadline))
	st, aerr := d.Apply(ctx, p.in)
	cancel()
	switch {
	case aerr == nil && checkRemoteID("object version", st.Version) == nil:
		return r.dispatchResult(decided, p, DispatchApplied, st.Version, "")
	case errors.Is(aerr, ErrRemoteConflict):
		return r.dispatchResult(decided, p, DispatchConflict, "", "the object was not at the precondition")
	case errors.Is(aerr, ErrRemoteNotFound):
		return r.dispatchResult(decided, p, DispatchFailed, "", "the object does not exist")
	}
	// The write may land until its deadline: it is fenced off after it,
	// and only then recorded unknown, so that nothing of it can land once
	// the receipt is final. A fence that fails leaves the receipt
	// dispatching, for a hold or the next Open to fence.
	time.Sleep(time.Until(r.realDeadline(p.deadline)))
	fctx, fcancel := context.WithTimeout(context.Background(), r.opts.DispatchTimeout)
	defer fcancel()
	fid, ferr := newGrantID(r.opts.Rand)
	if ferr == nil && r.faults.skipFence {
		return r.dispatchResult(decided, p, DispatchUnknown, "", "no answer by the deadline; not fenced")
	}
	if ferr == nil {
		var fst RemoteState
		if fst, ferr = d.Fence(fctx, p.in.Object, Stamp{Scope: p.scope, Epoch: p.epoch, Receipt: fid}); ferr == nil || errors.Is(ferr, ErrRemoteNotFound) {
			return r.dispatchResultFenced(decided, p, fst.Version, "no answer by the deadline; fence "+fid)
		}
	}
	res := decided
	res.Outcome, res.Dispatch = OutcomeUnknown, DispatchDispatching
	res.Detail = "no answer by the deadline, and the object could not be fenced: " + clip(ferr.Error(), maxEffectDetail)
	return res, nil
}

// dispatchResult commits a dispatch's outcome and answers the worker with
// the state its receipt then holds, which a hold or an Open may have
// settled first.
func (r *Receiver) dispatchResult(decided Result, p *pendingDispatch, st DispatchState, version, note string) (Result, error) {
	return r.dispatchResultAfter(decided, p, st, version, note, false)
}

// dispatchResultFenced is dispatchResult for an unknown outcome after the
// dispatch's own fence, which is audited even if a hold settled the
// dispatch first (settleFenced).
func (r *Receiver) dispatchResultFenced(decided Result, p *pendingDispatch, version, note string) (Result, error) {
	return r.dispatchResultAfter(decided, p, DispatchUnknown, version, note, true)
}

func (r *Receiver) dispatchResultAfter(decided Result, p *pendingDispatch, st DispatchState, version, note string, fenced bool) (Result, error) {
	rc, seq, err := r.settleDispatchAfter(p.key, p.id, st, version, note, fenced)
	if err != nil {
		// The decision committed: a repeat of the envelope answers with
		// the receipt's state, which a hold or the next Open settles.
		return Result{}, fmt.Errorf("%w: %s: the outcome %s of dispatch %s was not recorded: %w", ErrNotAcknowledged, r.path, st, p.id, err)
	}
	res := decided
	res.Outcome, res.Dispatch, res.Version, res.Revision = outcomeOf(rc.Dispatch), rc.Dispatch, rc.Version, rc.RevAfter
	if res.Outcome != Applied {
		res.Detail = note
	}
	if seq != 0 {
		res.AuditSeq = seq
	}
	return res, nil
}

// settleDispatch commits outcome st of dispatch id, whose receipt is at
// key, with its audit entry, if the receipt is still dispatching; a
// receipt settled already is left as it is. It returns the receipt as it
// stands after, and the seq of the entry written (0 if none).
func (r *Receiver) settleDispatch(key []byte, id string, st DispatchState, version, note string) (receiptRecord, uint64, error) {
	return r.settleDispatchAfter(key, id, st, version, note, false)
}

// settleFenced is settleDispatch for a caller that has just written a
// fencing stamp on the object, whose id note names. If another path
// settled the dispatch first (a hold and the dispatch's own deadline
// fence at once, or another process on a shared etcd prefix), the
// receipt is left as it is but the fence still gets an audit entry, so
// that every stamp the receiver leaves on an object is one the audit
// chain records.
func (r *Receiver) settleFenced(key []byte, id string, st DispatchState, version, note string) (receiptRecord, uint64, error) {
	return r.settleDispatchAfter(key, id, st, version, note, true)
}

// settleDispatchAfter is settleDispatch; fenced says the caller wrote a
// fence that must be audited even if the receipt is settled already.
func (r *Receiver) settleDispatchAfter(key []byte, id string, st DispatchState, version, note string, fenced bool) (receiptRecord, uint64, error) {
	type settled struct {
		rc  receiptRecord
		seq uint64
	}
	out, err := update(r, len(key)+len(version)+len(note), func(w *wtx) (settled, error) {
		rc, err := w.receiptAt(key)
		if err != nil {
			return settled{}, err
		}
		if rc == nil || rc.DispatchID != id {
			return settled{}, fmt.Errorf("%w: receipt %q no longer names dispatch %s", ErrBadFormat, key, id)
		}
		if rc.Dispatch != DispatchDispatching && !fenced {
			w.idle++
			return settled{rc: *rc}, nil
		}
		t, err := w.target(rc.Target)
		if err != nil {
			return settled{}, err
		}
		if t == nil || t.Kind != TargetKubernetes {
			return settled{}, fmt.Errorf("%w: receipt %q names target %q, which is not a remote one", ErrBadFormat, key, rc.Target)
		}
		scope, action, _ := bytes.Cut(key, []byte{0})
		if rc.Dispatch != DispatchDispatching {
			// The receipt keeps the outcome recorded first; the entry
			// repeats it and names the extra fence and the version it
			// left.
			text := fmt.Sprintf("dispatch %s; already %s; version %s; %s", id, rc.Dispatch, version, note)
			seq, err := w.appendAudit(&audit.Entry{Kind: KindDispatch, Scope: t.Scope, Epoch: rc.Epoch, Grant: rc.Grant, Action: string(action),
				Target: rc.Target, Outcome: string(rc.Dispatch), RequestSHA256: rc.RequestSHA256, RevBefore: rc.RevBefore, RevAfter: rc.RevAfter,
				ValueSHA256: rc.ValueSHA256, Note: clip(text, maxDenialDetail*4)})
			if err != nil {
				return settled{}, err
			}
			return settled{rc: *rc, seq: seq}, nil
		}
		rc.Dispatch, rc.Version = st, version
		if st == DispatchApplied {
			t.Revision++
			rc.RevAfter = t.Revision
			if err := w.put(bucketTargets, []byte(rc.Target), t); err != nil {
				return settled{}, err
			}
		}
		if err := w.putReceiptAt(string(scope), string(action), key, rc); err != nil {
			return settled{}, err
		}
		text := fmt.Sprintf("dispatch %s", id)
		if version != "" {
			text += "; version " + version
		}
		if note != "" {
			text += "; " + note
		}
		seq, err := w.appendAudit(&audit.Entry{Kind: KindDispatch, Scope: t.Scope, Epoch: rc.Epoch, Grant: rc.Grant, Action: string(action),
			Target: rc.Target, Outcome: string(st), RequestSHA256: rc.RequestSHA256, RevBefore: rc.RevBefore, RevAfter: rc.RevAfter,
			ValueSHA256: rc.ValueSHA256, Note: clip(text, maxDenialDetail*4)})
		if err != nil {
			return settled{}, err
		}
		return settled{rc: *rc, seq: seq}, nil
	})
	if err != nil {
		return receiptRecord{}, 0, err
	}
	r.gate.notify()
	return out.rc, out.seq, nil
}

// kind is the kind of target an object belongs to: every remote object is
// a Kubernetes one for now.
func (RemoteObject) kind() TargetKind { return TargetKubernetes }

// readRemoteForCreate reads the object a remote target is created for: it
// must exist, and its UID and version must be ones the receiver records.
func (r *Receiver) readRemoteForCreate(ctx context.Context, kind TargetKind, obj RemoteObject) (RemoteState, error) {
	if err := obj.check(); err != nil {
		return RemoteState{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	d := r.opts.Dispatchers[kind]
	if d == nil {
		return RemoteState{}, fmt.Errorf("%w: no dispatcher for kind %s", ErrNoDispatcher, kind)
	}
	rctx, cancel := context.WithTimeout(ctx, min(remoteReadTimeout, r.opts.DispatchTimeout))
	defer cancel()
	st, err := d.Read(rctx, obj)
	if err != nil {
		return RemoteState{}, fmt.Errorf("kvfence: reading %s: %w", obj, err)
	}
	if err := checkRemoteID("object uid", st.UID); err != nil {
		return RemoteState{}, fmt.Errorf("kvfence: reading %s: %v", obj, err)
	}
	if len(st.Value) > MaxTargetValueSize {
		return RemoteState{}, fmt.Errorf("%w: %s: value is %d bytes, over the %d-byte limit", ErrInvalidArgument, obj, len(st.Value), MaxTargetValueSize)
	}
	return st, nil
}
