package kvfence

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// checkingObject is a fake object whose dispatcher checks values.
type checkingObject struct {
	*fakeObject
	check func([]byte) ([]byte, error)
}

func (c checkingObject) CheckValue(v []byte) ([]byte, error) { return c.check(v) }

// Ensure that a dispatcher's ValueChecker decides the value a remote write
// carries: a value it rewrites is dispatched (and lands) in its form, and
// one it refuses is denied precondition_failed before anything is
// committed or dispatched. Without the check the non-canonical Set lands
// as sent, and the refused one is dispatched.
func TestDispatchValueChecker(t *testing.T) {
	compact := func(v []byte) ([]byte, error) {
		var b bytes.Buffer
		if err := json.Compact(&b, v); err != nil {
			return nil, err
		}
		if bytes.Contains(b.Bytes(), []byte(`"bad"`)) {
			return nil, errors.New("a value of bad")
		}
		return b.Bytes(), nil
	}
	for _, tc := range []struct {
		name, set, want string
		denied          bool
	}{
		{"rewritten to the kind's form", `{ "data": {"retention_days": "45"} }`, fixAfter, false},
		{"refused", `{"data":{"retention_days":"bad"}}`, fixValue, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := newFakeObject(fixValue)
			f := newRemoteFixture(t, engines[0].new(t), obj, time.Second)
			f.dispatchers = map[TargetKind]Dispatcher{TargetKubernetes: checkingObject{obj, compact}}
			f.reopen()
			set := []byte(tc.set)
			w := f.activate("worker-a", "claim-1", f.request(&Request{V: 1, Action: "set", Target: remoteTarget, Set: &set}))
			res := f.submit("worker-a", w.envelope)
			st, _, applies := obj.snapshot()
			if tc.denied {
				wantDenied(t, res, ReasonPreconditionFailed)
				if applies != 0 || string(st.Value) != fixValue {
					t.Fatalf("a refused value was dispatched: %d applies, object %s", applies, st.Value)
				}
				if _, err := f.r.Receipt(fixScope, "set"); !errors.Is(err, ErrNotFound) {
					t.Fatalf("the denial left a receipt: %v", err)
				}
				return
			}
			if res.Outcome != Applied || string(st.Value) != tc.want {
				t.Fatalf("result %s (%s), object %s; want applied, %s", res.Outcome, res.Detail, st.Value, tc.want)
			}
		})
	}
}
