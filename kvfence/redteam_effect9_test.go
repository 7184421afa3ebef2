package kvfence

import (
	"errors"
	"testing"
)

// Attack: an app record edited in the store under the running receiver,
// read by the embedder through AppGet. AppGet is documented as an
// unchecked read of the store as it is, like Target: it returns the edited
// bytes. What the fence decides on is checked: the next effect that reads
// the record refuses it (ErrStateMismatch) and nothing is written.
func TestRedteamEffect_AppGetOfEditedRecord(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := rtFixture(t, s, []string{effBucket}, rtCounter)
		a := f.effWorker("worker-a", "a1", `{"v":1}`)
		if res := f.submit(a.name, a.envelope); res.Outcome != Applied {
			t.Fatalf("submit = %+v", res)
		}
		key := string(appKey(effBucket, []byte("count")))
		storePut(t, f, bucketApp, key, []byte("100"))
		v, err := f.r.AppGet(effBucket, []byte("count"))
		if err != nil || string(v) != "100" {
			t.Errorf("AppGet = %q, %v; want the store's bytes, unchecked, as its doc says", v, err)
		}
		b := f.effWorker("worker-b", "b1", `{"v":2}`)
		head := f.r.Head()
		res, err := f.r.Submit(f.ctx, b.name, b.envelope)
		if !errors.Is(err, ErrStateMismatch) {
			t.Errorf("a submit whose effect reads the edited record = %+v, %v; want ErrStateMismatch", res, err)
		}
		if f.r.Head() != head {
			t.Errorf("something was written on an edited record")
		}
		storePut(t, f, bucketApp, key, []byte("1"))
	})
}
