package kvfence

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/kvfence/kvfence/audit"

	"github.com/kvfence/kvfence/internal/defect"
)

// Attack 7 (identity confusion): hand-made inputs aimed at the
// hand-written decoders: non-shortest heads, huge lengths, invalid UTF-8,
// duplicate and reordered keys, integer overflow at the int64 edge, null
// optionals. For each, the fast path must either decline or give exactly
// the reflection decoder's value (checkWireDecode / checkRecordDecode).
func TestAttack7_FastDecodeAdversarial(t *testing.T) {
	env := func(executor string) []byte {
		b, _ := encodeFast(&Envelope{V: 1, Claim: "c", Epoch: 1, Grant: "g", Scope: "s", Request: []byte{0xa0}, Executor: executor})
		return b
	}
	base := env("worker-a")
	cases := [][]byte{}
	add := func(b []byte) { cases = append(cases, b) }
	add(base)
	// Executor with invalid UTF-8 and with an overlong encoding of '/'.
	add(env("worker-\xff"))
	add(env("worker-\xc0\xaf"))
	// Non-shortest head for the executor text (0x68 "worker-a" -> 0x78 08).
	i := len(base) - 9
	ns := append(append(append([]byte{}, base[:i]...), 0x78, 0x08), base[i+1:]...)
	add(ns)
	// Huge lengths on the executor string.
	for _, h := range [][]byte{{0x7b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, {0x7b, 0x80, 0, 0, 0, 0, 0, 0, 8}, {0x7a, 0xff, 0xff, 0xff, 0xff}} {
		add(append(append(append([]byte{}, base[:i]...), h...), base[i+1:]...))
	}
	// Duplicate executor key appended, with the map count raised.
	dup := append([]byte{0xa8}, base[1:]...)
	dup = append(dup, append([]byte(kExecutor), 0x68)...)
	dup = append(dup, "worker-b"...)
	add(dup)
	// Map count 2^64-1.
	add(append([]byte{0xbb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, base[1:]...))
	for _, b := range cases {
		checkWireDecode(t, 0, b)
	}

	// Records: int64 edges, a denials map with an invalid-UTF-8 key,
	// duplicate denial keys spelt with non-shortest heads.
	ctl := &controlRecord{Mode: ModeOpen, Epoch: 3, CreatedAt: -1 << 63, ActiveGrant: "g1",
		Denials: map[Reason]uint64{ReasonStaleEpoch: 5, "x": 1}}
	raw, _ := encodeFast(ctl)
	recs := [][]byte{raw}
	for _, m := range mutations(raw, 2000) {
		recs = append(recs, m)
	}
	for _, b := range recs {
		checkRecordDecode(t, 0, b)
	}
	g := &grantRecord{ID: "g1", Claim: "c", Epoch: 1, Scope: "s", Action: "a", Executor: "worker-a", NotAfter: 1<<63 - 1, NotBefore: -1 << 63, RequestSHA256: []byte{}}
	rawG, _ := encodeFast(g)
	for _, b := range append(mutations(rawG, 3000), rawG) {
		checkRecordDecode(t, 1, b)
	}
}

// Attack 7 (stale grant + fault): the hold's anchor write fails after the
// anchor file took it (ErrNotAcknowledged for the hold, which committed).
// With the anchor write now overlapping the next batch, the superseded
// worker's envelope submitted right after must still be denied, and the
// store must reopen and verify.
func TestAttack7_HoldWithFailedAnchorStillFencesStale(t *testing.T) {
	for _, after := range []bool{false, true} {
		f := newFixture(t, defect.Variant{})
		w := f.activate("worker-a", "claim-1", f.patchRequest("act"))
		fa := &faultyAnchor{AnchorStore: f.anchor, after: after, fails: 1}
		f.r.Close()
		r, err := Open(f.path, &Options{Now: f.clock.Now, Key: testKey, Anchor: fa})
		if err != nil {
			t.Fatal(err)
		}
		f.r, f.admin = r, r.Admin()
		_, err = f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "stop"})
		if !errors.Is(err, ErrNotAcknowledged) {
			t.Fatalf("hold with failing anchor: %v", err)
		}
		res, err := f.r.Submit(f.ctx, "worker-a", w.envelope)
		if err == nil && res.Outcome != Denied {
			t.Fatalf("after=%v: stale worker's envelope after a committed hold: %+v", after, res)
		}
		f.reopen()
		res, err = f.r.Submit(f.ctx, "worker-a", w.envelope)
		if err == nil && res.Outcome != Denied {
			t.Fatalf("after=%v: after reopen, stale worker applied: %+v", after, res)
		}
		m := replayChain(t, f.r)
		checkState(t, f.r, m)
	}
}

// Attack 7 (stale grant under load): a superseded worker floods Submit
// from many goroutines, so that batches overlap their anchor writes with
// the next batch's transaction, while an admin holds the scope or
// re-activates it for another worker. No Applied result may carry an
// audit seq after the hold's or the new activation's, and nothing started
// after the admin call returned may be applied.
func TestAttack7_FloodDuringHoldAndReactivation(t *testing.T) {
	for round := 0; round < 8; round++ {
		f := newFixture(t, defect.Variant{})
		a := f.activate("worker-a", "claim-a", f.patchRequest("act-a"))
		stop := make(chan struct{})
		type rec struct {
			res     Result
			err     error
			started bool // started after the admin call returned
		}
		results := make(chan rec, 1<<16)
		var adminDone = make(chan struct{})
		done := make(chan struct{})
		const workers = 12
		for i := 0; i < workers; i++ {
			go func() {
				defer func() { done <- struct{}{} }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					after := false
					select {
					case <-adminDone:
						after = true
					default:
					}
					res, err := f.r.Submit(f.ctx, "worker-a", a.envelope)
					results <- rec{res, err, after}
				}
			}()
		}
		h, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "flood"})
		if err != nil {
			close(stop)
			t.Fatal(err)
		}
		fence := h.AuditSeq
		if round%2 == 1 {
			// Re-activation for another worker: A must stay fenced.
			if _, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: fixScope, Executor: "worker-b", Claim: "claim-b",
				Request: f.patchRequest("act-b"), Decision: "change-9"}); err != nil {
				close(stop)
				t.Fatal(err)
			}
		}
		close(adminDone)
		// Let the flood run on past the admin call.
		for n := 0; n < 200; n++ {
			<-results
		}
		close(stop)
		for i := 0; i < workers; i++ {
			<-done
		}
		close(results)
		for r := range results {
			if r.err != nil {
				continue
			}
			if r.res.Outcome == Applied && r.res.AuditSeq > fence {
				t.Fatalf("round %d: stale worker applied at seq %d after the fence at %d", round, r.res.AuditSeq, fence)
			}
			if r.started && r.res.Outcome == Applied {
				t.Fatalf("round %d: a submit started after the admin call returned was applied: %+v", round, r.res)
			}
		}
		f.reopen()
		checkState(t, f.r, replayChain(t, f.r))
	}
}

// flakyAnchor fails every third Store, alternately before and after the
// write took effect. Safe for concurrent use.
type flakyAnchor struct {
	audit.AnchorStore
	mu sync.Mutex
	n  int
}

func (a *flakyAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	a.mu.Lock()
	a.n++
	n := a.n
	a.mu.Unlock()
	if n%3 != 0 {
		return a.AnchorStore.Store(old, next)
	}
	if n%2 == 0 {
		if err := a.AnchorStore.Store(old, next); err != nil {
			return err
		}
	}
	return &os.PathError{Op: "sync", Path: "anchor", Err: syscall.EIO}
}

// Attack 7 (fault into yes): with anchor writes overlapping the next
// batch and failing now and then, every decision returned without an
// error must be covered by the anchor by the time its caller sees it.
func TestAttack7_AckedMeansAnchoredUnderFlakyAnchor(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-a", f.patchRequest("act-a"))
	fa := &flakyAnchor{AnchorStore: f.anchor}
	f.r.Close()
	r, err := Open(f.path, &Options{Now: f.clock.Now, Key: testKey, Anchor: fa})
	if err != nil {
		t.Fatal(err)
	}
	f.r, f.admin = r, r.Admin()
	stale := f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: a.grant.Epoch + 7, Grant: a.grant.ID,
		Executor: "worker-a", Claim: "claim-a", Request: f.patchRequest("act-a")})
	var wg sync.WaitGroup
	var bad atomic.Value
	var acked, unacked atomic.Int64
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 60; j++ {
				env := stale
				if j%10 == 0 {
					env = a.envelope
				}
				res, err := f.r.Submit(f.ctx, "worker-a", env)
				if err != nil {
					unacked.Add(1)
					continue
				}
				acked.Add(1)
				got, lerr := f.anchor.Load()
				if lerr != nil || got.Seq < res.AuditSeq {
					bad.Store(fmt.Sprintf("acknowledged %s at seq %d, anchor at %d (%v)", res.Outcome, res.AuditSeq, got.Seq, lerr))
				}
			}
		}()
	}
	for k := 0; k < 5; k++ {
		h, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "x"})
		if err == nil {
			if got, _ := f.anchor.Load(); got.Seq < h.AuditSeq {
				bad.Store(fmt.Sprintf("hold acknowledged at %d, anchor at %d", h.AuditSeq, got.Seq))
			}
		}
	}
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	t.Logf("acked %d, not acknowledged %d", acked.Load(), unacked.Load())
	f.reopen()
	checkState(t, f.r, replayChain(t, f.r))
}
