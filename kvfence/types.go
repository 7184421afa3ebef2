package kvfence

import (
	"encoding/hex"
	"time"

	"github.com/kvfence/kvfence/audit"
)

// Outcome is what Submit did with a request.
type Outcome string

// Submit's outcomes.
const (
	// Applied means the mutation committed, with its receipt and audit entry.
	Applied Outcome = audit.OutcomeApplied
	// AlreadyApplied means an identical request for the action was applied
	// earlier; nothing changed now.
	AlreadyApplied Outcome = audit.OutcomeAlreadyApplied
	// Denied means the request was refused; Result.Reason says why.
	Denied Outcome = audit.OutcomeDenied
)

// Reason is the stable code of a denial. Codes never change meaning; new
// codes may be added.
type Reason string

// Denial reasons, in the order Submit checks them (docs/design.md §4).
const (
	ReasonMalformedEnvelope   Reason = "malformed_envelope"
	ReasonMalformedRequest    Reason = "malformed_request"
	ReasonUnknownScope        Reason = "unknown_scope"
	ReasonReceiverHeld        Reason = "receiver_held"
	ReasonStaleEpoch          Reason = "stale_or_unknown_epoch"
	ReasonInactiveGrant       Reason = "inactive_grant"
	ReasonUnknownGrant        Reason = "unknown_grant"
	ReasonExecutorMismatch    Reason = "executor_mismatch"
	ReasonClaimMismatch       Reason = "claim_mismatch"
	ReasonRequestMismatch     Reason = "request_mismatch"
	ReasonGrantNotYetValid    Reason = "grant_not_yet_valid"
	ReasonGrantExpired        Reason = "grant_expired"
	ReasonActionReuseConflict Reason = "action_reuse_conflict"
	ReasonUnknownTarget       Reason = "unknown_target"
	ReasonPreconditionFailed  Reason = "precondition_failed"
)

// isStale reports whether a denial is a stale-authority rejection (checks
// 2-4), the kind that status counts and timestamps separately from
// misconfiguration.
func (r Reason) isStale() bool {
	return r == ReasonReceiverHeld || r == ReasonStaleEpoch || r == ReasonInactiveGrant
}

// Audit entry kinds written by the receiver. They are audit's constants,
// because audit.Verify replays the scopes' control state from them.
const (
	KindInit          = audit.KindInit
	KindScopeCreated  = audit.KindScopeCreated
	KindTargetCreated = audit.KindTargetCreated
	KindActivate      = audit.KindActivate
	KindHold          = audit.KindHold
	KindSubmit        = audit.KindSubmit
)

// Result is Submit's decision. Fields the request did not supply, or that
// a denial before its check could not know, are zero. Its JSON form is the
// served receiver's submit answer (docs/design.md §12), key for key.
type Result struct {
	// Outcome says whether the request was applied, had been applied earlier,
	// or was denied.
	Outcome Outcome `json:"outcome"`
	// Reason is set when Outcome is Denied.
	Reason Reason `json:"reason"`
	// Detail explains a denial in words for operators; it is not stable.
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
	// Revision is the target's revision after the mutation (Applied), or
	// after the earlier one (AlreadyApplied).
	Revision uint64 `json:"revision"`
	// AuditSeq is the seq of the audit entry that records this decision.
	AuditSeq uint64 `json:"audit_seq"`
	// ReceiptSeq is set on a denial of a request that the scope has
	// applied already, when the caller is the executor of the grant it was
	// applied under: the audit seq of the applied decision, so that the
	// executor can tell a stale retry of its own effect from a refusal.
	ReceiptSeq uint64 `json:"receipt_seq,omitempty"`
	// Dispatch is set for a write to a remote target (docs/design.md
	// §4.2): the state of its dispatch as this answer leaves it. Outcome
	// then says the same in short: Applied or AlreadyApplied for applied,
	// NotApplied for conflict, failed or cancelled, OutcomeUnknown for
	// unknown, Dispatching while the write is in flight.
	Dispatch DispatchState `json:"dispatch,omitempty"`
	// DispatchID identifies the dispatch: the receipt stamp written on the
	// remote object with the change.
	DispatchID string `json:"dispatch_id,omitempty"`
	// Version is the remote object's version the dispatch left (applied),
	// or the fencing write left (unknown after a fence).
	Version string `json:"version,omitempty"`
}

// Grant is a reviewed authorisation for exactly one logical action.
type Grant struct {
	// ID is the grant's id: 128 random bits as 32 lowercase hex digits, never
	// reused.
	ID string
	// Scope is the scope the grant opens.
	Scope string
	// Epoch is the scope's epoch when the grant was minted; the next hold
	// moves the scope past it for good.
	Epoch uint64
	// Executor is the identity that alone may submit under the grant.
	Executor string
	// Claim is the ledger claim ref that an envelope under the grant must
	// carry.
	Claim string
	// Action is the logical action that the bound request names.
	Action string
	// RequestSHA256 is the SHA-256 of the exact approved request bytes.
	RequestSHA256 [32]byte
	// NotBefore is the start of the validity window, on the receiver's clock.
	NotBefore time.Time
	// NotAfter is the end of the validity window, exclusive.
	NotAfter time.Time
	// Decision references the review that approved the grant; empty if none
	// was given.
	Decision string
	// CreatedAt is when the grant was minted, on the receiver's clock.
	CreatedAt time.Time
	// AuditSeq is the seq of the activate entry that minted the grant, as
	// Admin.Activate returns it. The grant record does not keep it, so
	// Receiver.Grant returns 0.
	AuditSeq uint64
	// RevokedSeq is the audit seq of the recovery that revoked the grant,
	// or 0. A revoked grant is refused even if it were somehow active
	// again.
	RevokedSeq uint64
}

// RequestSHA256Hex returns the bound request digest in lowercase hex.
func (g Grant) RequestSHA256Hex() string { return hex.EncodeToString(g.RequestSHA256[:]) }

// ScopeStatus is the observable control state of a scope. Its four
// timestamps are different events and are never collapsed into one.
type ScopeStatus struct {
	// Scope is the scope's name.
	Scope string
	// Epoch is the scope's current epoch, the one an envelope must carry.
	Epoch uint64
	// Mode is ModeHeld or ModeOpen.
	Mode Mode
	// ActiveGrant is the id of the grant the scope is open under; empty while
	// it is held.
	ActiveGrant string
	// CreatedAt is when the scope was created.
	CreatedAt time.Time
	// HoldRequestedAt is when the latest hold was requested: the receiver's
	// clock as Hold was called. Zero if the scope was never held.
	HoldRequestedAt time.Time
	// HoldCommittedAt is when the latest hold took effect: the receiver's
	// clock in the transaction that committed it. Zero if the scope was never
	// held.
	HoldCommittedAt time.Time
	// ActivatedAt is when the latest grant was activated; zero if none ever
	// was.
	ActivatedAt time.Time
	// LastStaleRejectionAt is the time of the latest stale-authority denial
	// (receiver_held, stale_or_unknown_epoch or inactive_grant); zero if
	// there was none.
	LastStaleRejectionAt time.Time
	// StaleRejections counts the stale-authority denials in this scope.
	StaleRejections uint64
	// Denials counts denials in this scope by reason.
	Denials map[Reason]uint64
	// Grant is the scope's active grant, read with the control state in
	// one transaction; nil when the scope is held.
	Grant *Grant
	// GrantExpired says that Grant's validity window was over by the
	// receiver's clock when the status was read: the scope is open, but
	// nothing can be submitted under it until it is held and activated
	// again.
	GrantExpired bool
	// MaxGrantTTL is the longest a grant of the scope may stay valid after
	// its activation, fixed when the scope was created.
	MaxGrantTTL time.Duration
}

// Target is a key in a scope with its value and revision.
type Target struct {
	// Name is the target's name.
	Name string
	// Scope is the scope the target belongs to.
	Scope string
	// Revision is 1 at creation and grows by one with each applied
	// mutation; for a TargetEtcd target it is the key's mod revision.
	Revision uint64
	// Value is the target's current value, a copy the caller may keep.
	Value []byte
	// Kind is the target's kind: TargetInternal, or TargetFunc for a
	// target whose applied writes also run the effect named by Effect.
	Kind TargetKind
	// Effect names the effect of a TargetFunc target; empty otherwise.
	Effect string
	// Object names the remote object of a TargetKubernetes target, and
	// UID the incarnation it was created for; nil and empty otherwise.
	// Such a target's Value is empty: the object holds it, and Revision
	// counts the writes the receiver applied to it.
	Object *RemoteObject
	// UID is the remote object's incarnation the target stands for.
	UID string
	// Key is a TargetEtcd target's etcd key; empty otherwise. For such a
	// target Value and Revision are the key's live value and mod revision
	// (the revision a request's expect_revision names), read when the
	// target was, and Writes counts the fence's writes to the key.
	Key string
	// Writes is, for a TargetEtcd target, the number of writes the fence
	// made to its key, counting the creation: the revision that its
	// receipts' and audit entries' RevBefore and RevAfter name. It is 0
	// for any other kind.
	Writes uint64
}

// Receipt records an applied action.
type Receipt struct {
	// Scope is the scope the action was applied in.
	Scope string
	// Action is the applied action; a scope keeps at most one receipt per
	// action.
	Action string
	// Grant is the id of the grant the action was applied under.
	Grant string
	// RequestSHA256 is the SHA-256 of the request bytes that were applied.
	RequestSHA256 [32]byte
	// Target is the target the request changed.
	Target string
	// RevBefore is the target's revision before the mutation.
	RevBefore uint64
	// RevAfter is the target's revision after the mutation.
	RevAfter uint64
	// AuditSeq is the seq of the audit entry that records the applied
	// decision.
	AuditSeq uint64
	// At is when the action was applied, on the receiver's clock.
	At time.Time
	// Dispatch is the state of a remote target's write (docs/design.md
	// §4.2); empty for any other target, whose receipt means applied.
	// RevAfter equals RevBefore until the dispatch is applied.
	Dispatch DispatchState
	// DispatchID is the dispatch's id, the receipt stamp on the object.
	DispatchID string
	// Precondition and UID are the object's version and incarnation the
	// decision read, under which the write was made.
	Precondition string
	// UID is the object's incarnation the decision read.
	UID string
	// Deadline is when the dispatch must have ended, on the receiver's
	// clock.
	Deadline time.Time
	// Version is the object's version the write left (applied), or a
	// fencing write left (unknown).
	Version string
}

// HeldScope is one scope's part of a hold.
type HeldScope struct {
	// Scope is the held scope's name.
	Scope string
	// PreviousEpoch is the scope's epoch before the hold or recovery.
	PreviousEpoch uint64
	// Epoch is the scope's new epoch; every grant of a lower epoch is
	// superseded.
	Epoch uint64
	// Ack is the receiver's signed acknowledgment of this scope's hold,
	// covered by HoldResult.Checkpoint: what a coordinator keeps as
	// evidence, checkable offline with the receiver's public key. It is
	// zero for the scopes of a recovery.
	Ack audit.SignedHoldAck
}

// HoldResult reports a committed hold.
type HoldResult struct {
	// Scopes lists each held scope, in the order the request named them.
	Scopes []HeldScope
	// HoldRequestedAt is the receiver's clock when Hold was called.
	HoldRequestedAt time.Time
	// HoldCommittedAt is the receiver's clock in the transaction that
	// committed the hold.
	HoldCommittedAt time.Time
	// AuditSeq is the seq of the last scope's hold entry; each scope has an
	// entry of its own.
	AuditSeq uint64
	// Repeated is true when the hold repeated an earlier one with the same
	// HoldRequest.ID: nothing was written, and the result is the first
	// hold's.
	Repeated bool
	// Checkpoint is the receiver's signed checkpoint that covers every
	// scope's hold entry (Checkpoint.Seq >= AuditSeq): the anchor written
	// for the hold's commit, or for a repeat the current one. Each scope's
	// Ack names it.
	Checkpoint audit.SignedCheckpoint
	// Outstanding lists the writes to remote targets of the held scopes,
	// decided before the hold, whose outcome is unknown: each may or may
	// not have reached its object, and was fenced off before the hold was
	// acknowledged (docs/design.md §4.2). Containment reads them.
	Outstanding []OutstandingDispatch
}
