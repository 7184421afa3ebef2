package kvfence

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/defect"
)

// Ensure that every outcome of a remote write is committed with its
// receipt and audit entry, told to the worker, and matches what the
// object took: applied, conflict, failed, unknown (timeout, lost answer),
// cancelled by a hold, and the denials of a receiver without a dispatcher
// and of an object deleted and recreated.
func TestDispatchOutcomes(t *testing.T) {
	// Its cases wait out dispatch timeouts and delays, beside the other
	// parallel tests; its fixtures and fake objects are its own (etcd
	// stores get a prefix of their own on the shared member).
	t.Parallel()
	cases := []struct {
		name string
		// setup runs after the worker's activation, before its submit.
		setup func(f *fixture, o *fakeObject)
		// noDispatcher reopens the receiver without dispatchers.
		noDispatcher bool
		outcome      Outcome
		state        DispatchState
		reason       Reason
		detail       string
		// value is the object's value after, and fenced whether its last
		// change is a fencing write.
		value  string
		fenced bool
		rev    uint64
	}{
		{name: "applied", outcome: Applied, state: DispatchApplied, value: fixAfter, rev: 2},
		{name: "conflict", setup: func(f *fixture, o *fakeObject) {
			o.set(func(o *fakeObject) { o.beforeWrite = func() { o.outOfBand(`{"data":{"retention_days":"31"}}`) } })
		}, outcome: NotApplied, state: DispatchConflict, value: `{"data":{"retention_days":"31"}}`, rev: 1},
		{name: "failed", setup: func(f *fixture, o *fakeObject) {
			o.set(func(o *fakeObject) { o.failApply = ErrRemoteNotFound })
		}, outcome: NotApplied, state: DispatchFailed, value: fixValue, rev: 1},
		{name: "timeout", setup: func(f *fixture, o *fakeObject) {
			o.set(func(o *fakeObject) { o.block = make(chan struct{}) })
		}, outcome: OutcomeUnknown, state: DispatchUnknown, value: fixValue, fenced: true, rev: 1},
		{name: "transport error", setup: func(f *fixture, o *fakeObject) {
			o.set(func(o *fakeObject) { o.failApply = errors.New("connection reset") })
		}, outcome: OutcomeUnknown, state: DispatchUnknown, value: fixValue, fenced: true, rev: 1},
		{name: "answer lost", setup: func(f *fixture, o *fakeObject) {
			o.set(func(o *fakeObject) { o.loseAnswer = true })
		}, outcome: OutcomeUnknown, state: DispatchUnknown, value: fixAfter, fenced: true, rev: 1},
		{name: "cancelled by a hold", setup: func(f *fixture, o *fakeObject) {
			f.r.faults.beforeGate = func(string) {
				// The hold commits, then waits for this write, which must
				// not start.
				f.holdAsync(f.ctx, "")
				for {
					if st, err := f.r.Status(fixScope); err != nil || st.Mode == ModeHeld {
						return
					}
					time.Sleep(time.Millisecond)
				}
			}
		}, outcome: NotApplied, state: DispatchCancelled, value: fixValue, rev: 1},
		{name: "no dispatcher", noDispatcher: true, outcome: Denied, reason: ReasonPreconditionFailed,
			detail: "no dispatcher for kind kubernetes", value: fixValue, rev: 1},
		{name: "deleted and recreated", setup: func(f *fixture, o *fakeObject) {
			o.set(func(o *fakeObject) { o.uid = "uid-2" })
		}, outcome: Denied, reason: ReasonPreconditionFailed, detail: "object was deleted and recreated", value: fixValue, rev: 1},
		{name: "deleted", setup: func(f *fixture, o *fakeObject) {
			o.set(func(o *fakeObject) { o.exists = false })
		}, outcome: Denied, reason: ReasonPreconditionFailed, detail: "the object does not exist", rev: 1},
	}
	forEngines(t, func(t *testing.T, s *store) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				obj := newFakeObject(fixValue)
				f := newRemoteFixture(t, s, obj, 300*time.Millisecond)
				if tc.noDispatcher {
					f.dispatchers = nil
					f.reopen()
				}
				w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
				if tc.setup != nil {
					tc.setup(f, obj)
				}
				res := f.submit("worker-a", w.envelope)
				if res.Outcome != tc.outcome || res.Dispatch != tc.state || res.Reason != tc.reason {
					t.Fatalf("result %s/%s/%s (%s), want %s/%s/%s", res.Outcome, res.Dispatch, res.Reason, res.Detail, tc.outcome, tc.state, tc.reason)
				}
				if tc.detail != "" && res.Detail != tc.detail {
					t.Fatalf("detail %q, want %q", res.Detail, tc.detail)
				}
				st, log, applies := obj.snapshot()
				if tc.value != "" && string(st.Value) != tc.value {
					t.Fatalf("object value %s, want %s", st.Value, tc.value)
				}
				if fenced := len(log) > 0 && log[len(log)-1].fence; fenced != tc.fenced {
					t.Fatalf("object fenced %v, want %v (log %+v)", fenced, tc.fenced, log)
				}
				tg, err := f.r.Target(remoteTarget)
				if err != nil || tg.Revision != tc.rev {
					t.Fatalf("target revision %d (%v), want %d", tg.Revision, err, tc.rev)
				}
				if tc.state == "" {
					if applies != 0 {
						t.Fatalf("a denied write reached the object %d times", applies)
					}
					if _, err := f.r.Receipt(fixScope, "raise"); !errors.Is(err, ErrNotFound) {
						t.Fatalf("denial left a receipt: %v", err)
					}
					return
				}
				rc := f.receiptOf("raise")
				if rc.Dispatch != tc.state || rc.DispatchID != res.DispatchID || rc.Precondition != "1" || rc.UID != "uid-1" {
					t.Fatalf("receipt %+v, result %+v", rc, res)
				}
				if tc.state == DispatchApplied && (rc.Version != st.Version || st.Stamp.Receipt != rc.DispatchID || st.Stamp.Grant != w.grant.ID ||
					st.Stamp.Epoch != w.grant.Epoch || st.Stamp.Scope != fixScope || rc.RevAfter != 2 || res.Version != st.Version) {
					t.Fatalf("applied receipt %+v, object %+v", rc, st)
				}
				if tc.state == DispatchUnknown && rc.Version != st.Version {
					t.Fatalf("unknown receipt names version %s, the fence left %s", rc.Version, st.Version)
				}
				// The audit chain holds the decision and the outcome.
				wantAudit(t, f.r, rc.DispatchID, tc.state)
				// A repeat never dispatches again.
				rep := f.submit("worker-a", w.envelope)
				if tc.state == DispatchCancelled {
					wantDenied(t, rep, ReasonReceiverHeld)
				} else if rep.Dispatch != tc.state || rep.DispatchID != rc.DispatchID {
					t.Fatalf("repeat %+v", rep)
				}
				if _, _, again := obj.snapshot(); again != applies {
					t.Fatalf("repeat dispatched again: %d applies, then %d", applies, again)
				}
			})
		}
	})
}

// wantAudit fails the test unless the chain holds the dispatching decision
// of dispatch id and its outcome entry with state.
func wantAudit(t *testing.T, r *Receiver, id string, state DispatchState) {
	t.Helper()
	var decided, settled bool
	err := r.Events(0, func(e Event) bool {
		if !strings.Contains(e.Note, id) {
			return true
		}
		switch {
		case e.Kind == KindSubmit && e.Outcome == audit.OutcomeDispatching:
			decided = true
		case e.Kind == KindDispatch && e.Outcome == string(state):
			settled = true
		}
		return true
	})
	if err != nil || !decided || !settled {
		t.Fatalf("audit: decided %v, settled %v as %s (%v)", decided, settled, state, err)
	}
}

// Ensure that a kubernetes target is created only for an object that
// exists, through a dispatcher, and that an internal target's record is
// unchanged by the new fields.
func TestDispatchCreateTarget(t *testing.T) {
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, engines[0].new(t), obj, time.Second)
	o := testObject
	o.Name = "other"
	cases := []struct {
		name string
		spec TargetSpec
		want error
	}{
		{"missing object", TargetSpec{Scope: fixScope, Name: "t2", Kind: TargetKubernetes, Object: &o}, ErrRemoteNotFound},
		{"no object", TargetSpec{Scope: fixScope, Name: "t2", Kind: TargetKubernetes}, ErrInvalidArgument},
		{"value given", TargetSpec{Scope: fixScope, Name: "t2", Kind: TargetKubernetes, Object: &testObject, Value: []byte("x")}, ErrInvalidArgument},
		{"object on internal", TargetSpec{Scope: fixScope, Name: "t2", Object: &testObject}, ErrInvalidArgument},
		{"bad name", TargetSpec{Scope: fixScope, Name: "t2", Kind: TargetKubernetes, Object: &RemoteObject{Version: "v1", Resource: "configmaps", Name: "a\x00"}}, ErrInvalidArgument},
	}
	for _, tc := range cases {
		if _, err := f.admin.CreateTargetSpec(f.ctx, tc.spec); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	f.dispatchers = nil
	f.reopen()
	if _, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: "t3", Kind: TargetKubernetes, Object: &testObject}); !errors.Is(err, ErrNoDispatcher) {
		t.Fatalf("without a dispatcher: %v", err)
	}
	// The reflection encoder, which writes the new fields, writes an
	// internal target's and receipt's records as the hand-written
	// encoders of the records before them do.
	tr := &targetRecord{Scope: "s", Revision: 1, Value: []byte("v")}
	rc := &receiptRecord{Grant: "g", RequestSHA256: make([]byte, 32), Target: "t", RevBefore: 1, RevAfter: 2, AuditSeq: 3, At: 4}
	for _, c := range []struct {
		v    any
		fast []byte
	}{{tr, appendTarget(nil, tr)}, {rc, appendReceipt(nil, rc)}} {
		raw, err := wireEnc.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) != string(c.fast) {
			t.Fatalf("%T record changed: %x, was %x", c.v, raw, c.fast)
		}
	}
}

// Ensure that a hold with a remote write in flight waits for it: the
// write's outcome is committed before the hold is acknowledged. With the
// wait removed (skipHoldWait) the hold returns while the write is in
// flight, and the write lands after the acknowledgment: the test's
// defect case shows that.
func TestDispatchHoldWaits(t *testing.T) {
	for _, defective := range []bool{false, true} {
		name := "sound"
		if defective {
			name = "without the wait"
		}
		t.Run(name, func(t *testing.T) {
			obj := newFakeObject(fixValue)
			f := newRemoteFixture(t, engines[0].new(t), obj, 5*time.Second)
			f.r.faults.skipHoldWait = defective
			w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
			release, started := make(chan struct{}), make(chan struct{}, 1)
			obj.set(func(o *fakeObject) { o.block, o.started = release, started })
			sub := make(chan Result, 1)
			go func() { sub <- f.submit("worker-a", w.envelope) }()
			<-started
			held := f.holdAsync(f.ctx, "")
			var returnedEarly bool
			select {
			case <-held:
				returnedEarly = true
			case <-time.After(150 * time.Millisecond):
			}
			close(release)
			res := <-sub
			var h holdOutcome
			if !returnedEarly {
				h = <-held
				if h.err != nil {
					t.Fatalf("Hold: %v", h.err)
				}
			}
			if returnedEarly != defective {
				t.Fatalf("hold returned while the write was in flight: %v", returnedEarly)
			}
			if defective {
				// The write under the superseded grant landed after the
				// acknowledgment.
				if res.Dispatch != DispatchApplied {
					t.Fatalf("defective: write %s", res.Dispatch)
				}
				return
			}
			if res.Dispatch != DispatchApplied || f.receiptOf("raise").Dispatch != DispatchApplied || len(h.res.Outstanding) != 0 {
				t.Fatalf("write %s, outstanding %+v", res.Dispatch, h.res.Outstanding)
			}
		})
	}
}

// Ensure that a write whose answer is lost past its deadline is fenced
// before the hold is acknowledged, listed as outstanding, and that its
// late arrival at the object with the old precondition then fails. With
// the fencing write removed (skipFence) the late write lands after the
// acknowledgment.
func TestDispatchFenceLateWrite(t *testing.T) {
	for _, defective := range []bool{false, true} {
		name := "sound"
		if defective {
			name = "without the fence"
		}
		t.Run(name, func(t *testing.T) {
			obj := newFakeObject(fixValue)
			f := newRemoteFixture(t, engines[0].new(t), obj, 200*time.Millisecond)
			f.r.faults.skipFence = defective
			w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
			release, started, late := make(chan struct{}), make(chan struct{}, 1), make(chan error, 1)
			obj.set(func(o *fakeObject) { o.block, o.ignoreCtx, o.started, o.lateResult = release, true, started, late })
			sub := make(chan Result, 1)
			go func() { sub <- f.submit("worker-a", w.envelope) }()
			<-started
			h := <-f.holdAsync(f.ctx, "h1")
			if h.err != nil {
				t.Fatalf("Hold: %v", h.err)
			}
			if len(h.res.Outstanding) != 1 || h.res.Outstanding[0].Grant != w.grant.ID || h.res.Outstanding[0].Object != testObject {
				t.Fatalf("outstanding %+v", h.res.Outstanding)
			}
			// The late write arrives after the acknowledgment.
			close(release)
			lateErr := <-late
			res := <-sub
			_, log, _ := obj.snapshot()
			landed := false
			for _, wr := range log {
				landed = landed || wr.stamp.Grant == w.grant.ID
			}
			if landed != defective {
				t.Fatalf("late write landed %v (%v), log %+v", landed, lateErr, log)
			}
			if !defective && (!errors.Is(lateErr, ErrRemoteConflict) || res.Dispatch != DispatchUnknown || f.receiptOf("raise").Dispatch != DispatchUnknown) {
				t.Fatalf("late write %v, result %+v", lateErr, res)
			}
		})
	}
}

// Ensure that a hold whose context ends before a write in flight settles
// is ErrHoldNotSettled, having committed, and that a repeat with the same
// hold ID finishes the wait.
func TestDispatchHoldNotSettled(t *testing.T) {
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, engines[0].new(t), obj, 5*time.Second)
	w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
	release, started := make(chan struct{}), make(chan struct{}, 1)
	obj.set(func(o *fakeObject) { o.block, o.started = release, started })
	sub := make(chan Result, 1)
	go func() { sub <- f.submit("worker-a", w.envelope) }()
	<-started
	ctx, cancel := context.WithTimeout(f.ctx, 100*time.Millisecond)
	h := <-f.holdAsync(ctx, "h1")
	cancel()
	if !errors.Is(h.err, ErrHoldNotSettled) || !isCtxErr(h.err) {
		t.Fatalf("Hold: %v, want ErrHoldNotSettled", h.err)
	}
	st, err := f.r.Status(fixScope)
	if err != nil || st.Mode != ModeHeld {
		t.Fatalf("the hold did not commit: %+v %v", st, err)
	}
	close(release)
	<-sub
	h = <-f.holdAsync(f.ctx, "h1")
	if h.err != nil || !h.res.Repeated || f.receiptOf("raise").Dispatch != DispatchApplied {
		t.Fatalf("repeat: %+v %v", h.res, h.err)
	}
}

// Ensure that a receiver restarted with a write in flight resolves it at
// Open by the object's stamp: its own stamp is applied, a stamp naming
// another dispatch (forged) is not, an object still at the precondition
// is fenced and failed, and a receiver without the dispatcher refuses to
// open.
func TestDispatchRestart(t *testing.T) {
	// As TestDispatchOutcomes: it mostly waits, and shares nothing.
	t.Parallel()
	cases := []struct {
		name string
		// change is what reached the object while the receiver was down.
		change func(o *fakeObject, in DispatchInput)
		want   DispatchState
		fenced bool
	}{
		{"landed", func(o *fakeObject, in DispatchInput) {
			o.version++
			o.value, o.stamp = in.Value, in.Stamp
		}, DispatchApplied, false},
		{"not landed", func(o *fakeObject, in DispatchInput) {}, DispatchFailed, true},
		{"forged stamp", func(o *fakeObject, in DispatchInput) {
			o.version++
			o.value = in.Value
			o.stamp = Stamp{Scope: in.Stamp.Scope, Epoch: in.Stamp.Epoch, Grant: in.Stamp.Grant, Receipt: "0123456789abcdef0123456789abcdef"}
		}, DispatchUnknown, true},
		{"recreated", func(o *fakeObject, in DispatchInput) {
			o.uid, o.version = "uid-2", 1
			o.stamp = in.Stamp
		}, DispatchUnknown, true},
	}
	forEngines(t, func(t *testing.T, s *store) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				obj := newFakeObject(fixValue)
				f := newRemoteFixture(t, s, obj, 300*time.Millisecond)
				w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
				stop := make(chan struct{})
				done := make(chan struct{})
				f.r.faults.beforeGate = func(string) { <-stop }
				go func() {
					defer close(done)
					// The process dies here: its answer never comes.
					_, _ = f.r.Submit(f.ctx, "worker-a", w.envelope)
				}()
				var rc Receipt
				for deadline := time.Now().Add(5 * time.Second); ; {
					var err error
					if rc, err = f.r.Receipt(fixScope, "raise"); err == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("no dispatching receipt")
					}
					time.Sleep(5 * time.Millisecond)
				}
				in := DispatchInput{Object: testObject, UID: "uid-1", Precondition: "1", Value: []byte(fixAfter),
					Stamp: Stamp{Scope: fixScope, Epoch: w.grant.Epoch, Grant: w.grant.ID, Receipt: rc.DispatchID}}
				obj.set(func(o *fakeObject) { tc.change(o, in) })
				f.r.Close()
				f.dispatchers = nil
				if _, err := f.openStore(f.opts(), defect.Variant{}); !errors.Is(err, ErrNoDispatcher) {
					t.Fatalf("open without the dispatcher: %v", err)
				}
				f.dispatchers = map[TargetKind]Dispatcher{TargetKubernetes: obj}
				r, err := f.openStore(f.opts(), defect.Variant{})
				if err != nil {
					t.Fatalf("reopen: %v", err)
				}
				f.r, f.admin = r, r.Admin()
				close(stop)
				<-done
				got := f.receiptOf("raise")
				st, log, _ := obj.snapshot()
				if got.Dispatch != tc.want {
					t.Fatalf("resolved %s, want %s", got.Dispatch, tc.want)
				}
				if fenced := len(log) > 0 && log[len(log)-1].fence; fenced != tc.fenced {
					t.Fatalf("fenced %v, want %v", fenced, tc.fenced)
				}
				tg, _ := f.r.Target(remoteTarget)
				if tc.want == DispatchApplied && (got.Version != st.Version || tg.Revision != 2) {
					t.Fatalf("applied at %s, object at %s", got.Version, st.Version)
				}
			})
		}
	})
}

// Ensure that a hold by one receiver waits for a write another receiver
// on the same etcd prefix decided before it, which the first learns of
// only from the store: it fences the object at the write's deadline,
// lists the write as outstanding, and the late write then fails.
func TestDispatchHoldAcrossReceivers(t *testing.T) {
	s := engines[1].new(t)
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, s, obj, 300*time.Millisecond)
	other, err := f.openStore(f.opts(), defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
	release, started, late := make(chan struct{}), make(chan struct{}, 1), make(chan error, 1)
	obj.set(func(o *fakeObject) { o.block, o.ignoreCtx, o.started, o.lateResult = release, true, started, late })
	sub := make(chan error, 1)
	go func() {
		_, err := other.Submit(f.ctx, "worker-a", w.envelope)
		sub <- err
	}()
	<-started
	h := <-f.holdAsync(f.ctx, "")
	if h.err != nil {
		t.Fatalf("Hold: %v", h.err)
	}
	if len(h.res.Outstanding) != 1 || h.res.Outstanding[0].Grant != w.grant.ID {
		t.Fatalf("outstanding %+v", h.res.Outstanding)
	}
	close(release)
	if err := <-late; !errors.Is(err, ErrRemoteConflict) {
		t.Fatalf("late write: %v", err)
	}
	if err := <-sub; err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if rc := f.receiptOf("raise"); rc.Dispatch != DispatchUnknown {
		t.Fatalf("receipt %s", rc.Dispatch)
	}
}

// Ensure that a hold that fails (a scope it names does not exist) leaves
// no mark in the hold gate: a write decided after it still starts. Were
// the gate set per scope before the whole hold succeeded, every write of
// the scope would be cancelled until the next hold.
func TestDispatchFailedHoldLeavesGate(t *testing.T) {
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, engines[0].new(t), obj, time.Second)
	w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
	if _, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope, "no/such/scope"}, Reason: "incident"}); !errors.Is(err, ErrUnknownScope) {
		t.Fatalf("Hold: %v", err)
	}
	if res := f.submit("worker-a", w.envelope); res.Dispatch != DispatchApplied {
		t.Fatalf("after a failed hold: %+v", res)
	}
}

// Ensure that HoldAll waits for a write in flight as Hold does, and that
// a HoldAll that finds the scope held already (an earlier one that was
// not acknowledged) finishes that wait and lists the write if unknown.
func TestDispatchHoldAllWaits(t *testing.T) {
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, engines[0].new(t), obj, 200*time.Millisecond)
	w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
	release, started := make(chan struct{}), make(chan struct{}, 1)
	obj.set(func(o *fakeObject) { o.block, o.ignoreCtx, o.started = release, true, started })
	go func() { _, _ = f.r.Submit(f.ctx, "worker-a", w.envelope) }()
	<-started
	ctx, cancel := context.WithTimeout(f.ctx, 20*time.Millisecond)
	_, err := f.admin.HoldAll(ctx, "incident")
	cancel()
	if !errors.Is(err, ErrHoldNotSettled) {
		t.Fatalf("HoldAll: %v, want ErrHoldNotSettled", err)
	}
	res, err := f.admin.HoldAll(f.ctx, "incident")
	close(release)
	if err != nil || len(res.Scopes) != 0 || len(res.AlreadyHeld) != 1 || len(res.Outstanding) != 1 {
		t.Fatalf("HoldAll again: %+v %v", res, err)
	}
	if rc := f.receiptOf("raise"); rc.Dispatch != DispatchUnknown {
		t.Fatalf("receipt %s", rc.Dispatch)
	}
}

// Ensure that the state digest covers a receipt's dispatch fields: a
// receipt whose unknown outcome is rewritten as applied in the store is
// refused at the next Open.
func TestDispatchReceiptEditedIsRefused(t *testing.T) {
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, engines[0].new(t), obj, 100*time.Millisecond)
	w := f.activate("worker-a", "claim-1", f.remoteRequest("raise"))
	obj.set(func(o *fakeObject) { o.loseAnswer = true })
	if res := f.submit("worker-a", w.envelope); res.Dispatch != DispatchUnknown {
		t.Fatalf("result %+v", res)
	}
	err := f.r.rawUpdate(func(tx engine.Tx) error {
		rc, err := getReceipt(tx, fixScope, "raise")
		if err != nil {
			return err
		}
		rc.Dispatch = DispatchApplied
		raw, err := encodeCanonical(rc)
		if err != nil {
			return err
		}
		return tx.Put(bucketReceipts, receiptKey(fixScope, "raise"), raw)
	})
	if err != nil {
		t.Fatal(err)
	}
	f.r.Close()
	if _, err := f.openStore(f.opts(), defect.Variant{}); !errors.Is(err, ErrStateMismatch) {
		t.Fatalf("Open after the edit: %v, want ErrStateMismatch", err)
	}
	// The cleanup's chain check reads through a read-only receiver.
	r, err := f.openStore(&Options{ReadOnly: true}, defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	f.r = r
}
