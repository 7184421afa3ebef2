package kvfence

import (
	"context"
	"fmt"
	"strings"
)

// LiveTarget is a target as ObserveTarget shows it: the stored target and,
// for a remote target, its object as read now.
type LiveTarget struct {
	// Target is the target as Receiver.Target returns it, except that a
	// remote target whose object was read has the object's value as
	// Value.
	Target
	// Live is the remote object as read now: its version (a Kubernetes
	// resourceVersion), its UID and the receiver's stamp found on it. Nil
	// for a target that is not remote, or whose object was not read.
	Live *RemoteState
	// LiveErr says why a remote target's object was not read: it wraps
	// ErrNoDispatcher when the receiver has no dispatcher for the kind,
	// and the dispatcher's error otherwise. Nil when Live is set or the
	// target is not remote.
	LiveErr error
}

// ObserveTarget returns the target named name, or ErrUnknownTarget, and
// for a target of kind kubernetes reads its object through the kind's
// dispatcher, bounded by ten seconds and the receiver's dispatch timeout.
// A read that fails is not the call's error: the stored target is still
// returned, with LiveErr saying why the object is not shown.
func (r *Receiver) ObserveTarget(ctx context.Context, name string) (LiveTarget, error) {
	t, err := r.Target(name)
	if err != nil {
		return LiveTarget{}, err
	}
	out := LiveTarget{Target: t}
	if t.Object == nil {
		return out, nil
	}
	d := r.opts.Dispatchers[t.Kind]
	if d == nil {
		out.LiveErr = fmt.Errorf("%w: kind %s (the receiver reads the object through its own identity)", ErrNoDispatcher, t.Kind)
		return out, nil
	}
	rctx, cancel := context.WithTimeout(ctx, min(remoteReadTimeout, r.opts.DispatchTimeout))
	defer cancel()
	st, err := d.Read(rctx, *t.Object)
	if err != nil {
		out.LiveErr = fmt.Errorf("kvfence: reading %s: %w", t.Object, err)
		return out, nil
	}
	if len(st.Value) > MaxTargetValueSize {
		out.LiveErr = fmt.Errorf("%w: %s: value is %d bytes, over the %d-byte limit", ErrInvalidArgument, t.Object, len(st.Value), MaxTargetValueSize)
		return out, nil
	}
	out.Value = append([]byte{}, st.Value...)
	out.Live = &st
	return out, nil
}

// maxObjectName bounds the text ParseObject reads.
const maxObjectName = 512

// ParseObject reads an object named RESOURCE/NAMESPACE/NAME of the core
// API group's v1, such as configmaps/prod/backup-policy: the objects a
// target of kind kubernetes stands for, as the CLI's --object and the
// served API's object name them. Each part must be one the receiver
// records; anything else wraps ErrInvalidArgument.
func ParseObject(s string) (RemoteObject, error) {
	if len(s) > maxObjectName {
		return RemoteObject{}, fmt.Errorf("%w: object is %d bytes, over %d", ErrInvalidArgument, len(s), maxObjectName)
	}
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return RemoteObject{}, fmt.Errorf("%w: object %q is not RESOURCE/NAMESPACE/NAME, such as configmaps/prod/backup-policy", ErrInvalidArgument, clip(s, 64))
	}
	obj := RemoteObject{Version: "v1", Resource: parts[0], Namespace: parts[1], Name: parts[2]}
	if err := obj.check(); err != nil {
		return RemoteObject{}, fmt.Errorf("%w: object %q: %v", ErrInvalidArgument, clip(s, 64), err)
	}
	return obj, nil
}
