package kvfence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/kvfence/kvfence/audit"
)

// Admin is the privileged handle of a receiver: it creates scopes and
// targets, activates grants and commits holds. An embedding service keeps
// it for its administrators and never hands it to workers, which get only
// Submit.
type Admin struct {
	r *Receiver
	// actor is recorded on every change's audit entry; see As.
	actor string
}

// Admin returns the receiver's administrative handle.
func (r *Receiver) Admin() *Admin { return &Admin{r: r} }

// CreateScope creates a protected scope at epoch 1, held, with no active
// grant, whose maximum grant lifetime is the receiver's, and returns its
// status as created, as client.Client.CreateScope does. CreateScopeWith
// takes options.
func (a *Admin) CreateScope(ctx context.Context, scope string) (ScopeStatus, error) {
	return a.CreateScopeWith(ctx, scope, ScopeOptions{})
}

// CreateTarget creates a target in an existing scope at revision 1 and
// returns it as created, as client.Client.CreateTarget does. Target names
// are unique across the receiver, not per scope: a name that any scope
// holds is ErrTargetExists, whose message names that scope.
func (a *Admin) CreateTarget(ctx context.Context, scope, target string, value []byte) (Target, error) {
	return a.CreateTargetSpec(ctx, TargetSpec{Scope: scope, Name: target, Value: value})
}

// TargetSpec describes a target to create.
type TargetSpec struct {
	// Scope is the existing scope the target belongs to.
	Scope string
	// Name is the target's name, unique across the receiver.
	Name string
	// Value is the target's value at revision 1.
	Value []byte
	// Kind is the target's kind; empty means TargetInternal.
	Kind TargetKind
	// Effect names the effect of a TargetFunc target, which must be
	// registered with this receiver (Options.Effects); it must be empty
	// for any other kind.
	Effect string
	// Object names the remote object of a TargetKubernetes target, which
	// must exist: it is read once, through the kind's dispatcher, and the
	// target records the incarnation (UID) it found. Value must then be
	// empty, since the object holds the value. Nil for any other kind.
	Object *RemoteObject
	// Key is the etcd key of a TargetEtcd target: outside the receiver's
	// prefix and any prefix the engine reserves, 1 to
	// engine.MaxRawKeySize bytes of printable ASCII without blanks. The
	// key must be absent, and is then written with Value, or hold exactly
	// Value, and is then adopted. It must be empty for any other kind.
	Key string
}

// CreateTargetSpec is CreateTarget for a target of any kind. A func
// target's effect must be registered with this receiver
// (ErrEffectNotRegistered); its audit entry records the kind and the
// effect's name. An etcd target needs the etcd engine (ErrKindUnsupported
// on any other) and a key no other target has (ErrTargetKeyInUse); its
// key is written with the value in the same transaction as the target's
// record and audit entry, which notes the kind and the key, and the
// returned Target's Revision is the key's mod revision. A kubernetes
// target's object is read once through the kind's dispatcher and must
// exist. An internal target is created exactly as CreateTarget creates it.
func (a *Admin) CreateTargetSpec(ctx context.Context, spec TargetSpec) (Target, error) {
	scope, target, value := spec.Scope, spec.Name, spec.Value
	if err := a.checkActor(); err != nil {
		return Target{}, err
	}
	if err := checkName("scope", scope); err != nil {
		return Target{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if err := checkName("target", target); err != nil {
		return Target{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if len(value) > MaxTargetValueSize {
		return Target{}, fmt.Errorf("%w: value is %d bytes, over the %d-byte limit", ErrInvalidArgument, len(value), MaxTargetValueSize)
	}
	rec := targetRecord{Scope: scope, Revision: 1, Value: value}
	var note string
	if spec.Object != nil && spec.Kind != TargetKubernetes {
		return Target{}, fmt.Errorf("%w: an object is named only for a target of kind %s", ErrInvalidArgument, TargetKubernetes)
	}
	if spec.Key != "" && spec.Kind != TargetEtcd {
		return Target{}, fmt.Errorf("%w: a key is named only for a target of kind %s", ErrInvalidArgument, TargetEtcd)
	}
	switch spec.Kind {
	case TargetKubernetes:
		if spec.Effect != "" || len(value) != 0 || spec.Object == nil {
			return Target{}, fmt.Errorf("%w: a target of kind %s names an object, and no effect or value", ErrInvalidArgument, TargetKubernetes)
		}
		obj := *spec.Object
		st, err := a.r.readRemoteForCreate(ctx, spec.Kind, obj)
		if err != nil {
			return Target{}, err
		}
		rec.Kind, rec.Object, rec.UID, rec.Value = TargetKubernetes, &obj, st.UID, []byte{}
		value = st.Value
		note = clip(fmt.Sprintf("kind %s, object %s, uid %s", TargetKubernetes, obj, st.UID), maxDenialDetail*4)
	case "", TargetInternal:
		if spec.Effect != "" {
			return Target{}, fmt.Errorf("%w: an effect is named only for a target of kind %s", ErrInvalidArgument, TargetFunc)
		}
	case TargetEtcd:
		if spec.Effect != "" {
			return Target{}, fmt.Errorf("%w: an effect is named only for a target of kind %s", ErrInvalidArgument, TargetFunc)
		}
		if err := checkEtcdKey(spec.Key); err != nil {
			return Target{}, err
		}
		rec.Kind, rec.Key = TargetEtcd, spec.Key
		rec.setEtcdValue(value)
	case TargetFunc:
		if err := checkName("effect", spec.Effect); err != nil {
			return Target{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
		if _, ok := a.r.opts.Effects[spec.Effect]; !ok {
			return Target{}, fmt.Errorf("%w: %q", ErrEffectNotRegistered, spec.Effect)
		}
		rec.Kind, rec.Effect = TargetFunc, spec.Effect
		note = fmt.Sprintf("kind %s, effect %s", TargetFunc, spec.Effect)
	default:
		return Target{}, fmt.Errorf("%w: target kind %q (an embedder creates %s, %s, %s or %s targets)", ErrInvalidArgument, clip(string(spec.Kind), 32), TargetInternal, TargetFunc, TargetEtcd, TargetKubernetes)
	}
	if err := ctx.Err(); err != nil {
		return Target{}, err
	}
	// keyRev is the etcd key's mod revision, set by the run that commits.
	var keyRev int64
	err := a.r.adminExec(len(target)+2*len(value)+len(spec.Effect)+len(spec.Key), func(w *wtx) error {
		c, err := w.control(scope)
		if err != nil {
			return err
		}
		if c == nil {
			return fmt.Errorf("%w: %s", ErrUnknownScope, scope)
		}
		t, err := w.target(target)
		if err != nil {
			return err
		}
		if t != nil {
			// Target names are one namespace across the receiver; say
			// where the name is taken, which may be another scope.
			return fmt.Errorf("%w: %s is a target of scope %s (target names are unique across the receiver)", ErrTargetExists, target, t.Scope)
		}
		// A run may be repeated: the record is built afresh each time.
		stored := rec
		note := note
		if rec.Kind == TargetEtcd {
			if note, err = w.createEtcd(&stored, value, func(rev int64) { keyRev = rev }); err != nil {
				return err
			}
		}
		if err := w.put(bucketTargets, []byte(target), &stored); err != nil {
			return err
		}
		sum := sha256.Sum256(value)
		_, err = w.appendAudit(&audit.Entry{Kind: KindTargetCreated, Scope: scope, Epoch: c.Epoch,
			Target: target, RevAfter: 1, ValueSHA256: sum[:], Actor: a.actor, Note: note})
		return err
	})
	if err != nil {
		return Target{}, err
	}
	// The caller's slice may change after the call; the result is a copy.
	shown := value
	if rec.Kind == TargetKubernetes {
		// The object holds the value; the target's record keeps none.
		shown = rec.Value
	}
	out := Target{Name: target, Scope: scope, Revision: 1, Value: append([]byte{}, shown...), Kind: rec.kind(), Effect: rec.Effect, UID: rec.UID}
	if rec.Object != nil {
		obj := *rec.Object
		out.Object = &obj
	}
	if rec.Kind == TargetEtcd {
		out.Key, out.Revision, out.Writes = rec.Key, uint64(keyRev), 1
	}
	return out, nil
}

// ActivateRequest describes a grant to activate.
type ActivateRequest struct {
	// Scope is the held scope to open.
	Scope string
	// Executor is the identity that alone may submit under the grant: the
	// caller that the embedding application authenticates (a SPIFFE ID when
	// served).
	Executor string
	// Claim is the ledger claim ref that the worker's envelope must carry.
	Claim string
	// Request is the exact approved request bytes; the grant binds their
	// SHA-256 and the action they name.
	Request []byte
	// Epoch, when non-zero, must equal the scope's current epoch: it makes
	// activation a compare-and-swap against a hold the approver did not see.
	Epoch uint64
	// NotBefore is the start of the validity window; zero means now.
	NotBefore time.Time
	// NotAfter is the end of the window (exclusive); zero means NotBefore+TTL.
	NotAfter time.Time
	// TTL is used when NotAfter is zero; zero means 15 minutes.
	TTL time.Duration
	// Decision references the review that approved the grant.
	Decision string
}

// DefaultGrantTTL is a grant's lifetime when neither NotAfter nor TTL is set.
const DefaultGrantTTL = 15 * time.Minute

// Activate mints a grant for a held scope at its current epoch and opens the
// scope with it. It never advances the epoch. A grant that would stay valid
// longer after its activation than the scope's maximum (ScopeOptions,
// InitOptions.MaxGrantTTL) is refused with ErrTTLTooLong, whatever window
// or TTL asked for it.
func (a *Admin) Activate(ctx context.Context, req ActivateRequest) (Grant, error) {
	if err := a.checkActor(); err != nil {
		return Grant{}, err
	}
	for _, f := range []struct{ name, val string }{
		{"scope", req.Scope}, {"executor", req.Executor}, {"claim", req.Claim},
	} {
		if err := checkName(f.name, f.val); err != nil {
			return Grant{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
	}
	if req.Decision != "" {
		if err := checkName("decision", req.Decision); err != nil {
			return Grant{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
	}
	parsed, err := DecodeRequest(req.Request, a.r.opts.MaxEnvelopeSize)
	if err != nil {
		return Grant{}, err
	}
	if req.TTL < 0 {
		return Grant{}, fmt.Errorf("%w: negative ttl", ErrInvalidWindow)
	}
	id, err := newGrantID(a.r.opts.Rand)
	if err != nil {
		return Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	digest := sha256.Sum256(req.Request)
	return adminUpdate(a.r, len(req.Request), func(w *wtx) (Grant, error) {
		c, err := w.control(req.Scope)
		if err != nil {
			return Grant{}, err
		}
		if c == nil {
			return Grant{}, fmt.Errorf("%w: %s", ErrUnknownScope, req.Scope)
		}
		if c.Mode != ModeHeld {
			return Grant{}, fmt.Errorf("%w: %s is open with grant %s; hold it first", ErrNotHeld, req.Scope, c.ActiveGrant)
		}
		if req.Epoch != 0 && req.Epoch != c.Epoch {
			return Grant{}, fmt.Errorf("%w: %s is at epoch %d, the activation names %d", ErrEpochMismatch, req.Scope, c.Epoch, req.Epoch)
		}
		t, err := w.target(parsed.Target)
		if err != nil {
			return Grant{}, err
		}
		if t == nil || t.Scope != req.Scope {
			return Grant{}, fmt.Errorf("%w: the request names %q, which is not a target of scope %s", ErrUnknownTarget, parsed.Target, req.Scope)
		}
		if existing, err := w.grant(id); err != nil {
			return Grant{}, err
		} else if existing != nil {
			return Grant{}, fmt.Errorf("kvfence: grant id collision on %s; refusing to reuse it", id)
		}
		nb := req.NotBefore
		if nb.IsZero() {
			nb = w.now
		}
		na := req.NotAfter
		if na.IsZero() {
			ttl := req.TTL
			if ttl == 0 {
				ttl = DefaultGrantTTL
			}
			na = nb.Add(ttl)
		}
		if nb.Year() < 1900 || nb.Year() > 2200 {
			// UnixNano wraps outside 1678-2262; refuse long before that.
			return Grant{}, fmt.Errorf("%w: window [%s, %s) is outside 1900-2200", ErrInvalidWindow,
				nb.UTC().Format(time.RFC3339), na.UTC().Format(time.RFC3339))
		}
		// The bound is on how long the grant stays usable from now, so a
		// window that starts later cannot stretch it. It is checked before
		// the window's end is held to the years a time can be stored in:
		// a TTL of centuries is over the maximum, and that is what the
		// caller must change.
		if life, limit := na.Sub(w.now), c.maxGrantTTL(); life > limit {
			return Grant{}, fmt.Errorf("%w: the grant would stay valid for %s after activation (until %s), over scope %s's maximum of %s",
				ErrTTLTooLong, life, na.UTC().Format(time.RFC3339), req.Scope, limit)
		}
		if na.Year() > 2200 {
			return Grant{}, fmt.Errorf("%w: window [%s, %s) is outside 1900-2200", ErrInvalidWindow,
				nb.UTC().Format(time.RFC3339), na.UTC().Format(time.RFC3339))
		}
		if !na.After(nb) || !na.After(w.now) {
			return Grant{}, fmt.Errorf("%w: [%s, %s) at %s", ErrInvalidWindow, nb.UTC().Format(time.RFC3339Nano),
				na.UTC().Format(time.RFC3339Nano), w.now.UTC().Format(time.RFC3339Nano))
		}
		// The grant names its activate entry, which is the chain's next
		// one, as a receipt names its submit entry.
		seq := w.chain.Head().Seq + 1
		g := grantRecord{ID: id, Scope: req.Scope, Epoch: c.Epoch, Executor: req.Executor, Claim: req.Claim,
			Action: parsed.Action, RequestSHA256: digest[:], NotBefore: nb.UnixNano(), NotAfter: na.UnixNano(),
			Decision: req.Decision, CreatedAt: w.now.UnixNano(), AuditSeq: seq}
		if err := w.put(bucketGrants, []byte(id), &g); err != nil {
			return Grant{}, err
		}
		c.Mode, c.ActiveGrant, c.ActivatedAt = ModeOpen, id, w.now.UnixNano()
		if err := w.putControl(req.Scope, c); err != nil {
			return Grant{}, err
		}
		got, err := w.appendAudit(&audit.Entry{Kind: KindActivate, Scope: req.Scope, Epoch: c.Epoch,
			Grant: id, Executor: req.Executor, Action: parsed.Action, RequestSHA256: digest[:],
			Target: parsed.Target, Decision: req.Decision, Note: "claim " + req.Claim, Actor: a.actor})
		if err != nil {
			return Grant{}, err
		}
		if got != seq {
			return Grant{}, fmt.Errorf("kvfence: internal error: grant names audit seq %d, entry got %d", seq, got)
		}
		return g.public(), nil
	})
}

// HoldRequest names the scopes to hold and why.
type HoldRequest struct {
	// Scopes are the scopes to hold, each named once; they are held in one
	// transaction, all or none.
	Scopes []string
	// Reason says why, for the audit chain; it is required.
	Reason string
	// ID, when set, makes the hold idempotent on each scope it names: the
	// first hold with an ID advances the epochs; a repeat of the same ID,
	// scopes, reason and ExpectEpoch returns that first result with
	// HoldResult.Repeated set and writes nothing, even if a scope was
	// activated since. A repeat that differs in any of those fails with
	// ErrHoldIDConflict. At most audit.MaxHoldIDLen bytes of a name.
	ID string
	// ExpectEpoch, when non-zero, makes the hold a compare-and-swap: it
	// holds only if the scope, which must then be the only one named, is
	// at this epoch, and fails with ErrEpochMismatch otherwise.
	ExpectEpoch uint64
}

// Hold advances the epoch of every named scope, clears its active grant and
// puts it in held mode, all in one transaction: every scope is held or, on
// any error, none is. A scope at the largest epoch makes the whole hold fail
// with ErrEpochExhausted.
//
// The result is returned only once the anchor holds a checkpoint that covers
// the hold's entries: HoldResult.Checkpoint is that checkpoint, and each
// scope's Ack is signed with the receiver's key after the anchor write,
// naming it. A hold with an ID that repeats an earlier one (HoldRequest.ID)
// writes nothing and returns the earlier result, with the acknowledgments
// signed again over the receiver's current anchor, which covers the earlier
// entries.
func (a *Admin) Hold(ctx context.Context, req HoldRequest) (HoldResult, error) {
	requested := a.r.opts.Now()
	if err := a.checkActor(); err != nil {
		return HoldResult{}, err
	}
	if len(req.Scopes) == 0 {
		return HoldResult{}, fmt.Errorf("%w: no scope to hold", ErrInvalidArgument)
	}
	seen := make(map[string]bool, len(req.Scopes))
	for _, s := range req.Scopes {
		if err := checkName("scope", s); err != nil {
			return HoldResult{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
		if seen[s] {
			return HoldResult{}, fmt.Errorf("%w: scope %s named twice", ErrInvalidArgument, s)
		}
		seen[s] = true
	}
	if err := checkName("reason", req.Reason); err != nil {
		return HoldResult{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if req.ID != "" {
		if err := checkName("hold id", req.ID); err != nil {
			return HoldResult{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
		if len(req.ID) > audit.MaxHoldIDLen {
			return HoldResult{}, fmt.Errorf("%w: hold id is %d bytes, over the %d-byte limit", ErrInvalidArgument, len(req.ID), audit.MaxHoldIDLen)
		}
	}
	if req.ExpectEpoch != 0 && len(req.Scopes) != 1 {
		// One number cannot be every scope's epoch: scopes move apart.
		return HoldResult{}, fmt.Errorf("%w: an expected epoch names one scope; this hold names %d", ErrInvalidArgument, len(req.Scopes))
	}
	if err := ctx.Err(); err != nil {
		return HoldResult{}, err
	}
	fp := holdFingerprint(&req)
	res, anchored, err := adminUpdateAnchored(a.r, len(req.Reason)+len(req.ID), func(w *wtx) (HoldResult, error) {
		if req.ID != "" {
			if res, ok, err := a.repeatHold(w, &req, fp); err != nil || ok {
				return res, err
			}
		}
		res := HoldResult{HoldRequestedAt: fromNanos(requested.UnixNano()), HoldCommittedAt: fromNanos(w.now.UnixNano())}
		for _, s := range req.Scopes {
			c, err := w.control(s)
			if err != nil {
				return HoldResult{}, err
			}
			if c == nil {
				return HoldResult{}, fmt.Errorf("%w: %s", ErrUnknownScope, s)
			}
			if req.ExpectEpoch != 0 && c.Epoch != req.ExpectEpoch {
				return HoldResult{}, fmt.Errorf("%w: %s is at epoch %d, the hold expects %d", ErrEpochMismatch, s, c.Epoch, req.ExpectEpoch)
			}
			if err := a.holdScope(w, &res, s, c, requested, req.Reason, req.ID); err != nil {
				return HoldResult{}, err
			}
			if req.ID == "" {
				continue
			}
			held := res.Scopes[len(res.Scopes)-1].Ack.HoldAck
			if err := w.putHold(s, req.ID, &holdRecord{Request: fp[:], PreviousEpoch: held.PreviousEpoch, Epoch: held.Epoch,
				RequestedAt: held.RequestedAt, CommittedAt: held.At, AuditSeq: held.AuditSeq}); err != nil {
				return HoldResult{}, err
			}
		}
		a.r.gate.holdAll(res.Scopes)
		return res, nil
	})
	if err != nil {
		return HoldResult{}, err
	}
	if anchored != nil {
		res.Checkpoint = *anchored
	}
	// Acknowledged only once every remote write decided before the hold
	// has settled or been fenced off; a repeat finishes an earlier wait.
	if res.Outstanding, err = a.r.settleBeforeAck(ctx, res.Scopes); err != nil {
		return HoldResult{}, err
	}
	if err := a.r.signHoldAcks(&res); err != nil {
		return HoldResult{}, err
	}
	return res, nil
}

// holdFingerprint is the SHA-256 of everything a repeat of req must
// repeat: its id, scopes in order, reason and expected epoch, each
// length-prefixed so that no two requests hash the same bytes.
func holdFingerprint(req *HoldRequest) [sha256.Size]byte {
	h := sha256.New()
	var b []byte
	field := func(s string) {
		b = binary.AppendUvarint(b[:0], uint64(len(s)))
		h.Write(b)
		h.Write([]byte(s))
	}
	h.Write([]byte("kvfence/hold-request/v1\n"))
	field(req.ID)
	field(req.Reason)
	b = binary.AppendUvarint(b[:0], req.ExpectEpoch)
	b = binary.AppendUvarint(b, uint64(len(req.Scopes)))
	h.Write(b)
	for _, s := range req.Scopes {
		field(s)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// repeatHold looks req's id up on every scope it names. It reports false
// when no scope knows it (a first hold), and the earlier result when every
// scope knows it from this very request. An id known on only some of the
// scopes, or from a request that differs, is ErrHoldIDConflict. A repeat
// writes nothing: when the anchor already covers the earlier entries, the
// call is idle and names that anchor; otherwise (the earlier hold's anchor
// write failed, even after the anchor took it, or is under way) it commits
// with its batch, whose anchor then covers them.
func (a *Admin) repeatHold(w *wtx, req *HoldRequest, fp [sha256.Size]byte) (HoldResult, bool, error) {
	recs := make([]*holdRecord, len(req.Scopes))
	var known, unknown []string
	for i, s := range req.Scopes {
		h, err := w.holdAt(s, req.ID)
		if err != nil {
			return HoldResult{}, false, err
		}
		recs[i] = h
		switch {
		case h == nil:
			unknown = append(unknown, s)
		case !bytes.Equal(h.Request, fp[:]):
			// The scopes, in order, are part of the fingerprint: a
			// request that names more, fewer or other scopes is refused
			// here, on the first scope the id is known on.
			return HoldResult{}, false, fmt.Errorf("%w: hold id %q held %s with other scopes, another reason or another expected epoch",
				ErrHoldIDConflict, req.ID, s)
		default:
			known = append(known, s)
		}
	}
	switch {
	case len(known) == 0:
		return HoldResult{}, false, nil
	case len(unknown) > 0:
		// The first hold wrote every scope's record in one transaction,
		// so this is a store that lost some (restored in part, and
		// accepted since): holding the rest anew would be a second
		// generation under one id.
		return HoldResult{}, false, fmt.Errorf("%w: hold id %q held %s but not %s", ErrHoldIDConflict, req.ID,
			strings.Join(known, ", "), strings.Join(unknown, ", "))
	}
	res := HoldResult{Repeated: true, HoldRequestedAt: fromNanos(recs[0].RequestedAt), HoldCommittedAt: fromNanos(recs[0].CommittedAt)}
	var last uint64
	for i, h := range recs {
		res.Scopes = append(res.Scopes, HeldScope{Scope: req.Scopes[i], PreviousEpoch: h.PreviousEpoch, Epoch: h.Epoch,
			Ack: audit.SignedHoldAck{HoldAck: audit.HoldAck{Receiver: a.r.id, Scope: req.Scopes[i], HoldID: req.ID,
				PreviousEpoch: h.PreviousEpoch, Epoch: h.Epoch, AuditSeq: h.AuditSeq, RequestedAt: h.RequestedAt, At: h.CommittedAt}}})
		last = max(last, h.AuditSeq)
	}
	res.AuditSeq = recs[len(recs)-1].AuditSeq
	cover := w.anchor
	if cover == nil && a.r.opts.Anchor != nil {
		// On a file the anchor may be one commit behind the head (lead):
		// that only makes it cover less.
		cur := a.r.anchorNow()
		cover = &cur
	}
	// A checkpoint whose anchor write failed may be in the anchor without
	// being durable: the repeat then commits, and its anchor write covers
	// the entries again.
	if cover != nil && cover.Seq >= last && a.r.durableAnchor(*cover) {
		res.Checkpoint = *cover
		w.idle++
	}
	return res, true, nil
}

// signHoldAcks signs each held scope's acknowledgment, whose hold fields
// the transaction filled in, naming res.Checkpoint. It runs after the
// anchor write, outside the write transaction.
func (r *Receiver) signHoldAcks(res *HoldResult) error {
	cp := res.Checkpoint
	for i := range res.Scopes {
		ack := res.Scopes[i].Ack.HoldAck
		if cp.Receiver != r.id || cp.Seq < ack.AuditSeq {
			// Never: the anchor covers every acknowledged commit.
			return fmt.Errorf("%w: %s: no checkpoint covers the hold's entry at seq %d", ErrNotAcknowledged, r.path, ack.AuditSeq)
		}
		ack.CheckpointSeq, ack.CheckpointHead = cp.Seq, cp.Head
		sa, err := audit.SignHoldAck(r.opts.Key, ack)
		if err != nil {
			return fmt.Errorf("%w: %s: signing the hold acknowledgment of %s: %w", ErrNotAcknowledged, r.path, ack.Scope, err)
		}
		res.Scopes[i].Ack = sa
	}
	return nil
}

// holdScope holds one scope inside w: its epoch advances, its grant is
// cleared, and an audit entry records it, with id if the hold has one. It
// adds the scope to res, with its acknowledgment's hold fields filled in
// and not yet signed (signHoldAcks).
func (a *Admin) holdScope(w *wtx, res *HoldResult, s string, c *controlRecord, requested time.Time, reason, id string) error {
	if c.Epoch == math.MaxUint64 {
		return fmt.Errorf("%w: %s is at epoch %d", ErrEpochExhausted, s, c.Epoch)
	}
	prev := c.Epoch
	c.Epoch++
	c.Mode, c.ActiveGrant = ModeHeld, ""
	c.HoldRequestedAt, c.HoldCommittedAt = requested.UnixNano(), w.now.UnixNano()
	if err := w.putControl(s, c); err != nil {
		return err
	}
	if err := w.raiseEpochHighWater(c.Epoch); err != nil {
		return err
	}
	note := fmt.Sprintf("previous epoch %d; requested %s; ", prev, requested.UTC().Format(time.RFC3339Nano))
	if id != "" {
		// Quoted, the id cannot be read as part of the reason after it.
		note += fmt.Sprintf("hold id %q; ", id)
	}
	seq, err := w.appendAudit(&audit.Entry{Kind: KindHold, Scope: s, Epoch: c.Epoch, Note: note + "reason: " + reason, Actor: a.actor})
	if err != nil {
		return err
	}
	res.Scopes = append(res.Scopes, HeldScope{Scope: s, PreviousEpoch: prev, Epoch: c.Epoch,
		Ack: audit.SignedHoldAck{HoldAck: audit.HoldAck{Receiver: a.r.id, Scope: s, HoldID: id, PreviousEpoch: prev, Epoch: c.Epoch,
			AuditSeq: seq, RequestedAt: c.HoldRequestedAt, At: c.HoldCommittedAt}}})
	res.AuditSeq = seq
	return nil
}

func (g *grantRecord) public() Grant {
	out := Grant{ID: g.ID, Scope: g.Scope, Epoch: g.Epoch, Executor: g.Executor, Claim: g.Claim,
		Action: g.Action, NotBefore: fromNanos(g.NotBefore), NotAfter: fromNanos(g.NotAfter),
		Decision: g.Decision, CreatedAt: fromNanos(g.CreatedAt), AuditSeq: g.AuditSeq, RevokedSeq: g.RevokedSeq}
	copy(out.RequestSHA256[:], g.RequestSHA256)
	return out
}
