package kvfence

import (
	"testing"
	"time"
)

// Ensure that SubmitAll with no envelopes returns none and leaves the
// receiver writable: it queues nothing, so it must not take the commit
// queue's lead, which no call would then run or hand on, and every later
// write would wait for it forever.
func TestSubmitAll_Empty(t *testing.T) {
	f := gcFixture(t, gcSeed)
	a, _ := twoWorkers(t, f)
	for _, envs := range [][][]byte{nil, {}} {
		res, errs := f.r.SubmitAll(f.ctx, "worker-a", envs)
		if len(res) != 0 || len(errs) != 0 {
			t.Fatalf("SubmitAll of %d envelopes: %d results, %d errors", len(envs), len(res), len(errs))
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.r.Submit(f.ctx, "worker-a", a.envelope)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		// The Submit is still queued; the receiver cannot be closed.
		t.Fatal("a Submit after an empty SubmitAll is still waiting after 10 s: the commit queue is wedged")
	}
}
