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

// Denial reasons, in the order Submit checks them (DESIGN §4).
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
// a denial before its check could not know, are zero.
type Result struct {
	Outcome Outcome
	// Reason is set when Outcome is Denied.
	Reason Reason
	// Detail explains a denial in words for operators; it is not stable.
	Detail string
	Scope  string
	// Epoch is the epoch the envelope claimed.
	Epoch  uint64
	Grant  string
	Action string
	Target string
	// Revision is the target's revision after the mutation (Applied), or
	// after the earlier one (AlreadyApplied).
	Revision uint64
	// AuditSeq is the seq of the audit entry that records this decision.
	AuditSeq uint64
}

// Grant is a reviewed authorisation for exactly one logical action.
type Grant struct {
	ID            string
	Scope         string
	Epoch         uint64
	Executor      string
	Claim         string
	Action        string
	RequestSHA256 [32]byte
	NotBefore     time.Time
	NotAfter      time.Time
	Decision      string
	CreatedAt     time.Time
	AuditSeq      uint64
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
	Scope                string
	Epoch                uint64
	Mode                 Mode
	ActiveGrant          string
	CreatedAt            time.Time
	HoldRequestedAt      time.Time
	HoldCommittedAt      time.Time
	ActivatedAt          time.Time
	LastStaleRejectionAt time.Time
	StaleRejections      uint64
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
	Name     string
	Scope    string
	Revision uint64
	Value    []byte
}

// Receipt records an applied action.
type Receipt struct {
	Scope         string
	Action        string
	Grant         string
	RequestSHA256 [32]byte
	Target        string
	RevBefore     uint64
	RevAfter      uint64
	AuditSeq      uint64
	At            time.Time
}

// HeldScope is one scope's part of a hold.
type HeldScope struct {
	Scope         string
	PreviousEpoch uint64
	Epoch         uint64
}

// HoldResult reports a committed hold.
type HoldResult struct {
	Scopes          []HeldScope
	HoldRequestedAt time.Time
	HoldCommittedAt time.Time
	AuditSeq        uint64
}
