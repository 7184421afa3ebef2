package kvfence

import (
	"errors"
	"testing"
	"time"
)

// Ensure that a dispatcher's ValueChecker that panics denies the request
// (precondition_failed, as an effect's panic does) and dispatches nothing,
// rather than failing the write transaction it runs in: recovered there,
// the panic is reported as ErrBadFormat, a database in a bad format, which
// an operator reads as corruption, and the worker gets no decision. The
// receiver goes on to answer a hold.
func TestDispatchValueCheckerPanics(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			obj := newFakeObject(fixValue)
			f := newRemoteFixture(t, eng.new(t), obj, time.Second)
			f.dispatchers = map[TargetKind]Dispatcher{TargetKubernetes: checkingObject{obj, func([]byte) ([]byte, error) {
				panic("value checker bug")
			}}}
			f.reopen()
			set := []byte(`{"data":{"retention_days":"45"}}`)
			w := f.activate("worker-a", "claim-1", f.request(&Request{V: 1, Action: "set", Target: remoteTarget, Set: &set}))
			res, err := f.r.Submit(f.ctx, "worker-a", w.envelope)
			if errors.Is(err, ErrBadFormat) {
				t.Fatalf("a panicking ValueChecker was reported as a database in a bad format: %v", err)
			}
			if err != nil {
				t.Fatalf("Submit: %v", err)
			}
			wantDenied(t, res, ReasonPreconditionFailed)
			if _, _, applies := obj.snapshot(); applies != 0 {
				t.Fatalf("%d applies after a panicking value check", applies)
			}
			f.hold("after the panic")
		})
	}
}
