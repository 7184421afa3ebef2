package kvfence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
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
	// rawSHA and rawLen describe the raw envelope bytes, recorded for a
	// malformed envelope so an operator can match the audit entry to a file.
	rawSHA [32]byte
	rawLen int
	// grant is the envelope's grant once check 5 found it, and target
	// whether check 11 found the request's target. decide sets both on
	// every run; they say which identifiers matched a record and may be
	// stored verbatim.
	grant  *grantRecord
	target bool
	// scope is whether the envelope's scope exists, set by deny.
	scope bool
	// keys are the store keys decide reads and writes, made once, outside
	// the transaction, in one buffer.
	keys submissionKeys
	// remote is what Submit read of a remote target's object before the
	// decision; needRemote is set by a decision that met a remote target
	// without it, and wrote nothing; pending is the dispatch a committed
	// decision handed over (dispatch_submit.go). decide resets the last
	// two on every run.
	remote     *remoteRead
	needRemote bool
	pending    *pendingDispatch
	// etcdApplied says decide's last run applied a write to an etcd
	// target (or answered already_applied for one): the result's Revision
	// is then keyRev, the revision of the commit that wrote the key, which
	// the engine gives only once the transaction committed.
	etcdApplied bool
	keyRev      int64
}

// submissionKeys are a submission's keys: its scope's control record,
// its grant, its target and its receipt. Fields the envelope or request
// does not give are nil.
type submissionKeys struct {
	scope, grant, target, receipt []byte
}

// makeKeys fills s.keys from its envelope and request.
func (s *submission) makeKeys() {
	env := s.env
	n := 2*len(env.Scope) + len(env.Grant)
	if s.req != nil {
		n += len(s.req.Target) + 1 + len(s.req.Action)
	}
	buf := make([]byte, 0, n)
	cut := func(parts ...string) []byte {
		start := len(buf)
		for _, p := range parts {
			buf = append(buf, p...)
		}
		return buf[start:len(buf):len(buf)]
	}
	s.keys.scope = cut(env.Scope)
	s.keys.grant = cut(env.Grant)
	if s.req != nil {
		s.keys.target = cut(s.req.Target)
		s.keys.receipt = cut(env.Scope, "\x00", s.req.Action)
	}
}

// prepare runs check 0 outside the transaction.
func (r *Receiver) prepare(caller string, envelope []byte) *submission {
	s := &submission{caller: caller}
	env, err := DecodeEnvelope(envelope, r.opts.MaxEnvelopeSize)
	if err != nil {
		s.denial, s.detail, s.rawSHA, s.rawLen = ReasonMalformedEnvelope, err.Error(), sha256.Sum256(envelope), len(envelope)
		return s
	}
	s.env = env
	s.digest = sha256.Sum256(env.Request)
	req, err := DecodeRequest(env.Request, r.opts.MaxEnvelopeSize)
	if err != nil {
		s.denial, s.detail = ReasonMalformedRequest, err.Error()
	} else {
		s.req = req
	}
	s.makeKeys()
	return s
}

// Submit decides an envelope from caller, the identity the embedding
// application authenticated on its own channel. It runs every check of
// docs/design.md §4 in order inside one write transaction, and applies the mutation
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
	decideOnce := r.decideCall
	if r.defect.CheckOutsideTransaction && defectsAllowed.Load() {
		decideOnce = r.submitCheckedBefore
	}
	res, err := decideOnce(s, len(envelope))
	return r.submitAfter(ctx, s, len(envelope), decideOnce, res, err)
}

// submitAfter finishes a Submit after its first decision: res and err.
func (r *Receiver) submitAfter(ctx context.Context, s *submission, size int, decideOnce func(*submission, int) (Result, error), res Result, err error) (Result, error) {
	if err == nil && s.needRemote {
		// The target is remote: its object is read outside any
		// transaction, and the decision made again against what it holds.
		r.readRemote(ctx, s)
		res, err = decideOnce(s, size)
	}
	if s.pending != nil {
		return r.finishDispatch(s.pending, res, err)
	}
	return res, err
}

// SubmitAll decides envelopes from caller as as many concurrent calls of
// Submit would, and returns each one's result or error at its index. Their
// decisions join the commit queue together, in order, so that a leader
// takes them all into one batch (within its limits): concurrent Submits
// join it one at a time, and on an idle receiver the first of them leads
// a commit of its own while the others queue behind it. A server that
// receives many envelopes in one request decides them with it.
func (r *Receiver) SubmitAll(ctx context.Context, caller string, envelopes [][]byte) ([]Result, []error) {
	results, errs := make([]Result, len(envelopes)), make([]error, len(envelopes))
	if len(envelopes) == 0 {
		// An empty call would take the commit queue's lead with nothing
		// to commit, and never pass it on.
		return results, errs
	}
	err := ctx.Err()
	if cerr := checkName("caller", caller); cerr != nil {
		err = fmt.Errorf("%w: %v", ErrInvalidArgument, cerr)
	}
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return results, errs
	}
	// Each envelope is decided on a goroutine of its own, where a panic
	// (a dispatcher's, say) would end the process: it is carried to the
	// caller's goroutine instead, as Submit would raise it there, once
	// every other decision has finished.
	var wg sync.WaitGroup
	var panicked atomic.Pointer[any]
	decide := func(f func()) {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					panicked.CompareAndSwap(nil, &p)
				}
			}()
			f()
		})
	}
	defer func() {
		if p := panicked.Load(); p != nil {
			panic(*p)
		}
	}()
	if r.opts.ReadOnly || (r.defect.CheckOutsideTransaction && defectsAllowed.Load()) {
		// Nothing joins the queue (read-only), or the decision is made
		// the defective way: Submit's own path serves each envelope.
		for i, env := range envelopes {
			decide(func() { results[i], errs[i] = r.Submit(ctx, caller, env) })
		}
		wg.Wait()
		return results, errs
	}
	subs := make([]*submission, len(envelopes))
	calls := make([]*call, len(envelopes))
	for i, env := range envelopes {
		s := r.prepare(caller, env)
		subs[i] = s
		calls[i] = &call{fn: func(w *wtx) (any, error) { return r.decide(w, s) }, size: len(env), worker: true, sub: s,
			wake: make(chan struct{}, 1)}
	}
	lead := r.queue.enqueue(calls...)
	for i, c := range calls {
		decide(func() {
			r.await(c, lead && i == 0)
			s, res, err := subs[i], Result{}, c.err
			if err == nil {
				res = s.committed(c.res.(Result))
			}
			results[i], errs[i] = r.submitAfter(ctx, s, len(envelopes[i]), r.decideCall, res, err)
		})
	}
	wg.Wait()
	return results, errs
}

// decide runs checks 1-12 for one submission inside w.
func (r *Receiver) decide(w *wtx, s *submission) (Result, error) {
	s.grant, s.target, s.scope = nil, false, false
	s.needRemote, s.pending = false, nil
	s.etcdApplied, s.keyRev = false, 0
	if s.env == nil {
		return w.deny(nil, s, s.denial, s.detail)
	}
	env, req := s.env, s.req
	ctl, err := w.controlAt(s.keys.scope)
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
	s.scope = true
	// 2-4: the fence. Only a defective receiver of this package's tests or
	// the lab build skips them; the switch is read here too, so that a
	// variant that reached a receiver by any other way has no effect.
	if !r.defect.SkipAuthority || !defectsAllowed.Load() {
		if ctl.Mode != ModeOpen {
			return w.denyStale(ctl, s, ReasonReceiverHeld, fmt.Sprintf("scope is held at epoch %d", ctl.Epoch))
		}
		if env.Epoch != ctl.Epoch {
			return w.denyStale(ctl, s, ReasonStaleEpoch, fmt.Sprintf("envelope epoch %d, scope epoch %d", env.Epoch, ctl.Epoch))
		}
		if env.Grant != ctl.ActiveGrant {
			return w.denyStale(ctl, s, ReasonInactiveGrant, "the grant is not the scope's active grant")
		}
	}
	// 5
	g, err := w.grantAt(s.keys.grant)
	if err != nil {
		return Result{}, err
	}
	if g == nil || g.Scope != env.Scope || g.Epoch != env.Epoch {
		return w.deny(ctl, s, ReasonUnknownGrant, "no grant with this id for this scope and epoch")
	}
	// A recovery moves every epoch past its grants' and clears the active
	// ones, so this never decides alone; it keeps the revocation in the
	// record itself, not only in epoch arithmetic over a database whose
	// history was in doubt.
	if g.RevokedSeq != 0 {
		return w.deny(ctl, s, ReasonUnknownGrant, fmt.Sprintf("grant revoked by the recovery at audit seq %d", g.RevokedSeq))
	}
	s.grant = g
	// 6: the caller's identity comes from the embedding application; the
	// envelope's executor field is a claim that must agree with it.
	if s.caller != env.Executor || env.Executor != g.Executor {
		return w.deny(ctl, s, ReasonExecutorMismatch, executorDetail(s.caller, env.Executor, g.Executor))
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
	rc, err := w.receiptAt(s.keys.receipt)
	if err != nil {
		return Result{}, err
	}
	if rc != nil {
		if !bytes.Equal(rc.RequestSHA256, s.digest[:]) {
			return w.deny(ctl, s, ReasonActionReuseConflict, fmt.Sprintf("action applied earlier with request sha256 %x", rc.RequestSHA256))
		}
		if rc.isRemote() {
			// Never dispatched twice: the repeat is told the state.
			return w.repeatDispatch(s, rc)
		}
		seq, err := w.appendAudit(s.entry(AlreadyApplied, "", ""))
		if err != nil {
			return Result{}, err
		}
		res := s.result(AlreadyApplied, "", "", seq)
		res.Revision = rc.RevAfter
		if err := w.etcdAlreadyApplied(s, rc, &res); err != nil {
			return Result{}, err
		}
		return res, nil
	}
	// 11
	t, err := w.targetAt(s.keys.target)
	if err != nil {
		return Result{}, err
	}
	if t == nil || t.Scope != env.Scope {
		return w.deny(ctl, s, ReasonUnknownTarget, "no such target in this scope")
	}
	s.target = true
	// An etcd target's value and revision are its key's, read here in the
	// transaction that will write it: the commit compares the key's mod
	// revision, so a write of the key by anyone else after this read makes
	// the decision run again on what that write left. A remote target's
	// value is the object's, read by Submit before the transaction; its
	// expect_revision is the target's kvfence revision, which counts the
	// writes the receiver applied to it, not the object's version.
	cur, curRev := t.Value, t.Revision
	var raw engine.RawTx
	switch t.Kind {
	case TargetKubernetes:
		if s.remote == nil {
			// Nothing is written: Submit reads the object outside the
			// transaction and decides again.
			s.needRemote = true
			w.idle++
			return Result{}, nil
		}
		if reason, detail := s.remote.refusal(t); reason != "" {
			return w.deny(ctl, s, reason, detail)
		}
		cur = s.remote.state.Value
	case TargetEtcd:
		if w.rawWritten[t.Key] {
			return Result{}, errRawRewrite
		}
		if raw, err = rawTx(w.tx); err != nil {
			return Result{}, err
		}
		v, mod, err := raw.GetRaw([]byte(t.Key))
		if err != nil {
			return Result{}, err
		}
		if v == nil {
			return w.deny(ctl, s, ReasonPreconditionFailed, "the target's etcd key does not exist: it was deleted outside the fence")
		}
		cur, curRev = v, uint64(mod)
	}
	if req.ExpectRevision != nil && *req.ExpectRevision != curRev {
		return w.deny(ctl, s, ReasonPreconditionFailed, fmt.Sprintf("expected revision %d, target is at %d", *req.ExpectRevision, curRev))
	}
	if req.ExpectValue != nil && !bytes.Equal(*req.ExpectValue, cur) {
		return w.deny(ctl, s, ReasonPreconditionFailed, "expected value differs from the target's value")
	}
	var value []byte
	if req.Set != nil {
		value = *req.Set
	} else {
		value, err = applyPatch(req.patch, cur)
		if err != nil {
			return w.deny(ctl, s, ReasonPreconditionFailed, err.Error())
		}
	}
	if len(value) > MaxTargetValueSize {
		return w.deny(ctl, s, ReasonPreconditionFailed, fmt.Sprintf("new value is %d bytes, over the %d-byte limit", len(value), MaxTargetValueSize))
	}
	if vc, ok := r.opts.Dispatchers[t.Kind].(ValueChecker); ok && t.Kind == TargetKubernetes {
		if value, err = checkValue(vc, value); err != nil {
			return w.deny(ctl, s, ReasonPreconditionFailed, clip("the new value is not one a target of kind "+string(t.Kind)+
				" can hold: "+err.Error(), maxDenialDetail*4))
		}
		if len(value) > MaxTargetValueSize {
			return w.deny(ctl, s, ReasonPreconditionFailed, fmt.Sprintf("checked value is %d bytes, over the %d-byte limit", len(value), MaxTargetValueSize))
		}
	}
	// 12: value, receipt, audit entry and, for a func target, the
	// effect's writes commit together or not at all. The effect runs
	// last of the checks and first of the writes, so that its refusal
	// leaves nothing but the denial.
	if t.Kind == TargetKubernetes {
		return r.decideDispatch(w, s, t, value)
	}
	if t.Kind == TargetFunc {
		eff, ok := r.opts.Effects[t.Effect]
		if !ok {
			return w.deny(ctl, s, ReasonPreconditionFailed, fmt.Sprintf("the target's effect %q is not registered with this receiver", t.Effect))
		}
		refusal, err := w.runEffect(eff, EffectInput{Scope: env.Scope, Epoch: env.Epoch, Grant: env.Grant, Executor: s.caller,
			Action: req.Action, Target: req.Target, Request: bytes.Clone(env.Request), Value: bytes.Clone(value), Revision: t.Revision + 1})
		if err != nil {
			return Result{}, err
		}
		if refusal != "" {
			return w.deny(ctl, s, ReasonPreconditionFailed, "effect refused: "+refusal)
		}
	}
	before := t.Revision
	t.Revision++
	if raw != nil {
		if err := raw.PutRaw([]byte(t.Key), value); err != nil {
			return Result{}, err
		}
		if w.rawWritten == nil {
			w.rawWritten = map[string]bool{}
		}
		w.rawWritten[t.Key] = true
		s.etcdApplied = true
		raw.OnCommit(func(rev int64) { s.keyRev = rev })
		t.setEtcdValue(value)
	} else {
		t.Value = value
	}
	if err := w.put(bucketTargets, s.keys.target, t); err != nil {
		return Result{}, err
	}
	e := s.entry(Applied, "", "")
	e.RevBefore, e.RevAfter = before, t.Revision
	if raw != nil {
		// The key's new mod revision is the commit's, the revision of this
		// entry's own key; the one it replaced is known now.
		e.Note = fmt.Sprintf("etcd key mod revision %d replaced", curRev)
	}
	sum := sha256.Sum256(value)
	e.ValueSHA256 = sum[:]
	// The receipt names the audit seq, which is the chain's next one.
	seq := w.chain.Head().Seq + 1
	if err := w.putReceiptAt(env.Scope, req.Action, s.keys.receipt, &receiptRecord{Grant: env.Grant, RequestSHA256: s.digest[:],
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

// denyStale denies a stale-authority request (checks 2-4). A superseded
// worker's grant is usually a real, older grant of this scope: finding it
// lets the audit entry name its action, so that an operator reads which
// approved change a stale worker tried to make.
//
// A worker that retries an envelope whose change was applied before the
// hold would otherwise read the denial as "my change never happened". So
// when this scope holds a receipt for the request's action whose request
// digest is this envelope's, the detail says so and gives the receipt's
// audit seq, whoever applied it (often a successor given the same
// request). It is told only to a worker that was approved for exactly
// this request: the envelope names a grant of this scope whose request
// digest is this one, and the caller is that grant's executor. Anyone
// else could otherwise guess request bytes (a low-entropy value) under a
// made-up grant and learn from the answer which guess was applied. It is
// told nothing when the digests differ (not even that a receipt exists),
// so a prober cannot learn which actions were applied.
func (w *wtx) denyStale(ctl *controlRecord, s *submission, reason Reason, detail string) (Result, error) {
	if isGrantID(s.env.Grant) {
		g, err := w.grantAt(s.keys.grant)
		if err != nil {
			return Result{}, err
		}
		if g != nil && g.Scope == s.env.Scope {
			s.grant = g
		}
	}
	rc, err := w.receiptAt(s.keys.receipt)
	if err != nil {
		return Result{}, err
	}
	res, err := w.deny(ctl, s, reason, detail)
	if err == nil && rc != nil && bytes.Equal(rc.RequestSHA256, s.digest[:]) &&
		s.grant != nil && s.caller == s.grant.Executor && bytes.Equal(s.grant.RequestSHA256, s.digest[:]) {
		// Only the answer says so: the audit entry keeps its bounded note,
		// and the receipt is in the chain already.
		res.Detail += fmt.Sprintf("; this exact request was applied earlier: its receipt is at audit seq %d", rc.AuditSeq)
		// The machine-readable seq says "your effect is in": it is given
		// only to the executor of the grant the receipt was applied
		// under, not to a worker whose same request a successor applied.
		applier := s.grant
		if rc.Grant != s.grant.ID {
			if applier, err = w.grant(rc.Grant); err != nil {
				return Result{}, err
			}
		}
		if applier != nil && applier.Executor == s.caller {
			res.ReceiptSeq = rc.AuditSeq
		}
	}
	return res, err
}

// deny records a denial in the audit chain and, for a known scope, in its
// control record's counters.
func (w *wtx) deny(ctl *controlRecord, s *submission, reason Reason, detail string) (Result, error) {
	s.scope = ctl != nil
	if ctl != nil {
		if ctl.Denials == nil {
			ctl.Denials = make(map[Reason]uint64, 1)
		}
		ctl.Denials[reason]++
		if reason.isStale() {
			ctl.LastStaleRejectionAt = w.now.UnixNano()
			ctl.StaleRejections++
		}
		if err := w.put(bucketControl, s.keys.scope, ctl); err != nil {
			return Result{}, err
		}
	}
	seq, err := w.appendAudit(s.entry(Denied, reason, detail))
	if err != nil {
		return Result{}, err
	}
	return s.result(Denied, reason, detail, seq), nil
}

// entry is the audit entry for this submission's decision. Its size is
// bounded whatever the envelope carries, because a stale or hostile caller
// can make the receiver write one per call: an identifier from the envelope
// is stored verbatim only when it matched a record of the receiver (the
// scope exists, the grant was found, the target exists, the envelope's
// executor is the grant's) or has the fixed form of a grant id; otherwise
// the entry records its length and a prefix of its SHA-256 (idDigest), and
// only for the identifier that the failed check compared. Notes quote no
// envelope text, only numbers, times and fixed words, cut to
// maxDenialDetail bytes. The caller is stored as given: it is the identity
// the embedding application authenticated, not a claim of the envelope.
func (s *submission) entry(o Outcome, reason Reason, detail string) *audit.Entry {
	e := &audit.Entry{Kind: KindSubmit, Outcome: string(o), Reason: string(reason), Executor: s.caller}
	if s.env == nil {
		e.Note = fmt.Sprintf("envelope %dB sha256:%x; %s", s.rawLen, s.rawSHA, clip(detail, maxDenialDetail))
		return e
	}
	env := s.env
	var notes []string
	e.Epoch, e.RequestSHA256 = env.Epoch, s.digest[:]
	if reason == ReasonUnknownScope {
		// Nothing matched: the scope is the one thing checked.
		e.Note = idDigest("scope", env.Scope)
		return e
	}
	if s.scope {
		e.Scope = env.Scope
	} else {
		notes = append(notes, idDigest("scope", env.Scope))
	}
	switch {
	case s.grant != nil || isGrantID(env.Grant):
		e.Grant = env.Grant
	case reason == ReasonInactiveGrant || reason == ReasonUnknownGrant:
		notes = append(notes, idDigest("grant", env.Grant))
	}
	if s.grant != nil && s.req != nil && s.req.Action == s.grant.Action {
		e.Action = s.req.Action
	}
	if s.target {
		e.Target = s.req.Target
	}
	switch reason {
	case ReasonExecutorMismatch:
		if s.caller != env.Executor {
			if s.grant != nil && env.Executor == s.grant.Executor {
				notes = append(notes, "envelope executor is the grant's")
			} else {
				notes = append(notes, idDigest("envelope executor", env.Executor))
			}
		}
	case ReasonClaimMismatch:
		notes = append(notes, idDigest("envelope claim", env.Claim))
	case ReasonMalformedRequest, ReasonReceiverHeld, ReasonStaleEpoch, ReasonGrantNotYetValid,
		ReasonGrantExpired, ReasonUnknownTarget, ReasonPreconditionFailed:
		// For a scope that does not exist its digest is the note: the
		// decoder's words would take the entry past its bound.
		if detail != "" && s.scope {
			notes = append(notes, clip(detail, maxDenialDetail))
		}
	}
	e.Note = strings.Join(notes, "; ")
	return e
}

// executorDetail explains an executor mismatch naming each identity once:
// two of the three are often the same.
func executorDetail(caller, envelope, grant string) string {
	switch {
	case caller == envelope:
		return fmt.Sprintf("caller and envelope executor %q, grant executor %q", caller, grant)
	case envelope == grant:
		return fmt.Sprintf("caller %q, envelope and grant executor %q", caller, envelope)
	case caller == grant:
		return fmt.Sprintf("caller and grant executor %q, envelope executor %q", caller, envelope)
	}
	return fmt.Sprintf("caller %q, envelope executor %q, grant executor %q", caller, envelope, grant)
}

// maxDenialDetail bounds the words a denial's audit entry adds about why.
const maxDenialDetail = 64

// idDigest names an identifier that matched nothing by its length and the
// first 16 bytes of its SHA-256: enough to tell callers apart and to match
// a suspect file, at a fixed cost.
func idDigest(name, v string) string {
	sum := sha256.Sum256([]byte(v))
	return fmt.Sprintf("%s %dB sha256:%x", name, len(v), sum[:16])
}

// clip cuts s to at most n bytes of valid UTF-8.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}

// isGrantID reports whether s has the form newGrantID gives grant ids: a
// bounded string that may be stored verbatim whether or not it matched.
func isGrantID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
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

// checkValue runs a dispatcher's value check on a copy of value, turning
// a panic into a refusal: the check runs inside the write transaction,
// where a panic would fail the whole batch as a database fault.
func checkValue(vc ValueChecker, value []byte) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("the value check panicked: %v", p)
		}
	}()
	return vc.CheckValue(bytes.Clone(value))
}
