package kvfence

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Ensure that every fencing stamp the receiver leaves on an object is one
// its audit chain records, even when two paths fence the same dispatch:
// the hold fences a write held past its deadline and records it unknown,
// then the write's own call fails without an answer and the dispatch
// fences again, finding the receipt settled. Both fences' ids are in the
// chain, and the receipt keeps the outcome recorded first.
func TestDispatchEveryFenceAudited(t *testing.T) {
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, engines[0].new(t), obj, 150*time.Millisecond)
	w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
	release, started := make(chan struct{}), make(chan struct{}, 1)
	// The call is held past its deadline, then fails without an answer
	// (the fake checks failApply after the block).
	obj.set(func(o *fakeObject) {
		o.block, o.ignoreCtx, o.started, o.failApply = release, true, started, errors.New("connection reset")
	})
	sub := make(chan Result, 1)
	go func() { sub <- f.submit("worker-a", w.envelope) }()
	<-started
	h := <-f.holdAsync(f.ctx, "h1")
	if h.err != nil || len(h.res.Outstanding) != 1 {
		t.Fatalf("Hold: %+v %v", h.res, h.err)
	}
	// The dispatch fences on its own, after the hold's fence settled it.
	close(release)
	if res := <-sub; res.Dispatch != DispatchUnknown {
		t.Fatalf("submit: %+v", res)
	}
	_, log, _ := obj.snapshot()
	var fences []string
	for _, wr := range log {
		if wr.fence {
			fences = append(fences, wr.stamp.Receipt)
		}
	}
	if len(fences) != 2 {
		t.Fatalf("%d fences written; want 2 (the hold's, the dispatch's): %+v", len(fences), log)
	}
	audited := map[string]bool{}
	if err := f.r.Events(0, func(e Event) bool {
		if e.Kind == KindDispatch {
			if _, fid, ok := strings.Cut(e.Note, "; fence "); ok {
				audited[fid] = true
			}
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for _, fid := range fences {
		if !audited[fid] {
			t.Errorf("fence %s is on the object; the audit chain does not record it (records %v)", fid, audited)
		}
	}
	if rc := f.receiptOf("raise"); rc.Dispatch != DispatchUnknown {
		t.Errorf("receipt %+v; want unknown as the hold recorded it", rc)
	}
	f.reopen()
}
