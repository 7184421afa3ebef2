package kvfence

import (
	"errors"
	"testing"
)

// Attack: the counters and reads around a refusal: a refused write counts
// one precondition_failed denial and no stale rejection; a panic refuses
// the same way; AppGet of a bucket no effect ever wrote is absent, not an
// error; AppGet of a non-app bucket name (a fence bucket) is refused.
func TestRedteamEffect_RefusalCountersAndReads(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := rtFixture(t, s, []string{effBucket}, func(tx EffectTx, in EffectInput) error {
			tx.Put(effBucket, []byte("k"), []byte("v"))
			if in.Action == "p1" {
				panic("boom")
			}
			return errors.New("no")
		})
		if v, err := f.r.AppGet("app_never", []byte("k")); v != nil || err != nil {
			t.Errorf("AppGet of a bucket never written = %q, %v", v, err)
		}
		for _, name := range []string{"targets", "effects", "app", "app_a/b", "app_a\x00"} {
			if _, err := f.r.AppGet(name, []byte("k")); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("AppGet(%q) = %v, want ErrInvalidArgument", name, err)
			}
		}
		before, err := f.r.Status(fixScope)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{"r1", "p1"} {
			w := f.effWorker("w-"+a, a, `{}`)
			res := f.submit(w.name, w.envelope)
			wantDenied(t, res, ReasonPreconditionFailed)
			if a == "p1" && res.Detail != "effect refused: panicked: boom" {
				t.Errorf("detail %q", res.Detail)
			}
		}
		st, err := f.r.Status(fixScope)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Denials[ReasonPreconditionFailed] - before.Denials[ReasonPreconditionFailed]; got != 2 {
			t.Errorf("precondition_failed denials %d, want 2", got)
		}
		if st.StaleRejections != before.StaleRejections {
			t.Errorf("stale rejections moved from %d to %d", before.StaleRejections, st.StaleRejections)
		}
		if v, err := f.r.AppGet(effBucket, []byte("k")); v != nil || err != nil {
			t.Errorf("app record after refusals = %q, %v", v, err)
		}
	})
}
