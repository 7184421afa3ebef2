package kvfence

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/defect"
	bolt "go.etcd.io/bbolt"
)

// The func target of the effect tests, and the app bucket of its effect.
const (
	effTarget = "ledger-head"
	effBucket = "app_ledger"
)

// ledger is the effect of the tests: it records the new value under
// "entry/ACTION", counts the writes under "count", and refuses, after
// having written both, a value that contains "refuse". runs counts every
// run of Apply; afterRead, if set, runs once the count was read, inside
// the transaction.
type ledger struct {
	runs      atomic.Int64
	afterRead func(in EffectInput)
	// also, if set, is a bucket the effect writes too, and the error
	// that write got.
	also    string
	alsoErr error
}

func (l *ledger) effect() Effect {
	return Effect{Buckets: []string{effBucket}, Apply: func(tx EffectTx, in EffectInput) error {
		l.runs.Add(1)
		if err := tx.Put(effBucket, []byte("entry/"+in.Action), in.Value); err != nil {
			return err
		}
		raw, err := tx.Get(effBucket, []byte("count"))
		if err != nil {
			return err
		}
		if l.afterRead != nil {
			l.afterRead(in)
		}
		n, _ := strconv.Atoi(string(raw))
		if err := tx.Put(effBucket, []byte("count"), []byte(strconv.Itoa(n+1))); err != nil {
			return err
		}
		if l.also != "" {
			if l.alsoErr = tx.Put(l.also, []byte("x"), []byte("y")); l.alsoErr != nil {
				return l.alsoErr
			}
		}
		if strings.Contains(string(in.Value), "refuse") {
			return errors.New("the ledger refuses this value")
		}
		return nil
	}}
}

// effFixture is a fixture on a fresh store of s's engine whose receiver
// registers the ledger effect, with the func target effTarget.
func effFixture(t *testing.T, s *store) (*fixture, *ledger) {
	t.Helper()
	f := newFixtureOn(t, s, defect.Variant{})
	l := &ledger{}
	f.effects = map[string]Effect{"ledger": l.effect()}
	f.reopen()
	tg, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: effTarget, Value: []byte("{}"), Kind: TargetFunc, Effect: "ledger"})
	if err != nil {
		t.Fatalf("CreateTargetSpec: %v", err)
	}
	if tg.Kind != TargetFunc || tg.Effect != "ledger" {
		t.Fatalf("created %+v", tg)
	}
	return f, l
}

// effWorker activates a grant for a Set of value on effTarget, holding
// the scope first if it is open.
func (f *fixture) effWorker(name, action, value string) worker {
	f.t.Helper()
	if st, err := f.r.Status(fixScope); err != nil {
		f.t.Fatal(err)
	} else if st.Mode == ModeOpen {
		f.hold("next worker")
	}
	return f.activate(name, "claim-"+action, f.request(&Request{V: 1, Action: action, Target: effTarget, Set: ptr([]byte(value))}))
}

// appValue reads an app record of the ledger, "" when it is absent.
func appValue(t testing.TB, f *fixture, key string) string {
	t.Helper()
	v, err := f.r.AppGet(effBucket, []byte(key))
	if err != nil {
		t.Fatalf("AppGet %s: %v", key, err)
	}
	if v == nil {
		return ""
	}
	return string(v)
}

// wantEffTarget fails unless effTarget has this revision and value.
func wantEffTarget(t testing.TB, f *fixture, rev uint64, value string) {
	t.Helper()
	tg, err := f.r.Target(effTarget)
	if err != nil || tg.Revision != rev || string(tg.Value) != value {
		t.Fatalf("target = %+v, %v; want rev %d %s", tg, err, rev, value)
	}
}

// Ensure that an applied write to a func target runs its effect once, in
// the transaction of the value, the receipt and the audit entry: all of
// them are there together, on both engines, and after a reopen (which
// checks the state digest over the app records) and verify-chain.
func TestEffect_AppliedWithReceipt(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f, l := effFixture(t, s)
		w := f.effWorker("worker-a", "a1", `{"retention":45}`)
		res := f.submit(w.name, w.envelope)
		if res.Outcome != Applied || res.Revision != 2 {
			t.Fatalf("submit = %+v", res)
		}
		if got := l.runs.Load(); got != 1 {
			t.Errorf("effect ran %d times, want 1", got)
		}
		wantEffTarget(t, f, 2, `{"retention":45}`)
		if got := appValue(t, f, "entry/a1"); got != `{"retention":45}` {
			t.Errorf("entry = %q", got)
		}
		if rc, err := f.r.Receipt(fixScope, "a1"); err != nil || rc.AuditSeq != res.AuditSeq {
			t.Errorf("receipt = %+v, %v", rc, err)
		}
		// The same envelope again answers from the receipt: no effect.
		if res := f.submit(w.name, w.envelope); res.Outcome != AlreadyApplied {
			t.Errorf("repeat = %+v", res)
		}
		if got := l.runs.Load(); got != 1 {
			t.Errorf("effect ran %d times after a repeat, want 1", got)
		}
		f.reopen()
		if got := appValue(t, f, "count"); got != "1" {
			t.Errorf("count after reopen = %q", got)
		}
		f.r.Close()
		rep, err := f.store.verify(t, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
		if err != nil || !rep.OK() {
			t.Fatalf("verify-chain = %+v, %v", rep, err)
		}
		f.reopen()
	})
}

// Ensure that no submit that fails a check runs the effect: a stale
// worker after a hold, a held scope, a wrong caller, a failed
// precondition.
func TestEffect_NotRunWhenDenied(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f, l := effFixture(t, s)
		a := f.effWorker("worker-a", "a1", `{"v":1}`)
		wantDenied(t, f.submit("intruder", a.envelope), ReasonExecutorMismatch)
		f.hold("incident")
		wantDenied(t, f.submit(a.name, a.envelope), ReasonReceiverHeld)
		b := f.effWorker("worker-b", "b1", `{"v":2}`)
		wantDenied(t, f.submit(a.name, a.envelope), ReasonStaleEpoch)
		f.hold("again")
		c := f.activate("worker-c", "claim-c", f.request(&Request{V: 1, Action: "c1", Target: effTarget,
			Set: ptr([]byte(`{}`)), ExpectRevision: ptr(uint64(9))}))
		wantDenied(t, f.submit(c.name, c.envelope), ReasonPreconditionFailed)
		wantDenied(t, f.submit(b.name, b.envelope), ReasonStaleEpoch)
		if got := l.runs.Load(); got != 0 {
			t.Errorf("effect ran %d times for denied submits", got)
		}
		wantEffTarget(t, f, 1, `{}`)
		if got := appValue(t, f, "count"); got != "" {
			t.Errorf("count = %q, want none", got)
		}
	})
}

// Ensure that an effect's error refuses the write and leaves none of what
// the effect wrote before it failed: the worker gets precondition_failed
// with the effect's words, the denial is in the audit chain, and the
// target, the receipt and the app records are as before.
func TestEffect_ErrorLeavesNothing(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f, l := effFixture(t, s)
		w := f.effWorker("worker-a", "a1", `{"refuse":true}`)
		res := f.submit(w.name, w.envelope)
		wantDenied(t, res, ReasonPreconditionFailed)
		if !strings.HasPrefix(res.Detail, "effect refused: the ledger refuses") {
			t.Errorf("detail %q", res.Detail)
		}
		if l.runs.Load() != 1 {
			t.Errorf("effect ran %d times", l.runs.Load())
		}
		wantEffTarget(t, f, 1, `{}`)
		for _, k := range []string{"entry/a1", "count"} {
			if got := appValue(t, f, k); got != "" {
				t.Errorf("%s = %q after a refusal", k, got)
			}
		}
		if _, err := f.r.Receipt(fixScope, "a1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("receipt after a refusal: %v", err)
		}
		var note string
		if err := f.r.Events(res.AuditSeq, func(e Event) bool { note = e.Note; return false }); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(note, "effect refused") || len(note) > maxDenialDetail {
			t.Errorf("audit note %q", note)
		}
	})
}

// Ensure that an effect that names a bucket it did not declare gets
// ErrEffectBucket, and its write is refused with nothing kept.
func TestEffect_UndeclaredBucket(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f, l := effFixture(t, s)
		l.also = "app_other"
		f.effects = map[string]Effect{"ledger": l.effect()}
		f.reopen()
		w := f.effWorker("worker-a", "a1", `{"v":1}`)
		res := f.submit(w.name, w.envelope)
		wantDenied(t, res, ReasonPreconditionFailed)
		if !errors.Is(l.alsoErr, ErrEffectBucket) {
			t.Errorf("write to an undeclared bucket: %v", l.alsoErr)
		}
		if got := appValue(t, f, "count"); got != "" {
			t.Errorf("count = %q", got)
		}
		wantEffTarget(t, f, 1, `{}`)
	})
}

// Ensure that a func target whose effect the receiver does not register
// is never written without it: the submit is denied, and creating such a
// target is ErrEffectNotRegistered.
func TestEffect_NotRegistered(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f, l := effFixture(t, s)
		_, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: "t2", Kind: TargetFunc, Effect: "nope"})
		if !errors.Is(err, ErrEffectNotRegistered) {
			t.Errorf("CreateTargetSpec of an unknown effect: %v", err)
		}
		_, err = f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: "t3", Kind: "kubernetes"})
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("CreateTargetSpec of an unknown kind: %v", err)
		}
		f.effects = nil
		f.reopen()
		w := f.effWorker("worker-a", "a1", `{"v":1}`)
		res := f.submit(w.name, w.envelope)
		wantDenied(t, res, ReasonPreconditionFailed)
		if !strings.Contains(res.Detail, `effect "ledger" is not registered`) {
			t.Errorf("detail %q", res.Detail)
		}
		wantEffTarget(t, f, 1, `{}`)
		if l.runs.Load() != 0 {
			t.Errorf("effect ran")
		}
		// Registered again, the same envelope applies.
		f.effects = map[string]Effect{"ledger": l.effect()}
		f.reopen()
		if res := f.submit(w.name, w.envelope); res.Outcome != Applied {
			t.Fatalf("submit = %+v", res)
		}
		if tg, _ := f.r.Target(effTarget); tg.Kind != TargetFunc || tg.Effect != "ledger" {
			t.Errorf("target %+v", tg)
		}
	})
}

// Ensure that Open refuses effects it cannot register.
func TestEffect_OpenRefusesBadEffects(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	apply := func(EffectTx, EffectInput) error { return nil }
	for name, effects := range map[string]map[string]Effect{
		"no prefix":  {"e": {Buckets: []string{"ledger"}, Apply: apply}},
		"bad char":   {"e": {Buckets: []string{"app_a/b"}, Apply: apply}},
		"no buckets": {"e": {Apply: apply}},
		"no apply":   {"e": {Buckets: []string{"app_a"}}},
		"bad name":   {"": {Buckets: []string{"app_a"}, Apply: apply}},
		"too long":   {"e": {Buckets: []string{"app_" + strings.Repeat("x", 61)}, Apply: apply}},
	} {
		o := f.opts()
		o.Effects = effects
		f.r.Close()
		r, err := f.openStore(o, defect.Variant{})
		if !errors.Is(err, ErrInvalidArgument) {
			if r != nil {
				r.Close()
			}
			t.Errorf("%s: Open = %v, want ErrInvalidArgument", name, err)
		}
		f.reopen()
	}
}

// Ensure that a crash at any point of an applied write to a func target
// keeps the value, the receipt and the effect's records together: a
// fault after the effect wrote and before the audit entry leaves none of
// them, before and after a restart, and the retried envelope leaves all
// of them.
func TestEffect_CrashKeepsBothOrNeither(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f, l := effFixture(t, s)
		w := f.effWorker("worker-a", "a1", `{"v":1}`)
		boom := errors.New("injected crash")
		f.r.faults.beforeAudit = func(e *audit.Entry) error {
			if e.Kind == KindSubmit && e.Outcome == string(Applied) {
				return boom
			}
			return nil
		}
		if _, err := f.r.Submit(f.ctx, w.name, w.envelope); !errors.Is(err, boom) {
			t.Fatalf("Submit = %v, want the injected fault", err)
		}
		if l.runs.Load() == 0 {
			t.Fatal("the effect never ran: the fault came too early to test anything")
		}
		f.reopen()
		wantEffTarget(t, f, 1, `{}`)
		if got := appValue(t, f, "count"); got != "" {
			t.Errorf("count = %q after a failed commit", got)
		}
		if res := f.submit(w.name, w.envelope); res.Outcome != Applied {
			t.Fatalf("retry = %+v", res)
		}
		f.reopen()
		wantEffTarget(t, f, 2, `{"v":1}`)
		if got := appValue(t, f, "count"); got != "1" {
			t.Errorf("count = %q after the retry", got)
		}
	})
}

// Ensure that on etcd, where a conflict runs the transaction's function
// again, the effect runs again and its writes land exactly once: another
// client rewrites (with the same bytes) the app record the effect read,
// after the read, so the commit's compare fails.
func TestEffect_EtcdRetryWritesOnce(t *testing.T) {
	s := engines[1].new(t)
	f, l := effFixture(t, s)
	first := f.effWorker("worker-a", "a1", `{"v":1}`)
	if res := f.submit(first.name, first.envelope); res.Outcome != Applied {
		t.Fatalf("submit = %+v", res)
	}
	count := appValue(t, f, "count")
	cli := etcdClient(t)
	defer cli.Close()
	key := f.store.prefix + string(bucketApp) + "/" + string(appKey(effBucket, []byte("count")))
	if resp, err := cli.Get(context.Background(), key); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != count {
		t.Fatalf("the app record is not at %q: %v %v", key, resp, err)
	}
	var bumped atomic.Bool
	l.afterRead = func(in EffectInput) {
		if in.Action == "b1" && bumped.CompareAndSwap(false, true) {
			if _, err := cli.Put(context.Background(), key, count); err != nil {
				t.Error(err)
			}
		}
	}
	second := f.effWorker("worker-b", "b1", `{"v":2}`)
	before := l.runs.Load()
	if res := f.submit(second.name, second.envelope); res.Outcome != Applied {
		t.Fatalf("submit = %+v", res)
	}
	if runs := l.runs.Load() - before; runs < 2 {
		t.Fatalf("the effect ran %d times: no retry was forced", runs)
	}
	if got := appValue(t, f, "count"); got != "2" {
		t.Errorf("count = %q, want 2: a retried run's writes landed twice or not at all", got)
	}
	wantEffTarget(t, f, 3, `{"v":2}`)
	f.reopen()
}

// Ensure that an app record edited under the running receiver is never
// the basis of an effect (ErrStateMismatch, nothing written), and that
// the edit is caught by Open's state digest once the receiver restarts.
func TestEffect_EditUnderCaught(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f, _ := effFixture(t, s)
		a := f.effWorker("worker-a", "a1", `{"v":1}`)
		if res := f.submit(a.name, a.envelope); res.Outcome != Applied {
			t.Fatalf("submit = %+v", res)
		}
		key := string(appKey(effBucket, []byte("count")))
		storePut(t, f, bucketApp, key, []byte("100"))
		b := f.effWorker("worker-b", "b1", `{"v":2}`)
		head := f.r.Head()
		res, err := f.r.Submit(f.ctx, b.name, b.envelope)
		if !errors.Is(err, ErrStateMismatch) || res.Outcome != "" {
			t.Fatalf("Submit = %+v, %v; want ErrStateMismatch", res, err)
		}
		if f.r.Head() != head {
			t.Fatalf("something was written")
		}
		wantEffTarget(t, f, 2, `{"v":1}`)
		f.r.Close()
		if r, err := f.openStore(f.opts(), defect.Variant{}); !errors.Is(err, ErrStateMismatch) {
			if r != nil {
				r.Close()
			}
			t.Fatalf("Open over an edited app record = %v, want ErrStateMismatch", err)
		}
		// A record added under the receiver is caught the same way.
		storePutClosed(t, f, bucketApp, key, []byte("1"))
		storePutClosed(t, f, bucketApp, string(appKey(effBucket, []byte("forged"))), []byte("x"))
		if r, err := f.openStore(f.opts(), defect.Variant{}); !errors.Is(err, ErrStateMismatch) {
			if r != nil {
				r.Close()
			}
			t.Fatalf("Open over an added app record = %v, want ErrStateMismatch", err)
		}
		storeDeleteClosed(t, f, bucketApp, string(appKey(effBucket, []byte("forged"))))
		f.reopen()
		if res := f.submit(b.name, b.envelope); res.Outcome != Applied {
			t.Fatalf("submit after the edit was put back = %+v", res)
		}
	})
}

// storeDeleteClosed deletes a record of a store whose receiver is not
// running.
func storeDeleteClosed(t testing.TB, f *fixture, bucket []byte, key string) {
	t.Helper()
	if f.store.prefix != "" {
		storePut(t, f, bucket, key, nil)
		return
	}
	db, err := bolt.Open(f.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Delete([]byte(key)) }); err != nil {
		t.Fatal(err)
	}
}

// Ensure that effects that delete and scan see the transaction's own
// writes, in key order, and that deleted app records leave the state
// digest exact (the reopen recomputes it).
func TestEffect_ScanAndDelete(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		var seen []string
		f.effects = map[string]Effect{"sweep": {Buckets: []string{"app_a", "app_b"}, Apply: func(tx EffectTx, in EffectInput) error {
			seen = seen[:0]
			for _, k := range []string{"k3", "k1", "k2"} {
				if err := tx.Put("app_a", []byte(in.Action+"/"+k), in.Value); err != nil {
					return err
				}
			}
			if err := tx.Put("app_b", []byte(in.Action), []byte("b")); err != nil {
				return err
			}
			if in.Action == "a2" {
				if err := tx.Delete("app_a", []byte("a1/k2")); err != nil {
					return err
				}
			}
			return tx.Scan("app_a", nil, func(k, v []byte) error {
				seen = append(seen, string(k))
				return nil
			})
		}}}
		f.reopen()
		if _, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: effTarget, Value: []byte("{}"), Kind: TargetFunc, Effect: "sweep"}); err != nil {
			t.Fatal(err)
		}
		for _, action := range []string{"a1", "a2"} {
			w := f.effWorker("w-"+action, action, `"x"`)
			if res := f.submit(w.name, w.envelope); res.Outcome != Applied {
				t.Fatalf("submit = %+v", res)
			}
		}
		want := []string{"a1/k1", "a1/k3", "a2/k1", "a2/k2", "a2/k3"}
		if !slices.Equal(seen, want) {
			t.Errorf("scan saw %q, want %q", seen, want)
		}
		f.reopen()
		if v, err := f.r.AppGet("app_a", []byte("a1/k2")); err != nil || v != nil {
			t.Errorf("deleted record = %q, %v", v, err)
		}
		if v, err := f.r.AppGet("app_b", []byte("a2")); err != nil || string(v) != "b" {
			t.Errorf("app_b record = %q, %v", v, err)
		}
	})
}

// Ensure that group-committed submits to func targets give the results,
// and leave the app records, of the same calls one by one: a batch of
// applied, refused, repeated, stale and misaddressed submits over several
// scopes whose effects share a counter.
func TestEffect_GroupCommitMatchesOneByOne(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		type plan struct {
			scope, value string
			caller       string // "" is the worker
			hold         bool
		}
		plans := []plan{
			{scope: "s1", value: `{"v":1}`},
			{scope: "s2", value: `{"refuse":1}`},
			{scope: "s1", value: `{"v":1}`},
			{scope: "s3", value: `{"v":3}`},
			{scope: "s4", value: `{"v":4}`, hold: true},
			{scope: "s5", value: `{"v":5}`, caller: "intruder"},
			{scope: "s6", value: `{"v":6}`},
		}
		setup := func() (*fixture, []*gcCall) {
			f, _ := effFixture(t, s)
			var calls []*gcCall
			envs := map[string][]byte{}
			for _, p := range plans {
				tg := "t-" + p.scope
				env, ok := envs[p.scope]
				if !ok {
					if _, err := f.admin.CreateScope(f.ctx, p.scope); err != nil {
						t.Fatal(err)
					}
					if _, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: p.scope, Name: tg, Value: []byte("{}"), Kind: TargetFunc, Effect: "ledger"}); err != nil {
						t.Fatal(err)
					}
					req := f.request(&Request{V: 1, Action: "act-" + p.scope, Target: tg, Set: ptr([]byte(p.value))})
					g, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: p.scope, Executor: "w", Claim: "c", Request: req})
					if err != nil {
						t.Fatal(err)
					}
					env = f.envelope(&Envelope{V: 1, Scope: p.scope, Epoch: g.Epoch, Grant: g.ID, Executor: "w", Claim: "c", Request: req})
					envs[p.scope] = env
				}
				if p.hold {
					calls = append(calls, &gcCall{hold: &HoldRequest{Scopes: []string{p.scope}, Reason: "r"}})
				}
				caller := p.caller
				if caller == "" {
					caller = "w"
				}
				calls = append(calls, &gcCall{caller: caller, envelope: env})
			}
			return f, calls
		}
		batched, bcalls := setup()
		if commits := inOneBatch(t, batched, bcalls); commits != 1 {
			t.Errorf("%d calls took %d commits, want 1", len(bcalls), commits)
		}
		alone, acalls := setup()
		for _, c := range acalls {
			c.run(alone.ctx, alone.r)
		}
		for i := range bcalls {
			if got, want := outcome(bcalls[i]), outcome(acalls[i]); got != want || bcalls[i].res.Detail != acalls[i].res.Detail {
				t.Errorf("call %d: batched %s %q, alone %s %q", i, got, bcalls[i].res.Detail, want, acalls[i].res.Detail)
			}
		}
		if got, want := appRecords(t, batched), appRecords(t, alone); !slices.Equal(got, want) {
			t.Errorf("app records batched %q, alone %q", got, want)
		}
		if got := appValue(t, batched, "count"); got != "3" {
			t.Errorf("count = %q, want 3 (s1, s3, s6)", got)
		}
	})
}

// appRecords lists every app record of f's store as "key=value".
func appRecords(t testing.TB, f *fixture) []string {
	t.Helper()
	var out []string
	err := f.r.view(func(tx engine.Tx) error {
		out = out[:0]
		err := tx.Scan(bucketApp, nil, func(k, v []byte) error {
			out = append(out, fmt.Sprintf("%q=%s", k, v))
			return nil
		})
		if errors.Is(err, engine.ErrBucketNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Ensure that a stored target record of a kind this receiver does not
// write is a format error, never taken for an internal target, and that
// an internal target's record encodes as it did before kinds existed.
func TestEffect_TargetKindRecords(t *testing.T) {
	tests := []struct {
		rec  targetRecord
		ok   bool
		kind TargetKind
	}{
		{targetRecord{Scope: "s", Revision: 1, Value: []byte("v")}, true, TargetInternal},
		{targetRecord{Scope: "s", Revision: 1, Kind: TargetFunc, Effect: "e"}, true, TargetFunc},
		{targetRecord{Scope: "s", Revision: 1, Kind: "kubernetes"}, false, ""},
		{targetRecord{Scope: "s", Revision: 1, Kind: TargetInternal}, false, ""},
		{targetRecord{Scope: "s", Revision: 1, Kind: TargetFunc}, false, ""},
		{targetRecord{Scope: "s", Revision: 1, Effect: "e"}, false, ""},
	}
	for _, tt := range tests {
		raw, err := encodeCanonical(&tt.rec)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseTarget("t", raw)
		if tt.ok != (err == nil) || (err != nil && !errors.Is(err, ErrBadFormat)) {
			t.Errorf("%+v: %v", tt.rec, err)
			continue
		}
		if err == nil && got.kind() != tt.kind {
			t.Errorf("%+v: kind %s", tt.rec, got.kind())
		}
	}
	// The internal record's bytes: {"scope":"s","value":h'76',"revision":1}.
	raw, _ := encodeCanonical(&targetRecord{Scope: "s", Revision: 1, Value: []byte("v")})
	if want := "\xa3\x65scope\x61s\x65value\x41v\x68revision\x01"; string(raw) != want {
		t.Errorf("internal target record %x, want %x", raw, want)
	}
}

// Ensure that removing slots from a record table keeps every other slot
// findable and the removed ones gone, across probe runs that wrap.
func TestRecordTable_Remove(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab recordTable
	type slot struct {
		tag uint64
		fp  recordFP
	}
	var live []slot
	for round := range 2000 {
		if len(live) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(live))
			s := live[i]
			if !tab.remove(s.tag, s.fp) {
				t.Fatalf("round %d: remove of a present slot failed", round)
			}
			live = slices.Delete(live, i, i+1)
			if tab.find(s.tag, s.fp) {
				t.Fatalf("round %d: removed slot still found", round)
			}
		} else {
			// Few distinct homes, so that runs are long and collide.
			s := slot{tag: uint64(rng.IntN(40)) + 1, fp: recordFP{rng.Uint64(), rng.Uint64()}}
			tab.insert(s.tag, s.fp)
			live = append(live, s)
		}
		for _, s := range live {
			if !tab.find(s.tag, s.fp) {
				t.Fatalf("round %d: live slot %v lost", round, s)
			}
		}
		if tab.n != len(live) {
			t.Fatalf("round %d: n %d, want %d", round, tab.n, len(live))
		}
	}
}

// Ensure that EffectTx refuses what an effect may not do, each with a
// precise error and nothing written: a bucket it did not declare (for
// every operation), an empty or oversized key or value, and any use after
// the effect returned.
func TestEffectTx_Refusals(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	var kept EffectTx
	errs := map[string]error{}
	f.effects = map[string]Effect{"probe": {Buckets: []string{effBucket}, Apply: func(tx EffectTx, in EffectInput) error {
		kept = tx
		_, errs["get other"] = tx.Get("app_other", []byte("k"))
		errs["put other"] = tx.Put("app_other", []byte("k"), []byte("v"))
		errs["delete other"] = tx.Delete("app_other", []byte("k"))
		errs["scan other"] = tx.Scan("app_other", nil, func(k, v []byte) error { return nil })
		errs["put fence bucket"] = tx.Put("targets", []byte("k"), []byte("v"))
		errs["put empty key"] = tx.Put(effBucket, nil, []byte("v"))
		errs["put long key"] = tx.Put(effBucket, make([]byte, MaxAppKeySize+1), []byte("v"))
		errs["put long value"] = tx.Put(effBucket, []byte("k"), make([]byte, MaxAppValueSize+1))
		errs["scan long from"] = tx.Scan(effBucket, make([]byte, MaxAppKeySize+1), func(k, v []byte) error { return nil })
		return nil
	}}}
	f.reopen()
	if _, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: effTarget, Value: []byte("{}"), Kind: TargetFunc, Effect: "probe"}); err != nil {
		t.Fatal(err)
	}
	w := f.effWorker("worker-a", "a1", `{}`)
	if res := f.submit(w.name, w.envelope); res.Outcome != Applied {
		t.Fatalf("submit = %+v", res)
	}
	tests := []struct {
		name string
		want error
	}{
		{"get other", ErrEffectBucket},
		{"put other", ErrEffectBucket},
		{"delete other", ErrEffectBucket},
		{"scan other", ErrEffectBucket},
		{"put fence bucket", ErrEffectBucket},
		{"put empty key", ErrInvalidArgument},
		{"put long key", ErrInvalidArgument},
		{"put long value", ErrInvalidArgument},
		{"scan long from", ErrInvalidArgument},
	}
	for _, tt := range tests {
		if !errors.Is(errs[tt.name], tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, errs[tt.name], tt.want)
		}
	}
	if err := kept.Put(effBucket, []byte("late"), []byte("v")); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Put after the effect returned: %v", err)
	}
	if recs := appRecords(t, f); len(recs) != 0 {
		t.Errorf("app records %q", recs)
	}
}

// BenchmarkSubmitEffect measures an applied, durable write to an internal
// target and to a func target whose effect writes two app records (the
// ledger), so that the difference is what the effect costs: its overlay,
// its reads and the digest terms of its records. The hold and activation
// each write needs are outside the timer.
func BenchmarkSubmitEffect(b *testing.B) {
	for _, kind := range []TargetKind{TargetInternal, TargetFunc} {
		b.Run(string(kind), func(b *testing.B) {
			f := newFixture(b, defect.Variant{})
			l := &ledger{}
			f.effects = map[string]Effect{"ledger": l.effect()}
			f.reopen()
			if _, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: effTarget, Value: []byte("{}"), Kind: kind,
				Effect: map[TargetKind]string{TargetFunc: "ledger"}[kind]}); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				b.StopTimer()
				i++
				w := f.effWorker("w", "a"+strconv.Itoa(i), `{"v":`+strconv.Itoa(i)+`}`)
				b.StartTimer()
				if res, err := f.r.Submit(f.ctx, w.name, w.envelope); err != nil || res.Outcome != Applied {
					b.Fatal(res, err)
				}
			}
		})
	}
}
