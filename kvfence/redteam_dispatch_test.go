package kvfence

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/defect"
)

// Red-team tests of the remote-target dispatch accounting (§4.2).

// rtWait fails the test unless ch delivers within d.
func rtWait[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
	var zero T
	return zero
}

// Attack: the receiver's clock steps back (NTP correction) between the
// decision and the write. The stored deadline is now + DispatchTimeout on
// the clock before the step; realDeadline turns it into "time left on the
// clock after the step", an hour more. The write's context, the worker's
// Submit and a hold's wait all run an hour past DispatchTimeout, and past
// MaxDispatchTimeout, which "bounds how long a hold waits for a write in
// flight before it fences the object".
func TestRedteamDispatch_ClockBackStretchesDeadline(t *testing.T) {
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, engines[0].new(t), obj, 200*time.Millisecond)
	w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
	release, started := make(chan struct{}), make(chan struct{}, 1)
	obj.set(func(o *fakeObject) { o.block, o.started = release, started })
	var once sync.Once
	f.r.faults.beforeGate = func(string) { once.Do(func() { f.clock.Add(-time.Hour) }) }
	sub := make(chan Result, 1)
	go func() { res, _ := f.r.Submit(f.ctx, "worker-a", w.envelope); sub <- res }()
	<-started
	held := f.holdAsync(f.ctx, "")
	select {
	case h := <-held:
		close(release)
		<-sub
		if h.err != nil {
			t.Fatalf("Hold: %v", h.err)
		}
	case <-time.After(3 * time.Second):
		close(release)
		res := <-sub
		<-held
		t.Fatalf("with DispatchTimeout 200ms the hold was still waiting after 3s: the clock stepped back an hour after the decision stretched the write's deadline (write released by the test: %s)", res.Dispatch)
	}
}

// Attack: a forged stamp that names the real dispatch id. The id is no
// secret: a repeat of the envelope while the write is in flight returns it
// to the worker (Result.DispatchID), and the audit note carries it. A
// receiver killed before Apply; meanwhile someone writes another value
// under a stamp with that id. Open resolves by the stamp alone (receipt,
// scope, UID) without comparing the value with the decided value_sha256,
// and records the dispatch applied.
func TestRedteamDispatch_ForgedStampWithLeakedID(t *testing.T) {
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, engines[0].new(t), obj, 300*time.Millisecond)
	w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
	stop, done := make(chan struct{}), make(chan struct{})
	f.r.faults.beforeGate = func(string) { <-stop }
	go func() {
		defer close(done)
		_, _ = f.r.Submit(f.ctx, "worker-a", w.envelope)
	}()
	// The hostile worker races its own dispatch: the repeat tells it the id.
	var id string
	for deadline := time.Now().Add(5 * time.Second); id == ""; {
		if _, err := f.r.Receipt(fixScope, "raise"); err != nil {
			// Not decided yet: a repeat now could be the one decided.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		res, err := f.r.Submit(f.ctx, "worker-a", w.envelope)
		if err == nil && res.Outcome == Dispatching {
			id = res.DispatchID
		}
		if time.Now().After(deadline) {
			t.Fatal("no dispatching repeat")
		}
		time.Sleep(5 * time.Millisecond)
	}
	obj.set(func(o *fakeObject) {
		o.version++
		o.value = []byte(`{"data":{"retention_days":"1"}}`)
		o.stamp = Stamp{Scope: fixScope, Epoch: w.grant.Epoch, Grant: "forged", Receipt: id}
	})
	f.r.Close()
	r, err := f.openStore(f.opts(), defect.Variant{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	f.r, f.admin = r, r.Admin()
	close(stop)
	<-done
	if rc := f.receiptOf("raise"); rc.Dispatch == DispatchApplied {
		st, _, _ := obj.snapshot()
		t.Fatalf("a forged stamp naming the leaked id %s counted as applied (receipt version %s, object value %s, not the decided one)", id, rc.Version, st.Value)
	}
}

// failingFence is the fake object whose Fence fails while failing is set.
type failingFence struct {
	*fakeObject
	failing atomic.Bool
	fences  atomic.Int32
}

func (o *failingFence) Fence(ctx context.Context, obj RemoteObject, stamp Stamp) (RemoteState, error) {
	o.fences.Add(1)
	if o.failing.Load() {
		return RemoteState{}, errors.New("injected: fence refused")
	}
	return o.fakeObject.Fence(ctx, obj, stamp)
}

// Attack: a Fence that fails repeatedly. The write's answer is lost and
// its fence fails: the receipt must stay dispatching (not unknown, since
// nothing stops the write), the hold must not be acknowledged while the
// fence fails, and once it works a repeat of the hold fences and lists the
// write as outstanding; the late write then fails.
func TestRedteamDispatch_FenceFailsRepeatedly(t *testing.T) {
	fo := &failingFence{fakeObject: newFakeObject(fixValue)}
	fo.failing.Store(true)
	f := newFixtureOn(t, engines[0].new(t), defect.Variant{})
	f.dispatchers, f.dispatchTimeout = map[TargetKind]Dispatcher{TargetKubernetes: fo}, 150*time.Millisecond
	f.reopen()
	o := testObject
	if _, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: remoteTarget, Kind: TargetKubernetes, Object: &o}); err != nil {
		t.Fatal(err)
	}
	w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
	fo.set(func(o *fakeObject) { o.failApply = errors.New("connection reset") })
	res := f.submit("worker-a", w.envelope)
	if res.Outcome != OutcomeUnknown || res.Dispatch != DispatchDispatching {
		t.Fatalf("result %s/%s, want unknown/dispatching", res.Outcome, res.Dispatch)
	}
	if rc := f.receiptOf("raise"); rc.Dispatch != DispatchDispatching {
		t.Fatalf("receipt %s with the fence failed", rc.Dispatch)
	}
	if _, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "incident", ID: "h1"}); !errors.Is(err, ErrHoldNotSettled) {
		t.Fatalf("Hold with the fence failing: %v, want ErrHoldNotSettled", err)
	}
	fo.failing.Store(false)
	h, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "incident", ID: "h1"})
	if err != nil || len(h.Outstanding) != 1 {
		t.Fatalf("repeat of the hold: %+v %v", h.Outstanding, err)
	}
	if rc := f.receiptOf("raise"); rc.Dispatch != DispatchUnknown {
		t.Fatalf("receipt %s", rc.Dispatch)
	}
	// The write never landed in this fault; a late write with the old
	// precondition would now conflict.
	st, _, _ := fo.snapshot()
	if st.Version == "1" {
		t.Fatalf("object not fenced: %+v", st)
	}
}

// Attack: two receiver handles in one process on one etcd prefix. A hold
// committed through one handle does not reach the other's gate (the gate
// is per Receiver, as docs/design.md §4.2 says): a write decided by the
// other before the hold may start after the hold committed. What must
// hold across handles, as across processes, is the order against the
// acknowledgment: when the hold returns, the write has settled, and
// nothing of it lands later.
func TestRedteamDispatch_GatePerHandleNotPerProcess(t *testing.T) {
	s := engines[1].new(t)
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, s, obj, 2*time.Second)
	other, err := f.openStore(f.opts(), defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
	var held <-chan holdOutcome
	other.faults.beforeGate = func(string) {
		held = f.holdAsync(f.ctx, "")
		for {
			if st, err := f.r.Status(fixScope); err != nil || st.Mode == ModeHeld {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	res, err := other.Submit(f.ctx, "worker-a", w.envelope)
	if err != nil {
		t.Fatal(err)
	}
	h := rtWait(t, held, 10*time.Second, "Hold")
	if h.err != nil {
		t.Fatalf("Hold: %v", h.err)
	}
	stAck, _, appliesAck := obj.snapshot()
	if rc := f.receiptOf("raise"); rc.Dispatch == DispatchDispatching {
		t.Fatalf("the hold was acknowledged with the other handle's write still dispatching (worker told %s)", res.Dispatch)
	}
	// The cleanup compares f.r's head with the chain, which other wrote.
	other.Close()
	f.reopen()
	if st, _, applies := obj.snapshot(); applies != appliesAck || st.Version != stAck.Version {
		t.Fatalf("the object changed after the hold's acknowledgment: %d Apply call(s) then %d, version %s then %s", appliesAck, applies, stAck.Version, st.Version)
	}
}

// Probe: a hold whose ctx is shorter than the dispatch deadline, then a
// second hold (new id) back to back, then HoldAll: each later one finishes
// the wait, fences at the deadline and lists the write; the late write
// fails.
func TestRedteamDispatch_HoldsBackToBack(t *testing.T) {
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, engines[0].new(t), obj, 300*time.Millisecond)
	w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
	release, started, late := make(chan struct{}), make(chan struct{}, 1), make(chan error, 1)
	obj.set(func(o *fakeObject) { o.block, o.ignoreCtx, o.started, o.lateResult = release, true, started, late })
	sub := make(chan Result, 1)
	go func() { res, _ := f.r.Submit(f.ctx, "worker-a", w.envelope); sub <- res }()
	<-started
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Millisecond)
	h1 := <-f.holdAsync(ctx, "h1")
	cancel()
	if !errors.Is(h1.err, ErrHoldNotSettled) {
		t.Fatalf("h1: %v", h1.err)
	}
	h2 := <-f.holdAsync(f.ctx, "h2")
	if h2.err != nil || len(h2.res.Outstanding) != 1 {
		t.Fatalf("h2: %+v %v", h2.res.Outstanding, h2.err)
	}
	all, err := f.admin.HoldAll(f.ctx, "again")
	if err != nil || len(all.Outstanding) != 1 {
		t.Fatalf("HoldAll: %+v %v", all.Outstanding, err)
	}
	close(release)
	if err := <-late; !errors.Is(err, ErrRemoteConflict) {
		t.Fatalf("late write: %v", err)
	}
	if res := <-sub; res.Outcome != OutcomeUnknown {
		t.Fatalf("worker told %s", res.Outcome)
	}
}

// Probe: a write whose Apply answers success after the hold fenced it
// cannot land (the fake refuses the old precondition), so the worker is
// told unknown, not applied, and the receipt stays unknown.
func TestRedteamDispatch_AnswerAfterAck(t *testing.T) {
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, engines[0].new(t), obj, 200*time.Millisecond)
	w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
	release, started := make(chan struct{}), make(chan struct{}, 1)
	obj.set(func(o *fakeObject) { o.block, o.ignoreCtx, o.started = release, true, started })
	sub := make(chan Result, 1)
	go func() { res, _ := f.r.Submit(f.ctx, "worker-a", w.envelope); sub <- res }()
	<-started
	h := <-f.holdAsync(f.ctx, "")
	if h.err != nil || len(h.Outstanding()) != 1 {
		t.Fatalf("hold %+v %v", h.res.Outstanding, h.err)
	}
	close(release)
	res := <-sub
	if res.Dispatch != DispatchUnknown || f.receiptOf("raise").Dispatch != DispatchUnknown {
		t.Fatalf("result %+v", res)
	}
	// A worker told unknown resubmits: answered from the receipt, no
	// second Apply.
	_, _, n := obj.snapshot()
	rep := f.submit("worker-a", w.envelope)
	if _, _, m := obj.snapshot(); m != n || rep.Outcome != Denied || rep.Reason != ReasonReceiverHeld {
		t.Fatalf("resubmit %s, applies %d -> %d", rep.Outcome, n, m)
	}
}

func (h holdOutcome) Outstanding() []OutstandingDispatch { return h.res.Outstanding }

// Probe: restart with the object still at the precondition version but
// already holding the value the decision wrote (a Set equal to the current
// value): Open must fence and record unknown, not failed.
func TestRedteamDispatch_RestartAtPreconditionWithNewValue(t *testing.T) {
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, engines[0].new(t), obj, 200*time.Millisecond)
	v := []byte(fixValue)
	w := f.activate("worker-a", "claim-1", f.request(&Request{V: 1, Action: "same", Target: remoteTarget, Set: &v}))
	stop, done := make(chan struct{}), make(chan struct{})
	f.r.faults.beforeGate = func(string) { <-stop }
	go func() { defer close(done); _, _ = f.r.Submit(f.ctx, "worker-a", w.envelope) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := f.r.Receipt(fixScope, "same"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no receipt")
		}
	}
	f.r.Close()
	r, err := f.openStore(f.opts(), defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	f.r, f.admin = r, r.Admin()
	close(stop)
	<-done
	if rc := f.receiptOf("same"); rc.Dispatch != DispatchUnknown {
		t.Fatalf("resolved %s, want unknown", rc.Dispatch)
	}
}

// landingFence is the fake object on which a write lands just before the
// next fence: the in-flight write of a process with a longer deadline,
// between Open's read and its fence.
type landingFence struct {
	*fakeObject
	land func(o *fakeObject)
}

func (o *landingFence) Fence(ctx context.Context, obj RemoteObject, stamp Stamp) (RemoteState, error) {
	if o.land != nil {
		o.set(o.land)
		o.land = nil
	}
	return o.fakeObject.Fence(ctx, obj, stamp)
}

// Attack: Open finds the object at the precondition, and the write lands
// between its read and its fence; Open then tells applied from not by
// comparing the fenced value's SHA-256 with the decided value's. The
// decided value is the request's bytes, but the object reads back its own
// canonical form (kubetarget.Read: RFC 8785; a Set with a space, or a
// patch that adds a key out of order or with an escaped string, differs):
// the landed write is recorded failed, "nothing was written", the worker
// is told not_applied and no hold lists it as outstanding.
func TestRedteamDispatch_OpenRaceNonCanonicalValue(t *testing.T) {
	lf := &landingFence{fakeObject: newFakeObject(fixValue)}
	f := newFixtureOn(t, engines[0].new(t), defect.Variant{})
	f.dispatchers, f.dispatchTimeout = map[TargetKind]Dispatcher{TargetKubernetes: lf}, 200*time.Millisecond
	f.reopen()
	o := testObject
	if _, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: remoteTarget, Kind: TargetKubernetes, Object: &o}); err != nil {
		t.Fatal(err)
	}
	set := []byte(`{"data": {"retention_days": "45"}}`) // valid, not canonical
	w := f.activate("worker-a", "claim-1", f.request(&Request{V: 1, Action: "raise", Target: remoteTarget, Set: &set}))
	stop, done := make(chan struct{}), make(chan struct{})
	f.r.faults.beforeGate = func(string) { <-stop }
	go func() { defer close(done); _, _ = f.r.Submit(f.ctx, "worker-a", w.envelope) }()
	var rc Receipt
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var err error
		if rc, err = f.r.Receipt(fixScope, "raise"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no receipt")
		}
	}
	lf.land = func(o *fakeObject) {
		o.version++
		o.value = []byte(fixAfter) // as the API server reads it back
		o.stamp = Stamp{Scope: fixScope, Epoch: w.grant.Epoch, Grant: w.grant.ID, Receipt: rc.DispatchID}
	}
	f.r.Close()
	r, err := f.openStore(f.opts(), defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	f.r, f.admin = r, r.Admin()
	close(stop)
	<-done
	st, log, _ := lf.snapshot()
	landed := string(st.Value) == fixAfter
	if got := f.receiptOf("raise"); landed && got.Dispatch == DispatchFailed {
		t.Fatalf("the write landed (object %s, log %+v) but Open recorded it failed: nothing written, not outstanding", st.Value, log)
	}
}

// Probe: a hostile worker fires the same envelope many times at once,
// racing its own dispatch: one Apply, every other answer from the receipt.
func TestRedteamDispatch_ConcurrentRepeats(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		obj := newFakeObject(fixValue)
		f := newRemoteFixture(t, s, obj, time.Second)
		w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
		obj.set(func(o *fakeObject) { o.applyDelay = 20 * time.Millisecond })
		var wg sync.WaitGroup
		var applied atomic.Int32
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := f.r.Submit(f.ctx, "worker-a", w.envelope)
				if err == nil && res.Outcome == Applied {
					applied.Add(1)
				}
			}()
		}
		wg.Wait()
		if _, _, n := obj.snapshot(); n != 1 || applied.Load() != 1 {
			t.Fatalf("%d Apply calls, %d applied answers", n, applied.Load())
		}
	})
}

// Attack: the object is deleted out of band (an administrator, during the
// incident) while a write's answer is lost. Fence then fails with
// ErrRemoteNotFound for ever: the receipt stays dispatching and no hold of
// the scope is ever acknowledged, though no write can land any more (the
// write's UID precondition refuses a recreated object).
func TestRedteamDispatch_ObjectDeletedBeforeFence(t *testing.T) {
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, engines[0].new(t), obj, 150*time.Millisecond)
	w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
	obj.set(func(o *fakeObject) {
		o.failApply = errors.New("connection reset")
		o.beforeWrite = nil
	})
	// The answer is lost; the object is deleted before the fence.
	go func() { time.Sleep(50 * time.Millisecond); obj.set(func(o *fakeObject) { o.exists = false }) }()
	res := f.submit("worker-a", w.envelope)
	t.Logf("worker told %s/%s: %s", res.Outcome, res.Dispatch, res.Detail)
	ctx, cancel := context.WithTimeout(f.ctx, 2*time.Second)
	defer cancel()
	h, err := f.admin.Hold(ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "incident"})
	if err != nil {
		t.Fatalf("Hold with the object deleted: %v (receipt %s)", err, f.receiptOf("raise").Dispatch)
	}
	if len(h.Outstanding) != 1 {
		t.Fatalf("outstanding %+v", h.Outstanding)
	}
}
