package client

import (
	"errors"
	"fmt"

	"github.com/kvfence/kvfence/kvfence"
)

// Errors for answers that are not one of kvfence's sentinels. A *Error
// unwraps to one of these or to a kvfence sentinel.
var (
	// ErrUnauthenticated means the receiver found no usable identity on the
	// channel (401): no SPIFFE ID, or more than one.
	ErrUnauthenticated = errors.New("client: the receiver found no usable identity on the connection")
	// ErrForbidden means the identity may not make this call (403): a
	// worker at an administrative endpoint, or a uid not on the socket's
	// allow-list.
	ErrForbidden = errors.New("client: the receiver refused this identity for this call")
	// ErrTooLarge means the request was over the receiver's size limit
	// (413); nothing was decided or recorded.
	ErrTooLarge = errors.New("client: request over the receiver's size limit")
	// ErrBadRequest means the receiver could not parse the request (400,
	// 404, 405, 415).
	ErrBadRequest = errors.New("client: the receiver could not parse the request")
	// ErrIntegrity means the receiver met an integrity problem (a rollback,
	// a fork, a moved anchor) while serving the call.
	ErrIntegrity = errors.New("client: integrity problem at the receiver")
	// ErrServer means the receiver failed (500) before the call could take
	// effect, and its log has the detail: a fault is never a decision, so
	// nothing was applied on its account (a call that may have taken effect
	// is ErrOutcomeUnknown or kvfence.ErrNotAcknowledged instead).
	ErrServer = errors.New("client: receiver fault")
	// ErrProtocol means the answer was not what the API defines.
	ErrProtocol = errors.New("client: unexpected answer from the receiver")
	// ErrOutcomeUnknown means the call may or may not have taken effect:
	// the receiver's store lost the answer to its commit (503
	// outcome_unknown), or the connection was lost, or an intermediary
	// answered, after a change was sent; retrying the same envelope is
	// safe, since one that applied is answered already_applied from its
	// receipt. It also matches kvfence.ErrOutcomeUnknown.
	ErrOutcomeUnknown = fmt.Errorf("client: the call may or may not have taken effect: %w", kvfence.ErrOutcomeUnknown)
	// ErrUntrustedServer means the process serving a unix socket, or the
	// socket file's owner, is not a uid the client trusts to be the
	// receiver (Options.ServerUIDs); the request was not sent.
	ErrUntrustedServer = errors.New("client: the unix socket is not served by a trusted uid; nothing was sent")
)

// Error is an error answer from the receiver.
type Error struct {
	Status  int    // the HTTP status
	Code    string // the stable error code
	Message string // for people
	err     error
}

// Error returns the receiver's message with the HTTP status and the code.
func (e *Error) Error() string {
	return fmt.Sprintf("%s (HTTP %d %s)", e.Message, e.Status, e.Code)
}

// Unwrap returns the sentinel the answer's code stands for.
func (e *Error) Unwrap() error { return e.err }
