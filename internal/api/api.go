// Package api holds the JSON bodies of the served receiver's HTTP API
// (docs/design.md §12), shared by the server and the client so that both spell
// every key the same way. The shapes are the CLI's --json shapes (docs/design.md
// §9): binary fields as "_b64" in padded standard base64, digests in
// lowercase hex, times as RFC 3339 with nanoseconds in UTC or null for a
// time that never happened.
package api

import (
	"encoding/hex"
	"fmt"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
)

// Paths of the endpoints.
const (
	PathSubmit   = "/v1/submit"
	PathScopes   = "/v1/scopes"
	PathTargets  = "/v1/targets"
	PathActivate = "/v1/activate"
	PathHold     = "/v1/hold"
	PathStatus   = "/v1/status"
	PathTarget   = "/v1/target"
	PathReceipt  = "/v1/receipt"
	PathEvents   = "/v1/events"
	PathHealthz  = "/healthz"
	// PathGrant is GET ?id=: a stored grant.
	PathGrant = "/v1/grant"
	// PathTargetList is GET [?scope=]: the targets, of every scope or one.
	PathTargetList = "/v1/target-list"
	// PathReceipts is GET ?scope=&claim=: the receipts applied under a
	// claim's grants.
	PathReceipts = "/v1/receipts"
	// PathGrantExtend is POST: move an active grant's expiry later, within
	// its scope's maximum grant TTL (admin).
	PathGrantExtend = "/v1/grant/extend"
	// PathVerifyChain is GET: verify the running receiver's audit chain,
	// state and anchor from one consistent view (admin).
	PathVerifyChain = "/v1/verify-chain"
	// PathBackup is GET: a consistent snapshot of the receiver's storage
	// with the signed checkpoint it matches (admin).
	PathBackup = "/v1/backup"
	// PathSubmitBatch is POST: several envelopes in one request, each
	// decided as /v1/submit decides it, the answers in one body.
	PathSubmitBatch = "/v1/submit/batch"
)

// Media types of request and response bodies.
const (
	ContentCBOR = "application/cbor"
	ContentJSON = "application/json"
	// ContentBackup is a backup file's (package backup), the answer of
	// GET /v1/backup.
	ContentBackup = "application/vnd.kvfence.backup"
)

// Submit is the submit response: the decision.
type Submit struct {
	// Outcome is applied, already_applied or denied.
	Outcome string `json:"outcome"`
	// Reason is a denial's stable reason code; empty otherwise.
	Reason string `json:"reason"`
	// Detail explains a denial for operators; it is not stable.
	Detail string `json:"detail"`
	// Scope is the scope the envelope named.
	Scope string `json:"scope"`
	// Epoch is the epoch the envelope claimed.
	Epoch uint64 `json:"epoch"`
	// Grant is the grant id the envelope named.
	Grant string `json:"grant"`
	// Action is the action the request named.
	Action string `json:"action"`
	// Target is the target the request named.
	Target string `json:"target"`
	// Revision is the target's revision after the applied mutation.
	Revision uint64 `json:"revision"`
	// AuditSeq is the seq of the audit entry that records the decision.
	AuditSeq uint64 `json:"audit_seq"`
	// ReceiptSeq is, on a denial of a request the scope applied already
	// and only for the executor of the grant it was applied under, the
	// audit seq of the applied decision; omitted when 0.
	ReceiptSeq uint64 `json:"receipt_seq,omitempty"`
	// Dispatch is, for a write to a remote target, the state of its
	// dispatch; omitted otherwise.
	Dispatch string `json:"dispatch,omitempty"`
	// DispatchID identifies the dispatch; omitted when Dispatch is.
	DispatchID string `json:"dispatch_id,omitempty"`
	// Version is the remote object's version the write or its fence
	// left; omitted when none.
	Version string `json:"version,omitempty"`
}

// SubmitOf returns the response for a decision.
func SubmitOf(r kvfence.Result) Submit {
	return Submit{Outcome: string(r.Outcome), Reason: string(r.Reason), Detail: r.Detail, Scope: r.Scope,
		Epoch: r.Epoch, Grant: r.Grant, Action: r.Action, Target: r.Target, Revision: r.Revision, AuditSeq: r.AuditSeq, ReceiptSeq: r.ReceiptSeq,
		Dispatch: string(r.Dispatch), DispatchID: r.DispatchID, Version: r.Version}
}

// Result returns the decision a response carries.
func (s Submit) Result() (kvfence.Result, error) {
	switch kvfence.Outcome(s.Outcome) {
	case kvfence.Applied, kvfence.AlreadyApplied, kvfence.Denied, kvfence.Dispatching, kvfence.NotApplied, kvfence.OutcomeUnknown:
	default:
		return kvfence.Result{}, fmt.Errorf("unknown outcome %q", s.Outcome)
	}
	return kvfence.Result{Outcome: kvfence.Outcome(s.Outcome), Reason: kvfence.Reason(s.Reason), Detail: s.Detail,
		Scope: s.Scope, Epoch: s.Epoch, Grant: s.Grant, Action: s.Action, Target: s.Target, Revision: s.Revision,
		AuditSeq: s.AuditSeq, ReceiptSeq: s.ReceiptSeq, Dispatch: kvfence.DispatchState(s.Dispatch), DispatchID: s.DispatchID,
		Version: s.Version}, nil
}

// ScopeCreateRequest is the body of POST /v1/scopes.
type ScopeCreateRequest struct {
	// Scope is the name of the scope to create.
	Scope string `json:"scope"`
	// MaxGrantTTL is the scope's maximum grant lifetime as a Go duration;
	// empty means the receiver's.
	MaxGrantTTL string `json:"max_grant_ttl,omitempty"`
}

// ScopeCreate is the response of POST /v1/scopes.
type ScopeCreate struct {
	// Scope is the created scope's name.
	Scope string `json:"scope"`
	// Epoch is the new scope's epoch, 1.
	Epoch uint64 `json:"epoch"`
	// Mode is the new scope's mode, held.
	Mode string `json:"mode"`
	// CreatedAt is when the scope was created.
	CreatedAt *string `json:"created_at"`
	// MaxGrantTTL is the scope's maximum grant lifetime as a Go duration.
	MaxGrantTTL string `json:"max_grant_ttl"`
}

// TargetCreateRequest is the body of POST /v1/targets.
type TargetCreateRequest struct {
	// Scope is the existing scope the target belongs to.
	Scope string `json:"scope"`
	// Target is the new target's name.
	Target string `json:"target"`
	// ValueB64 is the target's first value. It is required for a target
	// of kind internal or etcd, and refused for one of kind kubernetes,
	// whose object holds the value.
	ValueB64 []byte `json:"value_b64"`
	// Kind is the target's kind: internal (the default when absent), etcd
	// or kubernetes. A func target is an embedder's and is never created
	// through the served API (kind_unsupported).
	Kind string `json:"kind,omitempty"`
	// TargetKey is the etcd key of a target of kind etcd, and must be
	// absent for any other kind.
	TargetKey string `json:"target_key,omitempty"`
	// Object names the object of a target of kind kubernetes as
	// RESOURCE/NAMESPACE/NAME (configmaps/prod/backup-policy), and must
	// be absent for any other kind.
	Object string `json:"object,omitempty"`
}

// TargetCreate is the response of POST /v1/targets.
type TargetCreate struct {
	// Target is the created target's name.
	Target string `json:"target"`
	// Scope is the scope the target belongs to.
	Scope string `json:"scope"`
	// Revision is the new target's revision, 1.
	Revision uint64 `json:"revision"`
	// ValueSHA256 is the SHA-256 of the stored value, in hex, for the client
	// to compare with what it sent (for a target of kind kubernetes, which
	// stores no value since the object holds it, of the empty value).
	ValueSHA256 string `json:"value_sha256"`
	// Kind is the target's kind: internal, etcd or kubernetes.
	Kind string `json:"kind"`
	// TargetKey is a target of kind etcd's key, whose mod revision is then
	// Revision; absent for any other kind.
	TargetKey string `json:"target_key,omitempty"`
	// Object is a target of kind kubernetes's object, as
	// RESOURCE/NAMESPACE/NAME; absent for any other kind.
	Object string `json:"object,omitempty"`
	// UID is the incarnation of the object a target of kind kubernetes
	// stands for; absent for any other kind.
	UID string `json:"uid,omitempty"`
}

// ActivateRequest is the body of POST /v1/activate. TTL is a Go duration
// ("15m"); empty means the receiver's default. Epoch, when not zero, must be
// the scope's current epoch.
type ActivateRequest struct {
	// Scope is the held scope to open.
	Scope string `json:"scope"`
	// Executor is the identity that alone may submit under the grant.
	Executor string `json:"executor"`
	// Claim is the ledger claim ref the grant binds.
	Claim string `json:"claim"`
	// RequestB64 is the exact approved request bytes.
	RequestB64 []byte `json:"request_b64"`
	// TTL is the grant's lifetime from now, as a Go duration.
	TTL string `json:"ttl,omitempty"`
	// Decision references the review that approved the grant.
	Decision string `json:"decision,omitempty"`
	// Epoch, when not zero, must equal the scope's current epoch.
	Epoch uint64 `json:"epoch,omitempty"`
}

// Activate is the response of POST /v1/activate: the grant.
type Activate struct {
	// Grant is the new grant's id.
	Grant string `json:"grant"`
	// Scope is the scope the grant opened.
	Scope string `json:"scope"`
	// Epoch is the scope's epoch the grant was minted at.
	Epoch uint64 `json:"epoch"`
	// Executor is the identity that alone may submit under the grant.
	Executor string `json:"executor"`
	// Claim is the ledger claim ref the grant binds.
	Claim string `json:"claim"`
	// Action is the action the bound request names.
	Action string `json:"action"`
	// RequestSHA256 is the SHA-256 of the bound request bytes, in hex.
	RequestSHA256 string `json:"request_sha256"`
	// NotBefore is the start of the grant's validity window.
	NotBefore *string `json:"not_before"`
	// NotAfter is the end of the grant's validity window, exclusive.
	NotAfter *string `json:"not_after"`
	// Decision references the review that approved the grant.
	Decision string `json:"decision"`
	// AuditSeq is the seq of the activate entry.
	AuditSeq uint64 `json:"audit_seq"`
}

// ActivateOf returns the response for a grant.
func ActivateOf(g kvfence.Grant) Activate {
	return Activate{Grant: g.ID, Scope: g.Scope, Epoch: g.Epoch, Executor: g.Executor, Claim: g.Claim,
		Action: g.Action, RequestSHA256: g.RequestSHA256Hex(), NotBefore: Time(g.NotBefore),
		NotAfter: Time(g.NotAfter), Decision: g.Decision, AuditSeq: g.AuditSeq}
}

// ToGrant returns the grant a response describes. CreatedAt is not
// carried and stays zero.
func (a Activate) ToGrant() (kvfence.Grant, error) {
	g := kvfence.Grant{ID: a.Grant, Scope: a.Scope, Epoch: a.Epoch, Executor: a.Executor, Claim: a.Claim,
		Action: a.Action, Decision: a.Decision, AuditSeq: a.AuditSeq}
	if err := hexDigest(a.RequestSHA256, &g.RequestSHA256); err != nil {
		return g, err
	}
	var err error
	if g.NotBefore, err = ParseTime(a.NotBefore); err != nil {
		return g, err
	}
	g.NotAfter, err = ParseTime(a.NotAfter)
	return g, err
}

// GrantExtendRequest is the body of POST /v1/grant/extend
// (kvfence.Admin.ExtendGrant).
type GrantExtendRequest struct {
	// Grant is the id of the scope's active grant to extend.
	Grant string `json:"grant"`
	// TTL is the grant's new lifetime from the receiver's now, as a Go
	// duration ("30m"): its end becomes now plus TTL, within the scope's
	// maximum from the grant's activation.
	TTL string `json:"ttl"`
}

// GrantExtend is the response of POST /v1/grant/extend: the grant as it
// now stands, in activate's shape with created_at.
type GrantExtend struct {
	// Activate is the grant, its not_after the new end.
	Activate
	// CreatedAt is when the grant was activated, from which the scope's
	// maximum counts.
	CreatedAt *string `json:"created_at"`
}

// GrantExtendOf returns the response for an extended grant.
func GrantExtendOf(g kvfence.Grant) GrantExtend {
	return GrantExtend{Activate: ActivateOf(g), CreatedAt: Time(g.CreatedAt)}
}

// ToGrant returns the grant a response describes.
func (e GrantExtend) ToGrant() (kvfence.Grant, error) {
	g, err := e.Activate.ToGrant()
	if err != nil {
		return g, err
	}
	g.CreatedAt, err = ParseTime(e.CreatedAt)
	return g, err
}

// HoldRequest is the body of POST /v1/hold.
type HoldRequest struct {
	// Scopes are the scopes to hold, all or none.
	Scopes []string `json:"scopes"`
	// Reason says why, for the audit chain.
	Reason string `json:"reason"`
	// All holds every open scope in one transaction (Admin.HoldAll);
	// Scopes must then be empty, and the response is a HoldAll.
	All bool `json:"all,omitempty"`
	// HoldID makes the hold idempotent (kvfence.HoldRequest.ID): a repeat
	// of it returns the first hold's result and issues no new epoch.
	HoldID string `json:"hold_id,omitempty"`
	// ExpectEpoch, when not zero, holds only if the one named scope is at
	// this epoch (kvfence.HoldRequest.ExpectEpoch).
	ExpectEpoch uint64 `json:"expect_epoch,omitempty"`
}

// HoldAll is the response of POST /v1/hold with "all": the hold, and the
// scopes that were held already and left as they were.
type HoldAll struct {
	// Hold is the hold of the scopes that were open.
	Hold
	// AlreadyHeld names the scopes found held, by name.
	AlreadyHeld []string `json:"already_held"`
}

// HoldAllOf returns the response for a committed HoldAll.
func HoldAllOf(res kvfence.HoldAllResult) HoldAll {
	out := HoldAll{Hold: HoldOf(res.HoldResult), AlreadyHeld: res.AlreadyHeld}
	if out.AlreadyHeld == nil {
		out.AlreadyHeld = []string{}
	}
	return out
}

// TargetList is the response of GET /v1/target-list: the targets by name,
// with their values.
type TargetList struct {
	// Targets are the targets, ordered by name.
	Targets []Target `json:"targets"`
}

// Status is the response of GET /v1/status. AnchorChecked is always true
// for a served receiver: it checked its anchor when it opened.
type Status struct {
	// Scopes is the control state of the scopes asked for.
	Scopes []ScopeStatus `json:"scopes"`
	// AuditSeq is the audit chain head's seq, read before the scopes.
	AuditSeq uint64 `json:"audit_seq"`
	// AnchorChecked says the receiver's database was checked against its
	// anchor.
	AnchorChecked bool `json:"anchor_checked"`
}

// ScopeStatus is one scope's control state.
type ScopeStatus struct {
	// Scope is the scope's name.
	Scope string `json:"scope"`
	// Epoch is the scope's current epoch.
	Epoch uint64 `json:"epoch"`
	// Mode is held or open.
	Mode string `json:"mode"`
	// ActiveGrant is the grant the scope is open under; empty while held.
	ActiveGrant string `json:"active_grant"`
	// CreatedAt is when the scope was created.
	CreatedAt *string `json:"created_at"`
	// ActivatedAt is when the latest grant was activated.
	ActivatedAt *string `json:"activated_at"`
	// HoldRequestedAt is when the latest hold was requested.
	HoldRequestedAt *string `json:"hold_requested_at"`
	// HoldCommittedAt is when the latest hold took effect.
	HoldCommittedAt *string `json:"hold_committed_at"`
	// LastStaleRejectionAt is the time of the latest stale-authority denial.
	LastStaleRejectionAt *string `json:"last_stale_rejection_at"`
	// StaleRejections counts the stale-authority denials.
	StaleRejections uint64 `json:"stale_rejections"`
	// Denials counts the scope's denials by reason code.
	Denials map[string]uint64 `json:"denials"`
	// Grant is the active grant, or null when the scope is held.
	Grant *Grant `json:"grant"`
	// MaxGrantTTL is the scope's maximum grant lifetime as a Go duration
	// ("24h0m0s").
	MaxGrantTTL string `json:"max_grant_ttl"`
}

// Grant is a stored grant: the activation's shape, when it was created,
// the recovery that revoked it (0 if none), and whether its window was
// over by the receiver's clock when it was read.
type Grant struct {
	// Activate is the grant as activate returned it.
	Activate
	// CreatedAt is when the grant was activated.
	CreatedAt *string `json:"created_at"`
	// RevokedSeq is the audit seq of the recovery that revoked the grant,
	// or 0.
	RevokedSeq uint64 `json:"revoked_seq"`
	// Expired says the grant's validity window was over at read time.
	Expired bool `json:"expired"`
}

// GrantOf returns the JSON form of a grant; expired is whether its window
// was over by the receiver's clock.
func GrantOf(g kvfence.Grant, expired bool) Grant {
	return Grant{Activate: ActivateOf(g), CreatedAt: Time(g.CreatedAt), RevokedSeq: g.RevokedSeq, Expired: expired}
}

// ToGrant returns the grant a response describes and whether it was
// expired.
func (g Grant) ToGrant() (kvfence.Grant, bool, error) {
	out, err := g.Activate.ToGrant()
	if err != nil {
		return out, false, err
	}
	out.RevokedSeq = g.RevokedSeq
	out.CreatedAt, err = ParseTime(g.CreatedAt)
	return out, g.Expired, err
}

// ScopeStatusOf returns the JSON form of a scope's status.
func ScopeStatusOf(st kvfence.ScopeStatus) ScopeStatus {
	out := ScopeStatus{Scope: st.Scope, Epoch: st.Epoch, Mode: string(st.Mode), ActiveGrant: st.ActiveGrant,
		CreatedAt: Time(st.CreatedAt), ActivatedAt: Time(st.ActivatedAt),
		HoldRequestedAt: Time(st.HoldRequestedAt), HoldCommittedAt: Time(st.HoldCommittedAt),
		LastStaleRejectionAt: Time(st.LastStaleRejectionAt), StaleRejections: st.StaleRejections,
		Denials: make(map[string]uint64, len(st.Denials)), MaxGrantTTL: st.MaxGrantTTL.String()}
	for k, v := range st.Denials {
		out.Denials[string(k)] = v
	}
	if st.Grant != nil {
		g := GrantOf(*st.Grant, st.GrantExpired)
		out.Grant = &g
	}
	return out
}

// Status returns the scope status a response describes.
func (s ScopeStatus) Status() (kvfence.ScopeStatus, error) {
	out := kvfence.ScopeStatus{Scope: s.Scope, Epoch: s.Epoch, Mode: kvfence.Mode(s.Mode), ActiveGrant: s.ActiveGrant,
		StaleRejections: s.StaleRejections}
	for _, t := range []struct {
		dst *time.Time
		src *string
	}{{&out.CreatedAt, s.CreatedAt}, {&out.ActivatedAt, s.ActivatedAt}, {&out.HoldRequestedAt, s.HoldRequestedAt},
		{&out.HoldCommittedAt, s.HoldCommittedAt}, {&out.LastStaleRejectionAt, s.LastStaleRejectionAt}} {
		var err error
		if *t.dst, err = ParseTime(t.src); err != nil {
			return out, err
		}
	}
	if len(s.Denials) > 0 {
		out.Denials = make(map[kvfence.Reason]uint64, len(s.Denials))
		for k, v := range s.Denials {
			out.Denials[kvfence.Reason(k)] = v
		}
	}
	if s.Grant != nil {
		g, expired, err := s.Grant.ToGrant()
		if err != nil {
			return out, err
		}
		out.Grant, out.GrantExpired = &g, expired
	}
	// A receiver that predates the maximum sends none.
	if s.MaxGrantTTL != "" {
		d, err := time.ParseDuration(s.MaxGrantTTL)
		if err != nil || d <= 0 {
			return out, fmt.Errorf("max_grant_ttl %q is not a positive duration", s.MaxGrantTTL)
		}
		out.MaxGrantTTL = d
	}
	return out, nil
}

// Target is the response of GET /v1/target. Value is the value as text
// when it is valid UTF-8, else null; ValueB64 is always the value.
type Target struct {
	// Target is the target's name.
	Target string `json:"target"`
	// Scope is the scope the target belongs to.
	Scope string `json:"scope"`
	// Revision is the target's current revision.
	Revision uint64 `json:"revision"`
	// Value is the value as text, or null when it is not valid UTF-8.
	Value *string `json:"value"`
	// ValueB64 is the value, always.
	ValueB64 []byte `json:"value_b64"`
	// Kind is the target's kind: internal, func, etcd or kubernetes.
	Kind string `json:"kind"`
	// Effect names a func target's effect; absent for any other kind.
	Effect string `json:"effect,omitempty"`
	// TargetKey is an etcd target's key; its Revision and value are then
	// the key's live mod revision and value. Absent for any other kind.
	TargetKey string `json:"target_key,omitempty"`
	// Writes counts the fence's writes to an etcd target's key (the
	// revisions its receipts name); absent for any other kind.
	Writes uint64 `json:"writes,omitempty"`
	// Object is a kubernetes target's object as RESOURCE/NAMESPACE/NAME;
	// absent for any other kind.
	Object string `json:"object,omitempty"`
	// UID is the incarnation of the object a kubernetes target stands for.
	UID string `json:"uid,omitempty"`
	// Live is a kubernetes target's object as the receiver read it for
	// GET /v1/target, whose value is then the object's; absent from a
	// target list, for other kinds, and when the object was not read.
	Live *LiveObject `json:"live,omitempty"`
	// LiveError says why a kubernetes target's object was not read for
	// GET /v1/target (the receiver has no identity for the kind, or the
	// read failed); absent otherwise.
	LiveError string `json:"live_error,omitempty"`
	// LiveErrorCode is LiveError's code when it is one of Sentinels'
	// (no_dispatcher: the receiver has no identity for the kind); absent
	// otherwise.
	LiveErrorCode string `json:"live_error_code,omitempty"`
}

// LiveObject is a remote object as the receiver read it.
type LiveObject struct {
	// ResourceVersion is the object's version, which the receiver's next
	// write names as its precondition.
	ResourceVersion string `json:"resource_version"`
	// UID is the live object's incarnation; another than the target's UID
	// means the object was deleted and created again.
	UID string `json:"uid"`
	// LastDispatch is the kvfence.dev/receipt stamp on the object: the
	// dispatch that changed it last; empty when it carries none.
	LastDispatch string `json:"last_dispatch"`
}

// Receipt is the response of GET /v1/receipt.
type Receipt struct {
	// Scope is the scope the action was applied in.
	Scope string `json:"scope"`
	// Action is the applied action.
	Action string `json:"action"`
	// Grant is the grant the action was applied under.
	Grant string `json:"grant"`
	// RequestSHA256 is the SHA-256 of the applied request bytes, in hex.
	RequestSHA256 string `json:"request_sha256"`
	// Target is the target the request changed.
	Target string `json:"target"`
	// RevBefore is the target's revision before the mutation.
	RevBefore uint64 `json:"rev_before"`
	// RevAfter is the target's revision after the mutation.
	RevAfter uint64 `json:"rev_after"`
	// AuditSeq is the seq of the entry that records the applied decision.
	AuditSeq uint64 `json:"audit_seq"`
	// At is when the action was applied.
	At *string `json:"at"`
	// Dispatch is a remote target's dispatch state; the fields below are
	// omitted for any other receipt.
	Dispatch string `json:"dispatch,omitempty"`
	// DispatchID is the dispatch's id, the receipt stamp on the object.
	DispatchID string `json:"dispatch_id,omitempty"`
	// Precondition is the object's version the decision read.
	Precondition string `json:"precondition,omitempty"`
	// UID is the object's incarnation the decision read.
	UID string `json:"uid,omitempty"`
	// Deadline is when the dispatch must have ended.
	Deadline *string `json:"deadline,omitempty"`
	// Version is the object's version the write or its fence left.
	Version string `json:"version,omitempty"`
}

// ReceiptOf returns the JSON form of a receipt.
func ReceiptOf(rc kvfence.Receipt) Receipt {
	return Receipt{Scope: rc.Scope, Action: rc.Action, Grant: rc.Grant,
		RequestSHA256: hex.EncodeToString(rc.RequestSHA256[:]), Target: rc.Target, RevBefore: rc.RevBefore,
		RevAfter: rc.RevAfter, AuditSeq: rc.AuditSeq, At: Time(rc.At), Dispatch: string(rc.Dispatch), DispatchID: rc.DispatchID,
		Precondition: rc.Precondition, UID: rc.UID, Deadline: Time(rc.Deadline), Version: rc.Version}
}

// ToReceipt returns the receipt a response describes.
func (r Receipt) ToReceipt() (kvfence.Receipt, error) {
	out := kvfence.Receipt{Scope: r.Scope, Action: r.Action, Grant: r.Grant, Target: r.Target,
		RevBefore: r.RevBefore, RevAfter: r.RevAfter, AuditSeq: r.AuditSeq, Dispatch: kvfence.DispatchState(r.Dispatch),
		DispatchID: r.DispatchID, Precondition: r.Precondition, UID: r.UID, Version: r.Version}
	if err := hexDigest(r.RequestSHA256, &out.RequestSHA256); err != nil {
		return out, err
	}
	var err error
	if out.At, err = ParseTime(r.At); err != nil {
		return out, err
	}
	out.Deadline, err = ParseTime(r.Deadline)
	return out, err
}

// Receipts is the response of GET /v1/receipts: the receipts of one
// scope applied under grants that carried one claim, oldest first.
type Receipts struct {
	// Receipts are the receipts, in audit order.
	Receipts []Receipt `json:"receipts"`
}

// Events is the response of GET /v1/events: entries in chain order, at
// most the page size the request asked for.
type Events struct {
	// Events are the entries, each with its link hash.
	Events []audit.EntryJSON `json:"events"`
}

// Event returns the entry that e describes, checked against its hash: the
// entry is re-encoded canonically and must hash to e.Hash, so that a
// client holds exactly the bytes the receiver chained, not a lookalike.
func Event(e audit.EntryJSON) (kvfence.Event, error) {
	ent := audit.Entry{Seq: e.Seq, Kind: e.Kind, Scope: e.Scope, Epoch: e.Epoch, Grant: e.Grant, Executor: e.Executor,
		Action: e.Action, Outcome: e.Outcome, Reason: e.Reason, Target: e.Target, RevBefore: e.RevBefore,
		RevAfter: e.RevAfter, Decision: e.Decision, Note: e.Note, Actor: e.Actor, BaseSeq: e.BaseSeq}
	var err error
	if ent.Prev, err = hex.DecodeString(e.Prev); err != nil {
		return kvfence.Event{}, fmt.Errorf("entry %d: prev: %w", e.Seq, err)
	}
	if e.At != nil {
		at, err := time.Parse(time.RFC3339Nano, *e.At)
		if err != nil {
			return kvfence.Event{}, fmt.Errorf("entry %d: at: %w", e.Seq, err)
		}
		ent.At = at.UnixNano()
	}
	for _, d := range []struct {
		dst *[]byte
		src string
	}{{&ent.RequestSHA256, e.RequestSHA256}, {&ent.ValueSHA256, e.ValueSHA256},
		{&ent.BaseHash, e.BaseHash}, {&ent.BaseFence, e.BaseFence}} {
		if d.src != "" {
			if *d.dst, err = hex.DecodeString(d.src); err != nil {
				return kvfence.Event{}, fmt.Errorf("entry %d: %w", e.Seq, err)
			}
		}
	}
	raw, err := audit.EncodeEntry(&ent)
	if err != nil {
		return kvfence.Event{}, fmt.Errorf("entry %d: %w", e.Seq, err)
	}
	h := audit.HashEntry(raw)
	if hex.EncodeToString(h[:]) != e.Hash {
		return kvfence.Event{}, fmt.Errorf("entry %d: %w: its fields hash to %x, the receiver sent %s",
			e.Seq, audit.ErrBrokenLink, h, e.Hash)
	}
	return kvfence.Event{Entry: ent, Hash: h}, nil
}

// Time formats t for JSON, or nil for the zero time.
func Time(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

// ParseTime parses what Time wrote.
func ParseTime(s *string) (time.Time, error) {
	if s == nil {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}

func hexDigest(s string, dst *[32]byte) error {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(dst) {
		return fmt.Errorf("digest %q is not 64 hex digits", s)
	}
	copy(dst[:], b)
	return nil
}
