package contain

import "errors"

// Errors of the coordinator. The ledger's refusals (ledger.ErrNotContained,
// ledger.ErrNotReconciled, ledger.ErrNoContainment, ...) are returned
// wrapped, so that errors.Is finds them.
var (
	// ErrInvalidArgument means a request to the coordinator is malformed.
	ErrInvalidArgument = errors.New("contain: invalid argument")
	// ErrUnreachable means no connection to a boundary's receiver could be
	// made; nothing was sent to it.
	ErrUnreachable = errors.New("contain: receiver unreachable")
	// ErrBadAnswer means a receiver answered with something that is not
	// what was asked for: another scope, hold id or epoch than its signed
	// acknowledgment states, or a status of another scope.
	ErrBadAnswer = errors.New("contain: receiver's answer does not match the request")
	// ErrVerifyMismatch means Verify found a stored acknowledgment that no
	// longer verifies, or a receiver whose epoch is below the one the
	// containment installed there.
	ErrVerifyMismatch = errors.New("contain: containment evidence does not verify")
	// ErrNotSuccessor means a successor's activation named a claim other
	// than the action's live one, or a request other than the approved
	// one; nothing was activated.
	ErrNotSuccessor = errors.New("contain: not the action's successor")
	// ErrActivationIncomplete means a successor was activated at some
	// boundaries and not at others; the result says which.
	ErrActivationIncomplete = errors.New("contain: successor not activated at every boundary")
)
