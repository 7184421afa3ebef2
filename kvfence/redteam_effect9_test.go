package kvfence

import (
	"testing"
)

// Attack: an app record edited in the store under the running receiver,
// read by the embedder through AppGet, the read the README gives for its
// records. An effect's read of it is refused (ErrStateMismatch); AppGet
// hands the forged bytes over as the committed effects' record.
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
		if err == nil {
			t.Errorf("AppGet of an app record edited under the running receiver = %q, nil error; an effect's read of it is ErrStateMismatch", v)
		}
		storePut(t, f, bucketApp, key, []byte("1"))
	})
}
