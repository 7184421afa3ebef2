package api

import (
	"errors"
	"net/http"

	"github.com/kvfence/kvfence/kvfence"
)

// ErrJSON means a JSON body is not the JSON its type defines, read
// strictly (DecodeStrict, DecodeAnswer).
var ErrJSON = errors.New("api: not the expected JSON")

// Error is the body of every response that is not a result: {"error":
// {"code","message"}}. Code is stable; Message is for people.
type Error struct {
	// Error is the error's code and message.
	Error ErrorBody `json:"error"`
}

// ErrorBody is the error itself.
type ErrorBody struct {
	// Code is the stable error code.
	Code string `json:"code"`
	// Message describes the error for people; it is not stable.
	Message string `json:"message"`
}

// Codes of errors that are not one of kvfence's sentinels.
const (
	CodeBadRequest      = "bad_request"
	CodeUnauthenticated = "unauthenticated"
	CodeForbidden       = "forbidden"
	CodeNotFound        = "no_such_endpoint"
	CodeMethod          = "method_not_allowed"
	CodeMediaType       = "unsupported_media_type"
	CodeTooLarge        = "too_large"
	CodeCanceled        = "canceled"
	CodeIntegrity       = "integrity"
	CodeInternal        = "internal"
	// CodeOutcomeUnknown is kvfence.ErrOutcomeUnknown's code: the store
	// may or may not have committed the call (a lost commit answer).
	CodeOutcomeUnknown = "outcome_unknown"
)

// Sentinel is one of kvfence's errors as it crosses the wire: its code and
// HTTP status. The server finds the first entry that an error matches; the
// client turns the code back into the sentinel, so that errors.Is works on
// both sides of the connection.
type Sentinel struct {
	// Code is the error's stable code on the wire.
	Code string
	// Status is the HTTP status the server answers with.
	Status int
	// Err is the sentinel error that the code stands for.
	Err error
}

// Sentinels lists kvfence's errors in the order they are matched. A change
// that committed but was not acknowledged comes first: whatever caused it,
// the caller must check the state before repeating the call. A change that
// may or may not have committed comes next, before every error that says
// nothing was written (a busy or closed store), since it may wrap one.
var Sentinels = []Sentinel{
	{"not_acknowledged", http.StatusInternalServerError, kvfence.ErrNotAcknowledged},
	{"hold_not_settled", http.StatusServiceUnavailable, kvfence.ErrHoldNotSettled},
	{CodeOutcomeUnknown, http.StatusServiceUnavailable, kvfence.ErrOutcomeUnknown},
	{"storage_busy", http.StatusServiceUnavailable, kvfence.ErrStorageBusy},
	{"storage_reserve", http.StatusServiceUnavailable, kvfence.ErrStorageReserve},
	{"record_limit", http.StatusInsufficientStorage, kvfence.ErrRecordLimit},
	{"closed", http.StatusServiceUnavailable, kvfence.ErrClosed},
	{"scope_exists", http.StatusConflict, kvfence.ErrScopeExists},
	{"target_exists", http.StatusConflict, kvfence.ErrTargetExists},
	{"target_key_in_use", http.StatusConflict, kvfence.ErrTargetKeyInUse},
	{"not_held", http.StatusConflict, kvfence.ErrNotHeld},
	{"epoch_mismatch", http.StatusConflict, kvfence.ErrEpochMismatch},
	{"hold_id_conflict", http.StatusConflict, kvfence.ErrHoldIDConflict},
	{"epoch_exhausted", http.StatusConflict, kvfence.ErrEpochExhausted},
	{"grant_not_active", http.StatusConflict, kvfence.ErrGrantNotActive},
	{"grant_expired", http.StatusConflict, kvfence.ErrGrantExpired},
	{"unknown_scope", http.StatusNotFound, kvfence.ErrUnknownScope},
	{"unknown_target", http.StatusNotFound, kvfence.ErrUnknownTarget},
	{"not_found", http.StatusNotFound, kvfence.ErrNotFound},
	{"remote_not_found", http.StatusNotFound, kvfence.ErrRemoteNotFound},
	{"invalid_window", http.StatusBadRequest, kvfence.ErrInvalidWindow},
	{"ttl_too_long", http.StatusBadRequest, kvfence.ErrTTLTooLong},
	{"malformed_request", http.StatusBadRequest, kvfence.ErrMalformedRequest},
	{"invalid_argument", http.StatusBadRequest, kvfence.ErrInvalidArgument},
	{"read_only", http.StatusServiceUnavailable, kvfence.ErrReadOnly},
	{"snapshot_unsupported", http.StatusNotImplemented, kvfence.ErrSnapshotUnsupported},
	{"kind_unsupported", http.StatusNotImplemented, kvfence.ErrKindUnsupported},
	{"no_dispatcher", http.StatusNotImplemented, kvfence.ErrNoDispatcher},
}

// SentinelOf returns the entry of Sentinels that err matches.
func SentinelOf(err error) (Sentinel, bool) {
	for _, s := range Sentinels {
		if errors.Is(err, s.Err) {
			return s, true
		}
	}
	return Sentinel{}, false
}

// SentinelByCode returns the entry of Sentinels with code.
func SentinelByCode(code string) (Sentinel, bool) {
	for _, s := range Sentinels {
		if s.Code == code {
			return s, true
		}
	}
	return Sentinel{}, false
}
