package kvfence

import (
	"errors"
	"fmt"
	"time"
)

// DispatchState is where a write to a remote target stands, as its
// receipt records it (docs/design.md §4.2).
type DispatchState string

// The states of a dispatch. Every state but DispatchDispatching is final.
const (
	// DispatchDispatching means the decision committed and the write may
	// be in flight.
	DispatchDispatching DispatchState = "dispatching"
	// DispatchApplied means the object took the write; the receipt's
	// Version is the version it left.
	DispatchApplied DispatchState = "applied"
	// DispatchConflict means the object was no longer at the version the
	// decision read: nothing was written.
	DispatchConflict DispatchState = "conflict"
	// DispatchFailed means the object refused the write or no longer
	// exists: nothing was written.
	DispatchFailed DispatchState = "failed"
	// DispatchCancelled means a hold of the scope committed before the
	// write started, so it never started.
	DispatchCancelled DispatchState = "cancelled"
	// DispatchUnknown means the write's deadline passed without an answer
	// the receiver could trust: it may have landed. The object was fenced
	// afterwards, and the dispatch is an outstanding effect.
	DispatchUnknown DispatchState = "unknown"
)

// Submit's outcomes for a write to a remote target, besides Applied and
// AlreadyApplied.
const (
	// Dispatching answers a repeat of an envelope whose write is in
	// flight: the receiver never dispatches an action twice.
	Dispatching Outcome = "dispatching"
	// NotApplied means the decision passed every check but the remote
	// write did not happen (Result.Dispatch says why: conflict, failed or
	// cancelled). The action's receipt records it; the action is spent.
	NotApplied Outcome = "not_applied"
	// OutcomeUnknown means the remote write may or may not have landed;
	// the object was fenced off at the write's deadline.
	OutcomeUnknown Outcome = "unknown"
)

// KindDispatch is the audit entry kind of a dispatch's outcome: its
// outcome field is the final DispatchState. The decision itself is a
// submit entry with outcome dispatching.
const KindDispatch = "dispatch"

// OutstandingDispatch is a write to a remote target whose outcome is
// unknown: a hold lists it so that containment can check the object.
type OutstandingDispatch struct {
	// Scope, Action and Grant are the decision's.
	Scope string
	// Action is the action the write was decided for.
	Action string
	// Grant is the grant the write was decided under.
	Grant string
	// Target is the target written.
	Target string
	// Object is the remote object.
	Object RemoteObject
	// DispatchID is the receipt stamp the write would have left.
	DispatchID string
	// Precondition is the version the write was conditioned on.
	Precondition string
	// Version is the object's version after the fencing write.
	Version string
	// AuditSeq is the seq of the decision's audit entry.
	AuditSeq uint64
}

// Dispatch timeouts.
const (
	// DefaultDispatchTimeout is Options.DispatchTimeout's default.
	DefaultDispatchTimeout = 10 * time.Second
	// MaxDispatchTimeout bounds Options.DispatchTimeout: a hold waits up
	// to this long for a write in flight before it fences the object.
	MaxDispatchTimeout = 5 * time.Minute
	// remoteReadTimeout bounds the read of an object before a decision.
	remoteReadTimeout = 10 * time.Second
)

// Errors of remote targets.
var (
	// ErrNoDispatcher means a remote kind's work needs a Dispatcher that
	// Options.Dispatchers does not give.
	ErrNoDispatcher = errors.New("kvfence: no dispatcher for the target's kind")
	// ErrHoldNotSettled means a hold committed (no stale write can be
	// decided any more) but is not acknowledged: a write decided before
	// it had not settled and could not be fenced before the hold's
	// context ended. A repeat of the hold with the same HoldRequest.ID
	// finishes the wait.
	ErrHoldNotSettled = errors.New("kvfence: the hold committed but is not acknowledged: a remote write decided before it has not settled")
)

// isRemote reports whether the receipt is a remote target's.
func (rc *receiptRecord) isRemote() bool {
	return rc.Dispatch != "" || rc.DispatchID != "" || rc.Epoch != 0 || rc.Precondition != "" || rc.UID != "" ||
		rc.Deadline != 0 || rc.ValueSHA256 != nil || rc.Version != ""
}

// maxRemoteID bounds a version, UID or dispatch id kept in a record.
const maxRemoteID = 256

// checkRemoteID checks an opaque identifier a remote system gave.
func checkRemoteID(field, s string) error {
	if err := checkName(field, s); err != nil {
		return err
	}
	if len(s) > maxRemoteID {
		return fmt.Errorf("%s is %d bytes, over the %d-byte limit", field, len(s), maxRemoteID)
	}
	return nil
}

// check refuses an object name this package does not record.
func (o *RemoteObject) check() error {
	for _, f := range []struct{ name, v string }{{"version", o.Version}, {"resource", o.Resource}, {"name", o.Name}} {
		if err := checkRemoteID("object "+f.name, f.v); err != nil {
			return err
		}
	}
	for _, f := range []struct{ name, v string }{{"group", o.Group}, {"namespace", o.Namespace}} {
		if f.v != "" {
			if err := checkRemoteID("object "+f.name, f.v); err != nil {
				return err
			}
		}
	}
	return nil
}

// String names the object as resource/namespace/name (group and version
// first when the group is not the core one).
func (o RemoteObject) String() string {
	s := o.Resource
	if o.Group != "" {
		s = o.Group + "/" + o.Version + "/" + s
	}
	if o.Namespace != "" {
		s += "/" + o.Namespace
	}
	return s + "/" + o.Name
}

// outcomeOf is the Result outcome of a final dispatch state.
func outcomeOf(st DispatchState) Outcome {
	switch st {
	case DispatchApplied:
		return Applied
	case DispatchDispatching:
		return Dispatching
	case DispatchUnknown:
		return OutcomeUnknown
	}
	return NotApplied
}

// validDispatchState reports whether st is a state this package writes.
func validDispatchState(st DispatchState) bool {
	switch st {
	case DispatchDispatching, DispatchApplied, DispatchConflict, DispatchFailed, DispatchCancelled, DispatchUnknown:
		return true
	}
	return false
}

// checkDispatchOptions fills in and checks the dispatch options.
func checkDispatchOptions(o *Options) error {
	switch {
	case o.DispatchTimeout == 0:
		o.DispatchTimeout = DefaultDispatchTimeout
	case o.DispatchTimeout < 0 || o.DispatchTimeout > MaxDispatchTimeout:
		return fmt.Errorf("%w: dispatch timeout %v (1ns to %v)", ErrInvalidArgument, o.DispatchTimeout, MaxDispatchTimeout)
	}
	if len(o.Dispatchers) == 0 {
		return nil
	}
	m := make(map[TargetKind]Dispatcher, len(o.Dispatchers))
	for k, d := range o.Dispatchers {
		if k != TargetKubernetes {
			return fmt.Errorf("%w: a dispatcher is given for kind %q; only %s is remote", ErrInvalidArgument, clip(string(k), 32), TargetKubernetes)
		}
		if d == nil {
			return fmt.Errorf("%w: the dispatcher for kind %s is nil", ErrInvalidArgument, k)
		}
		m[k] = d
	}
	o.Dispatchers = m
	return nil
}
