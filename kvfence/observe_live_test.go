package kvfence

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Ensure that ObserveTarget reads a kubernetes target's object through the
// receiver's dispatcher and shows its version, UID, stamp and value; that
// a read that fails, or a receiver without a dispatcher for the kind,
// still shows the stored target with LiveErr saying why (ErrNoDispatcher
// for the latter); that Targets names the object and UID as Target does;
// and that an internal target is shown without a read.
func TestObserveTargetLive(t *testing.T) {
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, engines[0].new(t), obj, time.Second)
	obj.set(func(o *fakeObject) { o.version, o.stamp = 5, Stamp{Receipt: "d-9"} })
	lt, err := f.r.ObserveTarget(f.ctx, remoteTarget)
	if err != nil || lt.Live == nil || lt.LiveErr != nil || lt.Live.Version != "5" || lt.Live.UID != "uid-1" ||
		lt.Live.Stamp.Receipt != "d-9" || string(lt.Value) != fixValue || lt.Object == nil || *lt.Object != testObject {
		t.Fatalf("ObserveTarget: %+v live %+v %v", lt, lt.Live, err)
	}
	ts, err := f.r.Targets(fixScope)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range ts {
		if tg.Name == remoteTarget && (tg.Object == nil || *tg.Object != testObject || tg.UID != "uid-1") {
			t.Fatalf("Targets: %+v", tg)
		}
	}
	obj.set(func(o *fakeObject) { o.readErr = errors.New("apiserver unreachable") })
	lt, err = f.r.ObserveTarget(f.ctx, remoteTarget)
	if err != nil || lt.Live != nil || lt.LiveErr == nil || !strings.Contains(lt.LiveErr.Error(), "apiserver unreachable") || len(lt.Value) != 0 {
		t.Fatalf("ObserveTarget with the object unreadable: %+v %v", lt, err)
	}
	in, err := f.r.ObserveTarget(f.ctx, fixTarget)
	if err != nil || in.Live != nil || in.LiveErr != nil || in.Kind != TargetInternal {
		t.Fatalf("ObserveTarget of an internal target: %+v %v", in, err)
	}
	f.dispatchers = nil
	f.reopen()
	lt, err = f.r.ObserveTarget(f.ctx, remoteTarget)
	if err != nil || lt.Live != nil || !errors.Is(lt.LiveErr, ErrNoDispatcher) || lt.Object == nil {
		t.Fatalf("ObserveTarget without a dispatcher: %+v %v", lt, err)
	}
	if _, err := f.r.ObserveTarget(f.ctx, "nope"); !errors.Is(err, ErrUnknownTarget) {
		t.Fatalf("an unknown target: %v", err)
	}
}

// Ensure that ParseObject reads RESOURCE/NAMESPACE/NAME as a core v1
// object and refuses, wrapping ErrInvalidArgument, any other shape and
// any part the receiver would not record.
func TestParseObject(t *testing.T) {
	got, err := ParseObject("configmaps/prod/backup-policy")
	if err != nil || got != (RemoteObject{Version: "v1", Resource: "configmaps", Namespace: "prod", Name: "backup-policy"}) {
		t.Fatalf("ParseObject: %+v %v", got, err)
	}
	for _, tc := range []struct{ name, in string }{
		{"two parts", "configmaps/backup-policy"},
		{"four parts", "apps/v1/deployments/prod"},
		{"empty namespace", "configmaps//p"},
		{"empty name", "configmaps/prod/"},
		{"empty", ""},
		{"a NUL", "configmaps/prod/a\x00"},
		{"too long", "configmaps/prod/" + strings.Repeat("a", 600)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseObject(tc.in); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("ParseObject(%q): %v, want ErrInvalidArgument", tc.in, err)
			}
		})
	}
}
