package kvfence

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"
)

// Ensure that, on every engine, a value a ValueChecker rewrote is the one
// the audit chain records: every entry of the remote target that carries a
// value digest (the dispatching decision and its settling) names the
// SHA-256 of the bytes that landed on the object (the target's creation,
// which records the value read then, is not one), not of the request's
// own bytes.
func TestDispatchValueCheckerDigest(t *testing.T) {
	compact := func(v []byte) ([]byte, error) {
		var b bytes.Buffer
		err := json.Compact(&b, v)
		return b.Bytes(), err
	}
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			obj := newFakeObject(fixValue)
			f := newRemoteFixture(t, eng.new(t), obj, time.Second)
			f.dispatchers = map[TargetKind]Dispatcher{TargetKubernetes: checkingObject{obj, compact}}
			f.reopen()
			set := []byte(`{ "data": {"retention_days": "45"} }`)
			w := f.activate("worker-a", "claim-1", f.request(&Request{V: 1, Action: "set", Target: remoteTarget, Set: &set}))
			if res := f.submit("worker-a", w.envelope); res.Outcome != Applied {
				t.Fatalf("result %s (%s)", res.Outcome, res.Detail)
			}
			st, _, _ := obj.snapshot()
			landed := sha256.Sum256(st.Value)
			asSent := sha256.Sum256(set)
			digests := 0
			if err := f.r.Events(0, func(e Event) bool {
				if e.Target != remoteTarget || e.ValueSHA256 == nil || e.Outcome == "" {
					return true
				}
				digests++
				if !bytes.Equal(e.ValueSHA256, landed[:]) {
					t.Errorf("entry %d (%s) names value %x; the object holds %s (%x); as sent %x", e.Seq, e.Outcome,
						e.ValueSHA256, st.Value, landed, asSent)
				}
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if digests == 0 {
				t.Fatal("no audit entry of the remote target names a value digest")
			}
		})
	}
}
