package kvfence

import "errors"

// Errors returned when opening or creating a receiver.
var (
	// ErrNotInitialized means the database file does not exist; Open never creates one.
	ErrNotInitialized = errors.New("kvfence: receiver not initialized (no database file)")
	// ErrAlreadyInitialized means Init found a file at the path and refused to touch it.
	ErrAlreadyInitialized = errors.New("kvfence: receiver already initialized (file exists)")
	// ErrStorageBusy means the database lock was not obtained within Options.LockTimeout.
	ErrStorageBusy = errors.New("kvfence: storage busy (database locked by another process)")
	// ErrBadFormat means the file is not a kvfence receiver of a supported format version.
	ErrBadFormat = errors.New("kvfence: not a kvfence receiver database of a supported format")
	// ErrClosed means the receiver was closed.
	ErrClosed = errors.New("kvfence: receiver closed")
)

// Errors returned by administrative calls. An administrative call that
// returns an error changed nothing, except ErrNotAcknowledged: the change
// committed, but its anchor write failed.
var (
	// ErrScopeExists means CreateScope named a scope that already exists.
	ErrScopeExists = errors.New("kvfence: scope already exists")
	// ErrUnknownScope means an administrative call named a scope that does not exist.
	ErrUnknownScope = errors.New("kvfence: unknown scope")
	// ErrTargetExists means CreateTarget named a target that already exists.
	ErrTargetExists = errors.New("kvfence: target already exists")
	// ErrUnknownTarget means a lookup named a target that does not exist.
	ErrUnknownTarget = errors.New("kvfence: unknown target")
	// ErrNotHeld means Activate was called on a scope that is open; hold it first.
	ErrNotHeld = errors.New("kvfence: scope is not held")
	// ErrEpochExhausted means a hold would advance an epoch past the uint64 limit.
	ErrEpochExhausted = errors.New("kvfence: epoch exhausted")
	// ErrInvalidWindow means a grant's validity window is empty or already over.
	ErrInvalidWindow = errors.New("kvfence: invalid grant validity window")
	// ErrInvalidArgument means an administrative call's argument failed validation.
	ErrInvalidArgument = errors.New("kvfence: invalid argument")
	// ErrNotFound means an observation found no record under the given key.
	ErrNotFound = errors.New("kvfence: not found")
)

// Errors wrapped by the strict decoders. Submit reports these as denials
// (malformed_envelope, malformed_request), never as errors.
var (
	// ErrMalformedEnvelope means envelope bytes are not a canonical, well-formed envelope.
	ErrMalformedEnvelope = errors.New("kvfence: malformed envelope")
	// ErrMalformedRequest means request bytes are not a canonical, well-formed request.
	ErrMalformedRequest = errors.New("kvfence: malformed request")
	// ErrMalformedPatch means a request's patch is not a strictly well-formed RFC 6902 JSON Patch.
	ErrMalformedPatch = errors.New("kvfence: not a well-formed RFC 6902 JSON Patch")
)

// ErrStorageReserve means Submit was refused before anything was written
// because the database's volume has less free space than Options.Reserve
// keeps for administrators. Denials are written too, so a flood of them
// could otherwise fill the volume until no hold can commit; the reserve
// keeps room for holds and activations. Free space, then retry.
var ErrStorageReserve = errors.New("kvfence: storage below the reserve kept for administrators; submit refused, nothing written")

// ErrNotAcknowledged means a write committed to the database but its anchor
// was not moved, so the call could not acknowledge it. The database is then
// ahead of its anchor, which the next Open accepts and repairs; a retried
// Submit of the same envelope answers already_applied. An administrative
// call that returns it (a hold, an activation) did take effect: check the
// state (Status) before repeating it.
var ErrNotAcknowledged = errors.New("kvfence: committed but not acknowledged (its anchor write or its witnesses' cosignatures failed)")

// ErrEpochMismatch means an activation or a hold named an epoch other than the scope's current one.
var ErrEpochMismatch = errors.New("kvfence: epoch mismatch")

// ErrHoldIDConflict means a hold reused an ID that an earlier hold of the
// scope used with other scopes, another reason or another expected epoch.
var ErrHoldIDConflict = errors.New("kvfence: hold id conflict")

// ErrAnchorPresent means a lost-anchor admission met an anchor store that
// holds a loadable anchor: the anchor is not lost, and an ordinary
// admission is the way to supersede it.
var ErrAnchorPresent = errors.New("kvfence: an anchor is present; a lost-anchor admission is only for a missing one")

// ErrRecoveryKeyIsReceiverKey means a recovery key was given that is the
// receiver's own key. The recovery key exists to overrule the receiver
// key, so the same key in both roles is refused.
var ErrRecoveryKeyIsReceiverKey = errors.New("kvfence: the recovery key is the receiver's own key; it must be held apart")

// refusals are the errors that IsRefusal recognises.
var refusals = []error{ErrNotHeld, ErrEpochMismatch, ErrEpochExhausted, ErrScopeExists, ErrUnknownScope,
	ErrTargetExists, ErrUnknownTarget, ErrNotFound, ErrRecoveryKeyIsReceiverKey, ErrAnchorPresent, ErrTTLTooLong,
	ErrGrantNotActive, ErrGrantExpired, ErrTargetKeyInUse}

// IsRefusal reports whether err is a refusal by the receiver's rules: the
// call was well formed and the receiver is sound, but its state does not
// allow what was asked, and nothing changed. These are ErrNotHeld (activate
// an open scope), ErrEpochMismatch (an epoch compare-and-swap that lost),
// ErrEpochExhausted, ErrScopeExists, ErrUnknownScope, ErrTargetExists,
// ErrUnknownTarget, ErrNotFound (no receipt or grant under that key),
// ErrRecoveryKeyIsReceiverKey, ErrAnchorPresent, ErrTTLTooLong (a grant
// lifetime over the maximum), ErrGrantNotActive and ErrGrantExpired (an
// extension of a grant that is not active) and ErrTargetKeyInUse (an etcd
// target's key taken by another target or another value). Retrying the same call
// is refused again until the state changes (a hold, another epoch, another
// name).
//
// Operational faults (I/O, a busy or closed receiver, a wrong key) and
// integrity errors (IsIntegrityError) are not refusals.
func IsRefusal(err error) bool {
	for _, target := range refusals {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// Errors about where the anchor is kept (ClusterAnchor).
var (
	// ErrAnchorNotApart means the anchor is kept on the cluster that holds the receiver's own store, where one restore rolls both back.
	ErrAnchorNotApart = errors.New("kvfence: the anchor is on the receiver's own store cluster; it must be kept on a separate one")
	// ErrAnchorClusterChanged means a cluster other than the anchor's recorded (or stated) one answers at the anchor's address.
	ErrAnchorClusterChanged = errors.New("kvfence: another cluster answers for the anchor")
	// ErrAnchorClusterUnrecorded means the receiver records no anchor cluster and none was stated, so the anchor's cluster cannot be checked.
	ErrAnchorClusterUnrecorded = errors.New("kvfence: the receiver records no anchor cluster")
)

// ErrRecordLimit means the store holds, or a call would make it hold, more
// state records than Options.MaxRecords lets a writable receiver keep
// fingerprints of; the call wrote nothing.
var ErrRecordLimit = errors.New("kvfence: more state records than Options.MaxRecords")
