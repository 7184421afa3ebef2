package ledger

import "errors"

// Errors returned when creating or opening a ledger.
var (
	// ErrNotInitialized means the ledger file does not exist; Open never creates one.
	ErrNotInitialized = errors.New("ledger: not initialized (no ledger file)")
	// ErrAlreadyInitialized means Init found a file at the path and refused to touch it.
	ErrAlreadyInitialized = errors.New("ledger: already initialized (file exists)")
	// ErrStorageBusy means the ledger's file lock was not obtained within Options.LockTimeout.
	ErrStorageBusy = errors.New("ledger: storage busy (ledger locked by another process)")
	// ErrBadFormat means the file is not a ledger of a supported format.
	ErrBadFormat = errors.New("ledger: not a ledger file of a supported format")
	// ErrNoAnchor means a writable ledger was opened without an anchor store or signing key.
	ErrNoAnchor = errors.New("ledger: a writable ledger needs an anchor store and its signing key")
	// ErrKeyMismatch means the signing key given is not the one recorded at init.
	ErrKeyMismatch = errors.New("ledger: signing key does not match the ledger's recorded key")
	// ErrReadOnly means a write was attempted on a ledger opened read-only.
	ErrReadOnly = errors.New("ledger: opened read-only")
	// ErrNotAcknowledged means a change committed but its anchor write
	// failed, or, with Options.Witnesses, fewer than K witnesses cosigned
	// the anchored checkpoint that covers it; the next Open moves the
	// anchor up. Retrying is safe for claim (the worker gets its claim
	// back) but not for the other calls.
	ErrNotAcknowledged = errors.New("ledger: committed but not acknowledged (its anchor write or its witnesses' cosignatures failed)")
	// ErrInvalidArgument means an argument failed validation.
	ErrInvalidArgument = errors.New("ledger: invalid argument")
)

// Refusals: the ledger's state does not allow the call. Nothing was written.
var (
	// ErrActionMismatch means an approval named one action and the request
	// bytes it would bind name another.
	ErrActionMismatch = errors.New("ledger: the request names another action")
	// ErrAlreadyApproved means the action already has an approval.
	ErrAlreadyApproved = errors.New("ledger: action already approved")
	// ErrNotApproved means the action has no approval.
	ErrNotApproved = errors.New("ledger: action not approved")
	// ErrApprovalExpired means the action's approval expired before the claim.
	ErrApprovalExpired = errors.New("ledger: approval expired")
	// ErrClaimed means another worker holds the action's live claim. An
	// expired lease does not release it; an operator must take over.
	ErrClaimed = errors.New("ledger: action claimed by another worker")
	// ErrSettled means the action's claims are all settled (succeeded,
	// failed, or uncertain awaiting reconciliation); it cannot be claimed again.
	ErrSettled = errors.New("ledger: action settled")
	// ErrNoClaim means no claim has the given ref, or the action has no live claim.
	ErrNoClaim = errors.New("ledger: no such claim")
	// ErrNotOwner means the claim belongs to another worker.
	ErrNotOwner = errors.New("ledger: claim belongs to another worker")
	// ErrSuperseded means an operator took the claim over.
	ErrSuperseded = errors.New("ledger: claim superseded by a takeover")
	// ErrBadTransition means the claim's state does not allow the change.
	ErrBadTransition = errors.New("ledger: claim state does not allow this change")
	// ErrNotFound means an observation found no record.
	ErrNotFound = errors.New("ledger: not found")
)

// IsRefusal reports whether err is one of the refusals above: the call was
// well formed but the ledger's state did not allow it.
func IsRefusal(err error) bool {
	for _, t := range []error{ErrActionMismatch, ErrAlreadyApproved, ErrNotApproved, ErrApprovalExpired, ErrClaimed, ErrSettled,
		ErrNoClaim, ErrNotOwner, ErrSuperseded, ErrBadTransition, ErrUnknownReceiver, ErrReceiverExists, ErrReceiverKeyPinned,
		ErrNoBoundaries, ErrNoContainment, ErrNotContained, ErrNotReconciled, ErrUnverifiedAcknowledgment,
		ErrAcknowledgmentConflict, ErrAlreadyAcknowledged} {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
