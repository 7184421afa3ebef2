package ledger

import (
	"crypto/ed25519"
	"errors"
	"time"
)

// Errors of receivers, boundaries and containments.
var (
	// ErrUnknownReceiver means a name is not a registered receiver.
	ErrUnknownReceiver = errors.New("ledger: unknown receiver")
	// ErrReceiverExists means a receiver of that name is registered already.
	ErrReceiverExists = errors.New("ledger: receiver already registered")
	// ErrNoContainment means the action has no containment record.
	ErrNoContainment = errors.New("ledger: no containment")
	// ErrNotContained means the containment is not full (nor full with an
	// alternate): a successor may not be activated.
	ErrNotContained = errors.New("ledger: not fully contained")
	// ErrNotReconciled means the superseded claim is still uncertain.
	ErrNotReconciled = errors.New("ledger: superseded claim not reconciled")
	// ErrUnverifiedAcknowledgment means a boundary was to be recorded as
	// acknowledged without an acknowledgment that verifies under the
	// receiver's pinned key.
	ErrUnverifiedAcknowledgment = errors.New("ledger: acknowledgment does not verify")
	// ErrReceiverKeyPinned means the public key is pinned for another
	// receiver already.
	ErrReceiverKeyPinned = errors.New("ledger: public key already pinned for another receiver")
	// ErrNoBoundaries means the action's approval names no boundary to hold.
	ErrNoBoundaries = errors.New("ledger: the approval names no boundaries")
	// ErrAcknowledgmentConflict means an acknowledged boundary was given a
	// second acknowledgment of another installed epoch.
	ErrAcknowledgmentConflict = errors.New("ledger: a second acknowledgment names another installed epoch")
	// ErrAlreadyAcknowledged means an alternate containment was asked for
	// a boundary that acknowledged its hold.
	ErrAlreadyAcknowledged = errors.New("ledger: the boundary already acknowledged its hold")
	// ErrContainmentTampered means a stored receiver, approval boundary or
	// containment record does not match the audit entry that wrote it, or
	// is an older copy than the newest entry that changed it: the file was
	// edited or a record put back.
	ErrContainmentTampered = errors.New("ledger: record does not match its audit entry (edited or put back)")
)

// Receiver is a receiving boundary registered in the ledger, with its
// public key pinned: an acknowledgment counts only if that key signed it.
type Receiver struct {
	// Name is the receiver's name in the ledger; boundaries use it.
	Name string
	// Server is a served receiver's address (https://… or unix://…); empty
	// for a receiver on this host.
	Server string
	// DB and Anchor are the database and anchor paths of a receiver on
	// this host; empty for a served one.
	DB, Anchor string
	// ReceiverID is the receiver's id, as its checkpoints and hold
	// acknowledgments name it.
	ReceiverID string
	// PublicKey is the receiver's pinned Ed25519 public key.
	PublicKey ed25519.PublicKey
	// AddedBy is the operator who registered it.
	AddedBy string
	// AddedAt is when it was registered.
	AddedAt time.Time
	// AuditSeq is the registration's entry in the ledger's audit chain.
	AuditSeq uint64
}

// AddReceiverRequest asks AddReceiver to register a receiver. Exactly one
// of Server and DB is set; Anchor goes with DB.
type AddReceiverRequest struct {
	// Name, Server, DB, Anchor and ReceiverID are Receiver's fields of the
	// same names.
	Name, Server, DB, Anchor, ReceiverID string
	// PublicKey is the receiver's Ed25519 public key, to pin.
	PublicKey ed25519.PublicKey
	// Operator is who registers it.
	Operator string
}

// Boundary is one receiving boundary an approved action needs held: a
// scope at a registered receiver.
type Boundary struct {
	// Receiver is the registered receiver's name.
	Receiver string
	// Scope is the scope at that receiver.
	Scope string
}

// ContainmentState is a containment's overall state.
type ContainmentState string

// The containment states. Only Full and FullWithAlternate let a successor
// be activated.
const (
	ContainmentFull              ContainmentState = "full"
	ContainmentFullWithAlternate ContainmentState = "full_with_alternate"
	ContainmentPartial           ContainmentState = "partial"
	ContainmentNone              ContainmentState = "none"
)

// BoundaryResult is what became of one boundary's hold.
type BoundaryResult string

// The boundary results. Only Acknowledged and Alternate count as contained.
const (
	BoundaryPending      BoundaryResult = "pending"
	BoundaryAcknowledged BoundaryResult = "acknowledged"
	BoundaryFailed       BoundaryResult = "failed"
	BoundaryTimeout      BoundaryResult = "timeout"
	BoundaryUnknown      BoundaryResult = "unknown"
	BoundaryUnverified   BoundaryResult = "unverified"
	BoundaryAlternate    BoundaryResult = "alternate"
)

// Effect is a receipt applied under the superseded claim: an outstanding
// effect to reconcile.
type Effect struct {
	// Receiver, Scope and Action name the boundary and the applied action.
	Receiver, Scope, Action string
	// AuditSeq is the receiver's audit entry of the applied decision.
	AuditSeq uint64
	// AppliedAt is when it was applied, on the receiver's clock.
	AppliedAt time.Time
	// Target is the target the request changed.
	Target string
	// Revision is the target's revision after the change.
	Revision uint64
}

// Alternate records that a boundary which could not acknowledge was
// contained by another, independently authorised path.
type Alternate struct {
	// Operator and Reason say who recorded it and on what grounds.
	Operator, Reason string
	// At is when it was recorded.
	At time.Time
}

// BoundaryContainment is one boundary's part of a containment.
type BoundaryContainment struct {
	// Receiver and Scope name the boundary.
	Receiver, Scope string
	// HoldID is the deterministic hold id used at this boundary on every
	// attempt (HoldID).
	HoldID string
	// Result is what became of the hold.
	Result BoundaryResult
	// ErrorCode and Error say why a boundary is not acknowledged.
	ErrorCode, Error string
	// HoldRequestedAt is the coordinator's clock when the latest attempt
	// asked for the hold.
	HoldRequestedAt time.Time
	// AcknowledgedAt is the receiver's committed time of the hold.
	AcknowledgedAt time.Time
	// PreviousEpoch and InstalledEpoch are the hold's epochs.
	PreviousEpoch, InstalledEpoch uint64
	// Ack is the receiver's signed hold acknowledgment
	// (audit.SignedHoldAck.Marshal); Checkpoint the signed checkpoint that
	// covers it (audit.SignedCheckpoint.Marshal).
	Ack, Checkpoint []byte
	// LastStaleRejectionAt is the receiver's latest stale-authority denial
	// in the scope, as it reported it.
	LastStaleRejectionAt time.Time
	// Outstanding are the receipts applied under the superseded claim.
	Outstanding []Effect
	// ObservedAt is the coordinator's clock when LastStaleRejectionAt and
	// Outstanding were last read from the receiver; zero if they never
	// were.
	ObservedAt time.Time
	// ObservationError says why the latest reading of them failed or is
	// incomplete; empty when it succeeded. The values above are then the
	// last ones read, which may be out of date.
	ObservationError string
	// Alternate is set when Result is BoundaryAlternate.
	Alternate *Alternate
	// Attempts counts the hold attempts recorded.
	Attempts uint64
}

// SuccessorGrant is a successor's grant activated at one boundary.
type SuccessorGrant struct {
	// Receiver and Scope name the boundary; Grant is the grant's id there.
	Receiver, Scope, Grant string
	// Epoch is the grant's epoch: the one the containment installed.
	Epoch uint64
	// Executor and Claim are who may submit under it and the claim ref
	// its envelopes carry.
	Executor, Claim string
	// Decision is the grant's decision reference.
	Decision string
	// ActivatedAt is the grant's creation time at the receiver.
	ActivatedAt time.Time
}

// Containment is the record of holding an action at every boundary after
// its claim was superseded.
type Containment struct {
	// ID is derived from the ledger, the action and the superseded claim
	// (ContainmentID), so that every rerun finds the same record.
	ID string
	// Action is the contained action; SupersededClaim the claim whose
	// worker is being fenced.
	Action, SupersededClaim string
	// Reason is the first run's reason, given to every hold.
	Reason string
	// State is derived from the boundaries' results by the ledger.
	State ContainmentState
	// Boundaries are the approval's boundaries, in its order.
	Boundaries []BoundaryContainment
	// StartedAt and UpdatedAt are when the record was made and last
	// changed.
	StartedAt, UpdatedAt time.Time
	// Successor are the successor's grants, once activated.
	Successor []SuccessorGrant
	// AuditSeq is the entry of the record's latest change.
	AuditSeq uint64
}

// AlternateRequest asks RecordAlternate to record an alternate containment.
type AlternateRequest struct {
	// Action is the contained action; Receiver and Scope name the
	// boundary (Scope may be empty when the receiver has one boundary).
	Action, Receiver, Scope string
	// Operator and Reason say who records it and why.
	Operator, Reason string
}
