package kvfence

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// rtCounter is an effect over effBucket that reads "count", writes it
// plus one, and records "entry/ACTION" = the count it read.
func rtCounter(tx EffectTx, in EffectInput) error {
	raw, err := tx.Get(effBucket, []byte("count"))
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(string(raw))
	if err := tx.Put(effBucket, []byte("entry/"+in.Action), []byte(strconv.Itoa(n))); err != nil {
		return err
	}
	return tx.Put(effBucket, []byte("count"), []byte(strconv.Itoa(n+1)))
}

// Attack: a batch whose first call's effect writes a record the second
// call's effect reads, and whose first call then fails after its effect
// wrote (the receipt's put faults). The batch must roll back and each
// call run alone: the second call then must not see the first's write,
// and the app records must be those of the calls one by one.
func TestRedteamEffect_BatchFaultAfterEffect(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		setup := func() (*fixture, []*gcCall) {
			f := rtFixture(t, s, []string{effBucket}, rtCounter)
			boom := errors.New("injected receipt fault")
			f.r.faults.beforeReceipt = func(scope, action string) error {
				if scope == "s1" {
					return boom
				}
				return nil
			}
			var calls []*gcCall
			for _, sc := range []string{"s1", "s2", "s3"} {
				tg := "t-" + sc
				if _, err := f.admin.CreateScope(f.ctx, sc); err != nil {
					t.Fatal(err)
				}
				if _, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: sc, Name: tg, Value: []byte("{}"), Kind: TargetFunc, Effect: "rt"}); err != nil {
					t.Fatal(err)
				}
				req := f.request(&Request{V: 1, Action: "act-" + sc, Target: tg, Set: ptr([]byte(`{"v":1}`))})
				g, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: sc, Executor: "w", Claim: "c", Request: req})
				if err != nil {
					t.Fatal(err)
				}
				env := f.envelope(&Envelope{V: 1, Scope: sc, Epoch: g.Epoch, Grant: g.ID, Executor: "w", Claim: "c", Request: req})
				calls = append(calls, &gcCall{caller: "w", envelope: env})
			}
			return f, calls
		}
		batched, bcalls := setup()
		inOneBatch(t, batched, bcalls)
		alone, acalls := setup()
		for _, c := range acalls {
			c.run(alone.ctx, alone.r)
		}
		for i := range bcalls {
			if got, want := outcome(bcalls[i]), outcome(acalls[i]); got != want {
				t.Errorf("call %d: batched %s (%v), alone %s (%v)", i, got, bcalls[i].err, want, acalls[i].err)
			}
		}
		if outcome(bcalls[0]) != "error" {
			t.Errorf("call 0 = %s, want the injected fault", outcome(bcalls[0]))
		}
		if got, want := appRecords(t, batched), appRecords(t, alone); !slices.Equal(got, want) {
			t.Errorf("app records batched %q, alone %q", got, want)
		}
		if got := appValue(t, batched, "count"); got != "2" {
			t.Errorf("count = %q, want 2", got)
		}
		batched.r.faults.beforeReceipt = nil
		batched.reopen()
	})
}

// Attack: on etcd, an effect that is (wrongly) not deterministic: each run
// writes a key of its own. A conflict forces a second run; only the
// writes of the run that commits may remain, and the digest must agree at
// the reopen.
func TestRedteamEffect_EtcdRetryKeepsLastRunOnly(t *testing.T) {
	s := engines[1].new(t)
	var runs atomic.Int64
	var hook atomic.Pointer[func()]
	f := rtFixture(t, s, []string{effBucket}, func(tx EffectTx, in EffectInput) error {
		n := runs.Add(1)
		if err := rtCounter(tx, in); err != nil {
			return err
		}
		if h := hook.Load(); h != nil {
			(*h)()
		}
		return tx.Put(effBucket, []byte(fmt.Sprintf("run-%d", n)), []byte("x"))
	})
	first := f.effWorker("worker-a", "a1", `{"v":1}`)
	if res := f.submit(first.name, first.envelope); res.Outcome != Applied {
		t.Fatalf("submit = %+v", res)
	}
	count := appValue(t, f, "count")
	cli := etcdClient(t)
	defer cli.Close()
	key := f.store.prefix + string(bucketApp) + "/" + string(appKey(effBucket, []byte("count")))
	var bumped atomic.Bool
	fn := func() {
		if bumped.CompareAndSwap(false, true) {
			if _, err := cli.Put(context.Background(), key, count); err != nil {
				t.Error(err)
			}
		}
	}
	hook.Store(&fn)
	second := f.effWorker("worker-b", "b1", `{"v":2}`)
	before := runs.Load()
	if res := f.submit(second.name, second.envelope); res.Outcome != Applied {
		t.Fatalf("submit = %+v", res)
	}
	last := runs.Load()
	if last-before < 2 {
		t.Fatalf("no retry was forced (%d runs)", last-before)
	}
	for n := before + 1; n <= last; n++ {
		got := appValue(t, f, fmt.Sprintf("run-%d", n))
		if want := map[bool]string{true: "x", false: ""}[n == last]; got != want {
			t.Errorf("run-%d = %q, want %q (only the committed run's writes)", n, got, want)
		}
	}
	if got := appValue(t, f, "count"); got != "2" {
		t.Errorf("count = %q", got)
	}
	hook.Store(nil)
	f.reopen()
}

// Attack: an effect that ends its goroutine (runtime.Goexit, which
// t.Fatal in an effect written in a test does) instead of returning or
// panicking. The receiver must go on deciding later submits.
func TestRedteamEffect_GoexitStopsReceiver(t *testing.T) {
	var exit atomic.Bool
	exit.Store(true)
	f := rtFixture(t, engines[0].new(t), []string{effBucket}, func(tx EffectTx, in EffectInput) error {
		if exit.Load() {
			runtime.Goexit()
		}
		return rtCounter(tx, in)
	})
	a := f.effWorker("worker-a", "a1", `{"v":1}`)
	b := f.effWorker("worker-b", "b1", `{"v":2}`) // holds out a; b is the active grant
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		f.r.Submit(f.ctx, b.name, b.envelope)
	}()
	<-gone
	exit.Store(false)
	done := make(chan Result, 1)
	go func() {
		res, _ := f.r.Submit(f.ctx, b.name, b.envelope)
		done <- res
	}()
	select {
	case res := <-done:
		if res.Outcome != Applied {
			t.Errorf("the submit after = %+v", res)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("after an effect called runtime.Goexit, the next submit did not return in 10s: the commit queue's lead was never handed on")
	}
	_ = a
}
