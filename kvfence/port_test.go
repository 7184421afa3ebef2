package kvfence

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/boltengine"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/internal/defect"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// rawEngine opens the store's engine without a receiver over it.
func (s *store) rawEngine(t testing.TB) engine.Engine {
	t.Helper()
	if s.path == "" {
		return s.engine(t, nil)
	}
	e, err := boltengine.OpenFile(s.path, boltengine.FileOptions{Errors: fileErrors, Timeout: time.Second, CheckPages: true,
		FillPercent: fillPercent})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Ensure that the receiver's store put back to its content from before a
// hold (a copied bbolt file; on etcd every key under the prefix deleted
// and the copies put back, which is what a snapshot restore gives the
// receiver) is refused at open as a rollback and reported so by
// VerifyChain, that without the anchor check it would accept the
// superseded grant, and that a recovery admission re-admits it with the
// old grant unusable.
func TestOpen_RestoredStoreIsRollbackAndRecovers(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		s = s.fresh(t)
		clock := newClock()
		anchor := audit.FileAnchor{Path: filepath.Join(t.TempDir(), "r.anchor")}
		recoveryPub := recoveryKey.Public().(ed25519.PublicKey)
		if err := s.init(t, &InitOptions{ReceiverID: "rcv", Key: testKey, Anchor: anchor, RecoveryKey: recoveryPub, Now: clock.Now}); err != nil {
			t.Fatal(err)
		}
		f := &fixture{t: t, path: s.path, clock: clock, ctx: t.Context(), anchor: anchor, store: s}
		r, err := f.openStore(f.opts(), defect.Variant{})
		if err != nil {
			t.Fatal(err)
		}
		f.r, f.admin = r, r.Admin()
		if _, err := f.admin.CreateScope(f.ctx, fixScope); err != nil {
			t.Fatal(err)
		}
		if _, err := f.admin.CreateTarget(f.ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
			t.Fatal(err)
		}
		a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
		f.r.Close()
		before := s.snapshot(t)
		f.reopen()
		f.hold("worker-a lease expired")
		b := f.activate("worker-b", "claim-2", f.patchRequest("raise-retention"))
		if res := f.submit("worker-b", b.envelope); res.Outcome != Applied {
			t.Fatalf("worker B: %+v", res)
		}
		f.r.Close()
		s.restore(t, before)

		if _, err := s.open(t, f.opts(), defect.Variant{}); !errors.Is(err, ErrRollbackDetected) {
			t.Fatalf("open(restored) = %v, want ErrRollbackDetected", err)
		}
		pub := testKey.Public().(ed25519.PublicKey)
		rep, err := s.verify(t, VerifyOptions{Anchor: anchor, PublicKey: pub})
		if err != nil || rep.Problem != audit.ProblemRollbackDetected {
			t.Fatalf("VerifyChain(restored) = %+v, %v; want rollback_detected", rep, err)
		}
		// The counterexample: without the anchor check the restored
		// store accepts A's superseded grant.
		v, err := s.open(t, &Options{Key: testKey, Now: clock.Now}, defect.Variant{SkipAnchor: true})
		if err != nil {
			t.Fatal(err)
		}
		res, err := v.Submit(f.ctx, "worker-a", a.envelope)
		v.Close()
		if err != nil || res.Outcome != Applied {
			t.Fatalf("restored store without the anchor check: %+v, %v; this test cannot go red without the anchor", res, err)
		}
		s.restore(t, before)

		withoutDefects(t)
		q, err := s.inspect(t, anchor)
		if err != nil {
			t.Fatal(err)
		}
		adm := signed(t, recoveryKey, audit.Admission{Receiver: "rcv", SupersededAnchor: q.Anchor, AdmittedHead: q.Head,
			AdmittedState: q.State, At: clock.Now().UnixNano(), Expires: clock.Now().Add(time.Hour).UnixNano(), Reason: "restored from before the hold"})
		rr, err := s.recover(t, adm, RecoverOptions{Key: testKey, Anchor: anchor, RecoveryKey: recoveryPub, Now: clock.Now})
		if err != nil {
			t.Fatalf("Recover: %v", err)
		}
		if len(rr.Scopes) != 1 || rr.Scopes[0].Epoch != 3 || rr.GrantsRevoked != 1 {
			t.Fatalf("recover result %+v, want the scope at epoch 3 and A's grant revoked", rr)
		}
		if f.r, err = s.open(t, f.opts(), defect.Variant{}); err != nil {
			t.Fatalf("open after recovery: %v", err)
		}
		f.admin = f.r.Admin()
		wantDenied(t, f.submit("worker-a", a.envelope), ReasonReceiverHeld)
		f.activate("worker-c", "claim-3", f.patchRequest("raise-retention"))
		wantDenied(t, f.submit("worker-a", a.envelope), ReasonStaleEpoch)
		checkChain(t, f.r)
		f.r.Close()
		if rep, err := s.verify(t, VerifyOptions{Anchor: anchor, PublicKey: pub}); err != nil || !rep.OK() {
			t.Fatalf("VerifyChain after recovery = %+v, %v", rep, err)
		}
	})
}

// unknownEngine reports the outcome of its next Update as unknown, after
// running it (commit) or without running it (lost).
type unknownEngine struct {
	engine.Engine
	// next is 1 to commit and report unknown, 2 to report unknown
	// without writing, 3 to report a conflict past the retry bound
	// without writing, 0 to pass through.
	next atomic.Int32
}

func (u *unknownEngine) Update(ctx context.Context, fn func(engine.Tx) error) error {
	switch u.next.Swap(0) {
	case 1:
		if err := u.Engine.Update(ctx, fn); err != nil {
			return err
		}
		return fmt.Errorf("%w: injected after the commit", engine.ErrOutcomeUnknown)
	case 2:
		return fmt.Errorf("%w: injected before the commit", engine.ErrOutcomeUnknown)
	case 3:
		return fmt.Errorf("%w: injected", engine.ErrConflict)
	}
	return u.Engine.Update(ctx, fn)
}

// Ensure that a write whose outcome is unknown gives the caller an error
// that says so and no verdict, whether it applied or not, and that
// retrying the same envelope is answered from the store: already_applied
// if it had applied, applied once if it had not; and that a conflict past
// the engine's retry bound is ErrStorageBusy.
func TestSubmit_OutcomeUnknown(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		f.r.Close()
		u := &unknownEngine{Engine: f.store.rawEngine(t)}
		r, err := openWith(u, "wrapped "+s.name, false, f.opts(), defect.Variant{})
		if err != nil {
			t.Fatal(err)
		}
		f.r, f.admin = r, r.Admin()

		a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
		u.next.Store(1)
		res, err := f.r.Submit(f.ctx, "worker-a", a.envelope)
		if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, engine.ErrOutcomeUnknown) || res.Outcome != "" {
			t.Fatalf("Submit with an unknown outcome = %+v, %v; want ErrOutcomeUnknown and no verdict", res, err)
		}
		if res := f.submit("worker-a", a.envelope); res.Outcome != AlreadyApplied || res.Revision != 2 {
			t.Fatalf("retry after an unknown outcome that applied: %+v, want already_applied at revision 2", res)
		}

		f.hold("next")
		b := f.activate("worker-b", "claim-2", f.request(&Request{V: 1, Action: "second", Target: fixTarget, Set: ptr([]byte(`{"v":2}`))}))
		u.next.Store(2)
		if res, err := f.r.Submit(f.ctx, "worker-b", b.envelope); !errors.Is(err, ErrOutcomeUnknown) || res.Outcome != "" {
			t.Fatalf("Submit with an unknown outcome = %+v, %v; want ErrOutcomeUnknown and no verdict", res, err)
		}
		if res := f.submit("worker-b", b.envelope); res.Outcome != Applied || res.Revision != 3 {
			t.Fatalf("retry after an unknown outcome that did not apply: %+v, want applied at revision 3", res)
		}
		// A conflict past the engine's retry bound is a busy store:
		// nothing was written, and the call may be made again.
		f.hold("third")
		c := f.activate("worker-c", "claim-3", f.request(&Request{V: 1, Action: "third", Target: fixTarget, Set: ptr([]byte(`{"v":3}`))}))
		u.next.Store(3)
		if res, err := f.r.Submit(f.ctx, "worker-c", c.envelope); !errors.Is(err, ErrStorageBusy) || !errors.Is(err, engine.ErrConflict) || res.Outcome != "" {
			t.Fatalf("Submit with a conflict = %+v, %v; want ErrStorageBusy", res, err)
		}
		if res := f.submit("worker-c", c.envelope); res.Outcome != Applied || res.Revision != 4 {
			t.Fatalf("retry after a conflict: %+v, want applied at revision 4", res)
		}
		// The handle's head caught up with the commit it was not told
		// about, and the state it signs is the store's.
		f.reopen()
	})
}

// Ensure that two receiver processes on one etcd prefix take turns on the
// audit head: a grant superseded by a hold through one is denied through
// the other, whose cached head and state digest are behind; concurrent
// writes through both leave one linear chain, while a third opens the
// prefix again and again without a false alarm; and the store then opens
// with its state digest whole (a deposed handle that signed its stale
// digest would make it ErrStateMismatch).
func TestEtcd_TwoReceiversOnOnePrefix(t *testing.T) {
	s, anchor, opts, one, two := sharedPrefix(t)
	a := one.activate("worker-a", "claim-1", one.patchRequest("raise-retention"))
	two.hold("worker-a deposed")
	wantDenied(t, one.submit("worker-a", a.envelope), ReasonReceiverHeld)
	b := two.activate("worker-b", "claim-2", two.patchRequest("raise-retention"))
	wantDenied(t, one.submit("worker-a", a.envelope), ReasonStaleEpoch)
	if res := one.submit("worker-b", b.envelope); res.Outcome != Applied {
		t.Fatalf("worker B through the other receiver: %+v", res)
	}
	var wg sync.WaitGroup
	var errs atomic.Int32
	for i := range 8 {
		f := []*fixture{one, two}[i%2]
		wg.Go(func() {
			for j := range 5 {
				env := a.envelope
				if j%2 == 0 {
					env = b.envelope
				}
				if _, err := f.r.Submit(f.ctx, "worker-b", env); err != nil {
					t.Errorf("submit: %v", err)
					errs.Add(1)
				}
			}
		})
	}
	// A third process opens the prefix while the two write: the head it
	// checks the anchor and the state against is read after the anchor,
	// with the records, so that it never sees a rollback or a state
	// mismatch that is only another process's commit in between.
	wg.Go(func() {
		for range 6 {
			r, err := s.open(t, opts, defect.Variant{})
			if err != nil {
				t.Errorf("open while two receivers write: %v", err)
				errs.Add(1)
				return
			}
			r.Close()
			rep, err := s.verify(t, VerifyOptions{Anchor: anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
			if err != nil || !rep.OK() {
				t.Errorf("VerifyChain while two receivers write = %+v, %v", rep, err)
				errs.Add(1)
				return
			}
		}
	})
	wg.Wait()
	if errs.Load() > 0 {
		t.FailNow()
	}
	one.r.Close()
	two.r.Close()
	rep, err := s.verify(t, VerifyOptions{Anchor: anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil || !rep.OK() {
		t.Fatalf("VerifyChain after two receivers = %+v, %v", rep, err)
	}
	r, err := s.open(t, opts, defect.Variant{})
	if err != nil {
		t.Fatalf("open after two receivers: %v", err)
	}
	checkChain(t, r)
	r.Close()
}

// Ensure that on an etcd engine whose commits are small, a call too large
// for one commit is refused with ErrTooLarge and writes nothing, and that
// concurrent calls whose batches are too large are split and all decided.
func TestEtcd_TxnLimits(t *testing.T) {
	s := engines[1].new(t)
	anchor := &audit.MemAnchor{}
	if err := s.init(t, &InitOptions{ReceiverID: "small", Key: testKey, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	e := s.engine(t, &etcdengine.Options{MaxTxnOps: 24, MaxRequestBytes: 64 << 10})
	r, err := openWith(e, "etcd "+s.prefix, false, &Options{Key: testKey, Anchor: anchor}, defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f := &fixture{t: t, clock: newClock(), ctx: t.Context(), r: r, admin: r.Admin(), store: s}
	if _, err := f.admin.CreateScope(f.ctx, fixScope); err != nil {
		t.Fatal(err)
	}
	head := r.Head()
	big := []byte(`"` + strings.Repeat("x", 100<<10) + `"`)
	if _, err := f.admin.CreateTarget(f.ctx, fixScope, "big", big); !errors.Is(err, ErrTooLarge) || !errors.Is(err, engine.ErrTxnTooLarge) {
		t.Fatalf("CreateTarget of %d bytes = %v, want ErrTooLarge", len(big), err)
	}
	if _, err := r.Target("big"); !errors.Is(err, ErrUnknownTarget) || r.Head() != head {
		t.Fatalf("a refused call wrote: target %v, head %v -> %v", err, head, r.Head())
	}
	if _, err := f.admin.CreateTarget(f.ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
		t.Fatal(err)
	}
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	// Batches of up to 32 calls: far more than 24 operations, so the
	// leader's batches are halved until they fit.
	r.batchCalls = 32
	commits := r.queue.commits.Load()
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if res, err := r.Submit(f.ctx, "worker-x", a.envelope); err != nil || res.Outcome != Denied {
				t.Errorf("submit: %+v, %v; want a denial", res, err)
			}
		})
	}
	wg.Wait()
	t.Logf("32 calls in %d commits", r.queue.commits.Load()-commits)
	checkChain(t, r)
}

// Ensure that the kvfence package does not link the etcd client: a
// program that embeds the receiver on bbolt carries no etcd code.
func TestDeps_NoEtcd(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "go.etcd.io/etcd") {
			t.Fatalf("kvfence links %s", dep)
		}
	}
	if !strings.Contains(string(out), "go.etcd.io/bbolt") {
		t.Fatal("go list -deps shows no bbolt either: the test reads the wrong list")
	}
}

// Ensure that OpenEngine on an empty etcd prefix is ErrNotInitialized and
// writes nothing, and that InitEngine over a receiver is
// ErrAlreadyInitialized.
func TestEtcd_InitAndOpenRefusals(t *testing.T) {
	s := engines[1].new(t)
	if _, err := s.open(t, &Options{Key: testKey, Anchor: &audit.MemAnchor{}}, defect.Variant{}); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("OpenEngine(empty prefix) = %v, want ErrNotInitialized", err)
	}
	cli := etcdClient(t)
	defer cli.Close()
	if resp, err := cli.Get(t.Context(), s.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("a refused open wrote under the prefix: %v keys, %v", resp.Count, err)
	}
	if err := s.init(t, &InitOptions{ReceiverID: "first", Key: testKey, Anchor: &audit.MemAnchor{}}); err != nil {
		t.Fatal(err)
	}
	if err := s.init(t, &InitOptions{ReceiverID: "second", Key: testKey, Anchor: &audit.MemAnchor{}}); !errors.Is(err, ErrAlreadyInitialized) {
		t.Fatalf("InitEngine over a receiver = %v, want ErrAlreadyInitialized", err)
	}
}

// BenchmarkSubmitEtcd measures denied submits (each recorded in the audit
// chain and the scope's counters) from concurrent writers on the shared
// etcd member, which runs without fsync: what group commit makes
// of etcd's round trips, not a durable rate. ops/s is over all writers.
func BenchmarkSubmitEtcd(b *testing.B) {
	for _, writers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			f := newFixtureOn(b, engines[1].new(b), defect.Variant{})
			a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
			f.hold("stale")
			commits := f.r.queue.commits.Load()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			for range writers {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if res, err := f.r.Submit(f.ctx, "worker-a", a.envelope); err != nil || res.Outcome != Denied {
							b.Errorf("submit: %+v, %v", res, err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			b.ReportMetric(float64(b.N)/float64(f.r.queue.commits.Load()-commits), "calls/commit")
		})
	}
}

// sharedPrefix initialises a receiver on a fresh etcd prefix, opens it
// twice as two processes would, and creates the fixture scope and target
// through the first. It returns the store, its anchor and options, and
// the two handles.
func sharedPrefix(t *testing.T) (s *store, anchor *audit.MemAnchor, opts *Options, one, two *fixture) {
	t.Helper()
	s = engines[1].new(t)
	anchor = &audit.MemAnchor{}
	clock := newClock()
	if err := s.init(t, &InitOptions{ReceiverID: "shared", Key: testKey, Anchor: anchor, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	opts = &Options{Key: testKey, Anchor: anchor, Now: clock.Now}
	open := func() *fixture {
		r, err := s.open(t, opts, defect.Variant{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return &fixture{t: t, clock: clock, ctx: t.Context(), r: r, admin: r.Admin(), store: s}
	}
	one, two = open(), open()
	if _, err := one.admin.CreateScope(one.ctx, fixScope); err != nil {
		t.Fatal(err)
	}
	if _, err := one.admin.CreateTarget(one.ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
		t.Fatal(err)
	}
	return s, anchor, opts, one, two
}
