package kvfence

import (
	"context"
	"errors"
)

// Remote targets (docs/design.md §4.2): a target whose value lives in
// another system, which the receiver changes by a conditional write after
// the fence decided. The decision and the write cannot share a
// transaction, so the receiver accounts for the write instead: the
// decision commits a dispatching receipt, the write runs with a deadline
// and the object's version as its precondition, and its outcome is
// committed afterwards. A hold is acknowledged only when every dispatch
// of its scope decided before it has settled or been fenced off.
//
// The package links no client of any remote system: an embedder (or the
// CLI) gives a Dispatcher for each remote kind in Options.Dispatchers.
// Package kubetarget is the Kubernetes one.

// TargetKubernetes is a Kubernetes object changed by the receiver with its
// resourceVersion as precondition.
const TargetKubernetes TargetKind = "kubernetes"

// RemoteObject names the object a remote target stands for.
type RemoteObject struct {
	// Group is the object's API group; empty for the core group.
	Group string `cbor:"group"`
	// Version is the group's API version, such as "v1".
	Version string `cbor:"version"`
	// Resource is the plural resource name, such as "configmaps".
	Resource string `cbor:"resource"`
	// Namespace is the object's namespace; empty for a cluster-scoped
	// object.
	Namespace string `cbor:"namespace"`
	// Name is the object's name.
	Name string `cbor:"name"`
}

// Stamp is what the receiver writes on a remote object with every change,
// so that the object itself says which decision changed it last. For a
// Kubernetes object these are the annotations kvfence.dev/scope,
// kvfence.dev/epoch, kvfence.dev/grant and kvfence.dev/receipt.
type Stamp struct {
	// Scope is the scope whose fence decided the change.
	Scope string
	// Epoch is the scope's epoch the change was decided at, or, for a
	// fencing write, the epoch of the hold that made it.
	Epoch uint64
	// Grant is the grant the change was made under; empty for a fencing
	// write.
	Grant string
	// Receipt identifies the dispatch: unique within the receiver and
	// never reused, so that reading it back tells this dispatch's write
	// from any other.
	Receipt string
}

// RemoteState is a remote object as a Dispatcher read or left it.
type RemoteState struct {
	// Version is the object's opaque version (a Kubernetes
	// resourceVersion), which a conditional write names as its
	// precondition.
	Version string
	// UID identifies this incarnation of the object: an object deleted
	// and created again under the same name has another.
	UID string
	// Value is the part of the object the target's value stands for (a
	// ConfigMap's data as canonical JSON), to which a request's JSON
	// Patch applies and which its Set replaces.
	Value []byte
	// Stamp is the receiver's stamp found on the object; zero if none.
	Stamp Stamp
}

// DispatchInput is one decided write, as the Dispatcher is asked to make
// it.
type DispatchInput struct {
	// Object is the object to change.
	Object RemoteObject
	// UID is the incarnation the decision read; the write must not
	// change another.
	UID string
	// Precondition is the version the decision read; the write must
	// fail with ErrRemoteConflict if the object is at any other.
	Precondition string
	// Value is the object's new value.
	Value []byte
	// Stamp is written on the object with the change.
	Stamp Stamp
}

// Dispatcher makes the conditional writes of one kind of remote target.
// Its methods are called outside any transaction of the receiver, each
// with a context whose deadline the receiver committed beforehand; they
// must return by then, and must not retry a write after it.
type Dispatcher interface {
	// Read returns the object's current state, or ErrRemoteNotFound.
	Read(ctx context.Context, obj RemoteObject) (RemoteState, error)
	// Apply writes in.Value and in.Stamp on the object if, and only if,
	// it is still at in.Precondition and in.UID, and returns the state it
	// left. A precondition that failed is ErrRemoteConflict; an object
	// that is gone is ErrRemoteNotFound; any other error leaves the
	// outcome unknown to the receiver.
	Apply(ctx context.Context, in DispatchInput) (RemoteState, error)
	// Fence writes stamp on the object under its current version as
	// precondition, changing its version and nothing else, so that every
	// write still in flight with an older precondition fails. It reads the
	// object first and retries on ErrRemoteConflict until ctx ends, and
	// returns the state it left.
	Fence(ctx context.Context, obj RemoteObject, stamp Stamp) (RemoteState, error)
}

// ValueChecker is implemented by a Dispatcher whose kind holds values of
// one form (kubetarget's: a ConfigMap's data, a JSON object of strings in
// canonical form). Submit calls CheckValue at check 11 on the value a
// request would write, before anything is committed: an error denies the
// request (precondition_failed), and the value returned is the one
// decided, dispatched, digested and compared when a restarted receiver
// resolves the write. Without it a request's value is dispatched as the
// request made it, and a value the object cannot hold, or holds in
// another form, is found only by the write or by the restart.
//
// CheckValue runs inside the write transaction, on an etcd retry again:
// it must be deterministic, fast (it holds up every other write, holds
// included) and leave its input alone (it gets a copy). A panic is a
// refusal.
type ValueChecker interface {
	// CheckValue returns value in the kind's form, or an error saying why
	// the kind cannot hold it.
	CheckValue(value []byte) ([]byte, error)
}

// Errors a Dispatcher returns.
var (
	// ErrRemoteConflict means a conditional write found the object at
	// another version or incarnation than its precondition: nothing was
	// written.
	ErrRemoteConflict = errors.New("kvfence: the remote object is not at the version the write was decided on")
	// ErrRemoteNotFound means the remote object does not exist.
	ErrRemoteNotFound = errors.New("kvfence: the remote object does not exist")
)
