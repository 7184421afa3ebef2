package ledger

import (
	"crypto/ed25519"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/witness"
)

// State is a claim's state.
type State string

// The states of a claim. Claimed and dispatched are live; the others are
// settled, except that an uncertain claim waits for an operator to
// reconcile it.
const (
	StateClaimed    State = "claimed"
	StateDispatched State = "dispatched"
	StateSucceeded  State = "succeeded"
	StateFailed     State = "failed"
	StateUncertain  State = "uncertain"
)

// Live reports whether a claim in state s still belongs to its worker.
func (s State) Live() bool { return s == StateClaimed || s == StateDispatched }

// Audit entry kinds written by the ledger.
const (
	KindInit      = "init"
	KindApprove   = "approve"
	KindClaim     = "claim"
	KindHeartbeat = "heartbeat"
	KindDispatch  = "dispatch"
	KindFinish    = "finish"
	KindTakeover  = "takeover"
	KindReconcile = "reconcile"
	// KindReceiver registers a receiver and pins its key.
	KindReceiver = "receiver"
	// KindContain begins a containment.
	KindContain = "contain"
	// KindContainRecord records hold attempts' results at boundaries.
	KindContainRecord = "contain_record"
	// KindContainAlternate records an alternate containment of a boundary.
	KindContainAlternate = "contain_alternate"
	// KindContainSuccessor records a successor's grants.
	KindContainSuccessor = "contain_successor"
)

// DefaultLockTimeout is how long Open waits for the file lock when
// Options.LockTimeout is zero.
const DefaultLockTimeout = time.Second

// DefaultLease is the lease a claim or heartbeat gets when none is given.
const DefaultLease = 30 * time.Second

// MaxLease bounds a lease.
const MaxLease = 24 * time.Hour

// Options configures Open. The zero value opens read-write, which needs
// Anchor and Key.
type Options struct {
	// LockTimeout is how long to wait for the file lock: zero means
	// DefaultLockTimeout, negative means do not wait.
	LockTimeout time.Duration
	// ReadOnly opens without writing: no anchor write, no key needed.
	ReadOnly bool
	// Anchor holds the ledger's latest signed checkpoint, administered apart
	// from the ledger file. Required for writing; if set when reading, the
	// file is checked against it.
	Anchor audit.AnchorStore
	// Witnesses, if any, are the witnesses that cosign the ledger's
	// checkpoints (docs/design.md §7.10), as notes of origin
	// checkpoint.LedgerOrigin, and WitnessQuorum is K, how many of them
	// make a write acknowledged. A write is then acknowledged only once
	// its anchor is written and K witnesses cosigned the anchored
	// checkpoint that covers it; fewer is ErrNotAcknowledged, as a failed
	// anchor write is. Open (with Anchor set) asks every witness for its
	// latest cosigned checkpoint of this ledger before it moves the anchor
	// up, and refuses a file behind any of them
	// (audit.ErrRollbackDetected) or beside one (audit.ErrForkDetected),
	// and fewer than N-K+1 answers (ErrWitnessAnswers): only that many
	// are sure to include one of the K that cosigned the last acknowledged
	// write. Open refuses a quorum that witness.NewQuorum refuses, and
	// witnesses without Anchor (ErrInvalidArgument).
	Witnesses []witness.Member
	// WitnessQuorum is K, 1 <= K <= len(Witnesses).
	WitnessQuorum int
	// WitnessFaults is F, how many witnesses may have lost, rolled back
	// or forged their store at once: Open then needs N-K+1+F answers
	// (witness.QuorumOptions.Faults), 0 <= F <= K-1.
	WitnessFaults int
	// WitnessTimeout bounds a cosign round and Open's question to the
	// witnesses: zero means DefaultWitnessTimeout.
	WitnessTimeout time.Duration
	// Key is the ledger's Ed25519 signing key, required for writing.
	Key ed25519.PrivateKey
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Warn receives what an operator must see but what does not stop the
	// ledger: a witness that, beside a quorum that cosigned, answered
	// with a larger tree or refused the proof. Nil means the standard
	// library's log.Print.
	Warn func(msg string)
}

// InitOptions configures Init.
type InitOptions struct {
	// LedgerID names the ledger in its audit chain and checkpoints.
	LedgerID string
	// Key is the ledger's Ed25519 signing key.
	Key ed25519.PrivateKey
	// Anchor receives the first checkpoint. It must hold no anchor yet.
	Anchor audit.AnchorStore
	// Now is the clock for the init entry. Nil means time.Now.
	Now func() time.Time
}

// Approval records that an action, bound to the digest of its exact
// request, was approved by someone until an expiry.
type Approval struct {
	// Action is the approved action's name.
	Action string
	// RequestSHA256 is the SHA-256 of the exact request bytes approved.
	RequestSHA256 [32]byte
	// ActionChecked says whether Approve read the request bytes and found
	// that they name Action. It is false for an approval given by digest
	// alone (ApproveRequest.Request empty), which the ledger could not check.
	ActionChecked bool
	// Approver is who approved it.
	Approver string
	// Decision is an optional reference to the approval decision.
	Decision string
	// ApprovedAt is when the approval was recorded.
	ApprovedAt time.Time
	// ExpiresAt is when the approval stops admitting a first claim.
	ExpiresAt time.Time
	// AuditSeq is the approval's entry in the ledger's audit chain.
	AuditSeq uint64
	// Boundaries are the receiving boundaries the action needs held when
	// its claim is superseded, as approved.
	Boundaries []Boundary
}

// Claim is one worker's hold on one approved action.
type Claim struct {
	// Ref is the unguessable id the worker presents in later calls.
	Ref string
	// Action is the claimed action.
	Action string
	// Worker is the worker that holds (or held) the claim.
	Worker string
	// Generation is 1 for the action's first claim, then one more per takeover.
	Generation uint64
	// State is the claim's state.
	State State
	// ClaimedAt is when the claim was made.
	ClaimedAt time.Time
	// HeartbeatAt is the claim's last heartbeat, or ClaimedAt.
	HeartbeatAt time.Time
	// LeaseExpiresAt is when the live claim's lease runs out. It is zero
	// for a claim that is no longer live: a settled or uncertain claim
	// has no lease.
	LeaseExpiresAt time.Time
	// DispatchedAt is when the worker dispatched its request; zero if never.
	DispatchedAt time.Time
	// SettledAt is when the claim stopped being live: it reached
	// succeeded or failed, or a takeover made it uncertain.
	SettledAt time.Time
	// SupersededBy is the ref of the claim that took this one over.
	SupersededBy string
	// SupersededState is the state this claim was in at the takeover.
	SupersededState State
	// TakeoverBy is the operator who took the claim over.
	TakeoverBy string
	// TakeoverReason is the reason the operator gave for the takeover.
	TakeoverReason string
	// ReconciledBy is the operator who settled the uncertain claim.
	ReconciledBy string
	// ReconciledAt is when that operator settled it; zero if never.
	ReconciledAt time.Time
	// Resumed is set by Claim when it returned the worker's existing live
	// claim instead of creating one. It is not stored.
	Resumed bool
	// AuditSeq is the audit entry of the change that produced this view.
	AuditSeq uint64
}

// LeaseExpired reports whether the claim's lease ran out before now. An
// expired lease is only information: the claim stays live until a takeover.
func (c Claim) LeaseExpired(now time.Time) bool { return c.State.Live() && now.After(c.LeaseExpiresAt) }

// ActionView is everything the ledger holds about one action.
type ActionView struct {
	// Action is the action's name.
	Action string
	// Approval is the action's approval; nil if not approved.
	Approval *Approval
	// Live is the ref of the live claim, or empty if there is none.
	Live string
	// Claims are the action's claims, oldest first.
	Claims []Claim
}

// ApproveRequest asks Approve to approve an action.
type ApproveRequest struct {
	// Action is the action to approve. When Request is given, it must be
	// the action that the request names.
	Action string
	// Request is the exact request bytes being approved (the receiver's
	// canonical CBOR). Approve reads the action they name and refuses a
	// different one (ErrActionMismatch), and binds their SHA-256. Leave it
	// empty only to approve by digest alone; the approval then records
	// that its action was not checked.
	Request []byte
	// RequestSHA256 is the SHA-256 of the request bytes. With Request it
	// may be left zero; if given, it must be the digest of Request.
	RequestSHA256 [32]byte
	// Approver is who approves.
	Approver string
	// Decision is an optional reference to the approval decision.
	Decision string
	// TTL is how long the approval may be claimed; it must be positive.
	TTL time.Duration
	// Boundaries are the receiving boundaries the action needs held, each
	// a scope at a registered receiver, each named once.
	Boundaries []Boundary
}

// ClaimRequest asks Claim to claim an action for a worker.
type ClaimRequest struct {
	// Action is the approved action to claim.
	Action string
	// Worker is the worker that claims it.
	Worker string
	// Lease is the claim's lease; zero means DefaultLease.
	Lease time.Duration
}

// TakeoverRequest asks Takeover to supersede an action's live claim.
type TakeoverRequest struct {
	// Action is the action whose live claim is superseded.
	Action string
	// Operator is who takes over.
	Operator string
	// Reason is why, recorded in the audit chain.
	Reason string
	// Worker is the worker that gets the new claim.
	Worker string
	// Lease is the new claim's lease; zero means DefaultLease.
	Lease time.Duration
}
