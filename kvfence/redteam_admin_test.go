package kvfence

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// rtCall is one call of the red-team schedule, with when it was sent
// relative to the fixture scope's hold.
type rtCall struct {
	gcCall
	worker string
	// afterHold is set when the call was sent after the fixture scope's
	// hold was acknowledged.
	afterHold bool
	// anchorAtReturn is the durable anchor's seq read just after the call
	// returned.
	anchorAtReturn uint64
	id             string
}

// Ensure, under load, that the cut batch and the rerun of a failed batch
// keep every promise of the group commit: workers A and B submit while an
// administrator holds a third scope again and again, each hold sent
// three times at once with one ID, and finally holds worker A's scope;
// worker B's submits always fault (their batches fail and run again call
// by call), and the anchor writes are slowed at random. Every call must
// get its own outcome: B exactly the injected fault, A no error at all,
// never already_applied before the applied write, nothing applied after
// the hold, everything sent after the hold's acknowledgment refused; one
// hold per ID, its repeats answered Repeated at the same epoch; and no
// call is answered before the anchor covers its entry.
func TestRedteamAdmin_StressCutsAndReruns(t *testing.T) {
	rounds := 3
	if testing.Short() {
		rounds = 1
	}
	forEngines(t, func(t *testing.T, s *store) {
		for i := range rounds {
			t.Run(fmt.Sprint(i), func(t *testing.T) { stressCuts(t, s.fresh(t), gcSeed+uint64(i), false) })
		}
	})
}

// Ensure the same on etcd with a second receiver on the prefix, whose
// commits move the head under the first one's batches (errHeadMoved, a
// resync), while holds are cut in and repeated on either receiver.
func TestRedteamAdmin_StressCutsAndRerunsTwoReceivers(t *testing.T) {
	rounds := 3
	if testing.Short() {
		rounds = 1
	}
	for i := range rounds {
		t.Run(fmt.Sprint(i), func(t *testing.T) { stressCuts(t, engines[1].new(t), gcSeed+uint64(i), true) })
	}
}

func stressCuts(t *testing.T, s *store, seed uint64, peers bool) {
	f := gcFixtureOn(t, s, seed)
	a, b := twoWorkers(t, f)
	third := thirdScope(t, f)
	boom := errors.New("injected fault")
	faults := func(e *audit.Entry) error {
		if e.Kind == KindSubmit && e.Action == "act-b" {
			return boom
		}
		return nil
	}
	f.r.faults.beforeAudit = faults
	rs := []*Receiver{f.r}
	if peers {
		other, err := f.openStore(f.opts(), defect.Variant{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close() })
		other.faults.beforeAudit = faults
		rs = append(rs, other)
	}
	var anchorMu sync.Mutex
	anchorRng := rand.New(rand.NewPCG(seed, 99))
	for _, r := range rs {
		r.opts.Anchor = &refusingAnchor{AnchorStore: f.anchor, fail: func(audit.SignedCheckpoint) error {
			anchorMu.Lock()
			d := time.Duration(anchorRng.IntN(1500)) * time.Microsecond
			anchorMu.Unlock()
			time.Sleep(d)
			return nil
		}}
	}
	durable := func() uint64 {
		sc, err := f.anchor.Load()
		if err != nil {
			t.Errorf("anchor: %v", err)
		}
		return sc.Seq
	}

	var held atomic.Bool
	var mu sync.Mutex
	var calls []*rtCall
	record := func(c *rtCall) {
		c.anchorAtReturn = durable()
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
	}
	const workers, perWorker = 12, 60
	var wg sync.WaitGroup
	for w := range workers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)+1))
		wg.Go(func() {
			for range perWorker {
				c := &rtCall{worker: "a"}
				c.caller, c.envelope = "worker-a", a.envelope
				if rng.IntN(3) == 0 {
					c.worker = "b"
					c.caller, c.envelope = "worker-b", b.envelope
				}
				c.afterHold = held.Load()
				c.run(f.ctx, rs[w%len(rs)])
				record(c)
			}
		})
	}
	var fence *rtCall
	wg.Go(func() {
		for i := range 30 {
			var hw sync.WaitGroup
			for j := range 3 {
				c := &rtCall{id: fmt.Sprintf("hold-%d", i)}
				c.hold = &HoldRequest{ID: c.id, Scopes: []string{third}, Reason: "again"}
				hw.Go(func() {
					c.run(f.ctx, rs[j%len(rs)])
					record(c)
				})
			}
			hw.Wait()
			if i == 20 {
				fence = &rtCall{id: "fence"}
				fence.hold = &HoldRequest{ID: "fence", Scopes: []string{fixScope}, Reason: "worker A is stale"}
				fence.run(f.ctx, f.r)
				held.Store(true)
				record(fence)
			}
		}
	})
	wg.Wait()
	for _, r := range rs {
		r.faults = faultHooks{}
	}
	if peers {
		// The fixture's receiver learns the head the other one moved,
		// which the fixture's own chain check compares.
		if err := f.r.exec(0, func(*wtx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if fence.err != nil {
		t.Fatalf("the fence hold: %v", fence.err)
	}

	var applied *rtCall
	holds := map[string][]*rtCall{}
	seqs := map[uint64]*rtCall{}
	busy := 0
	for _, c := range calls {
		if peers && errors.Is(c.err, ErrStorageBusy) && !errors.Is(c.err, boom) {
			// Two receivers' batches conflicted past the retry bound:
			// the call's own transaction failed, and changed nothing.
			busy++
			continue
		}
		switch {
		case c.hold != nil:
			holds[c.id] = append(holds[c.id], c)
		case c.worker == "b":
			if !errors.Is(c.err, boom) {
				t.Errorf("worker B's submit: %s %v, want the injected fault", outcome(&c.gcCall), c.err)
			}
			continue
		case c.err != nil:
			t.Errorf("worker A's submit: %v, want an outcome of its own", c.err)
			continue
		case c.res.Outcome == Applied:
			if applied != nil {
				t.Errorf("worker A's write applied twice, at seq %d and %d", applied.seq(), c.seq())
			}
			applied = c
		}
		if c.err != nil {
			continue
		}
		if !(c.hold != nil && c.held.Repeated) {
			if o := seqs[c.seq()]; o != nil {
				t.Errorf("%v and %v both at seq %d", o, c, c.seq())
			}
			seqs[c.seq()] = c
		}
		if c.anchorAtReturn < c.seq() {
			t.Errorf("%v answered with its entry at seq %d while the anchor was at %d", &c.gcCall, c.seq(), c.anchorAtReturn)
		}
	}
	if applied != nil && applied.seq() > fence.seq() {
		t.Errorf("worker A's write applied at seq %d, after the hold at %d", applied.seq(), fence.seq())
	}
	for _, c := range calls {
		if c.hold != nil || c.worker != "a" || c.err != nil {
			continue
		}
		switch o := outcome(&c.gcCall); {
		case o == "already_applied/" && (applied == nil || c.seq() < applied.seq()):
			t.Errorf("already_applied at seq %d, before the write applied (%v)", c.seq(), applied)
		case c.afterHold && c.res.Outcome != Denied:
			t.Errorf("a submit sent after the hold's acknowledgment: %s at seq %d", o, c.seq())
		case c.res.Outcome == Denied && c.seq() < fence.seq():
			t.Errorf("denied %s at seq %d, before the hold at %d", c.res.Reason, c.seq(), fence.seq())
		}
	}
	for id, hs := range holds {
		first := 0
		for _, h := range hs {
			if h.err != nil && !(peers && errors.Is(h.err, ErrStorageBusy)) {
				t.Errorf("hold %s: %v", id, h.err)
				continue
			}
			if h.err != nil {
				continue
			}
			if !h.held.Repeated {
				first++
			}
			if hs[0].err == nil && (h.held.Scopes[0].Epoch != hs[0].held.Scopes[0].Epoch || h.seq() != hs[0].seq()) {
				t.Errorf("hold %s: epoch %d at seq %d and epoch %d at seq %d", id, h.held.Scopes[0].Epoch, h.seq(), hs[0].held.Scopes[0].Epoch, hs[0].seq())
			}
			if h.anchored < h.seq() {
				t.Errorf("hold %s acknowledged by the checkpoint at %d, before its entry at %d", id, h.anchored, h.seq())
			}
		}
		if len(hs) > 0 && first != 1 {
			t.Errorf("hold %s: %d calls not repeated, want 1", id, first)
		}
	}
	t.Logf("%d calls (%d busy), %d commits", len(calls), busy, f.r.queue.commits.Load())
}

// Ensure that the calls a cut leaves out get no part of the outcome of
// the transaction that ran before the cut: a hold arrives while the first
// submit of a batch is decided, the batch is cut there, and its commit's
// outcome is unknown (applied, then reported unknown). The first submit
// gets ErrOutcomeUnknown; worker B's submits, which did not run in it,
// run after the hold and get outcomes of their own.
func TestRedteamAdmin_CutCallsGetNoUnknownOutcome(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := gcFixtureOn(t, s, gcSeed)
		a, b := twoWorkers(t, f)
		third := thirdScope(t, f)
		f.r.Close()
		u := &unknownEngine{Engine: f.store.rawEngine(t)}
		r, err := openWith(u, "wrapped "+s.name, false, f.opts(), defect.Variant{})
		if err != nil {
			t.Fatal(err)
		}
		f.r, f.admin = r, r.Admin()

		first := &gcCall{caller: "worker-a", envelope: a.envelope}
		calls := []*gcCall{first,
			{caller: "worker-b", envelope: b.envelope},
			{caller: "worker-b", envelope: b.envelope},
			{caller: "worker-b", envelope: b.envelope},
		}
		hold := &gcCall{hold: &HoldRequest{Scopes: []string{third}, Reason: "cuts the batch"}}
		var wg sync.WaitGroup
		var once sync.Once
		f.r.faults.beforeAudit = func(e *audit.Entry) error {
			if e.Kind == KindSubmit && e.Action == "act-a" {
				once.Do(func() {
					wg.Go(func() { hold.run(f.ctx, f.r) })
					if !queued(f.r, 1) {
						t.Error("the hold did not queue")
					}
				})
			}
			return nil
		}
		entered, release := make(chan struct{}), make(chan struct{})
		wg.Go(func() {
			if err := f.r.exec(0, func(*wtx) error {
				close(entered)
				<-release
				return nil
			}); err != nil {
				t.Errorf("blocking write: %v", err)
			}
		})
		<-entered
		// The blocking write's Update has begun: the next one, the
		// batch's, commits and is reported unknown.
		u.next.Store(1)
		for i, c := range calls {
			wg.Go(func() { c.run(f.ctx, f.r) })
			if !queued(f.r, i+1) {
				t.Fatalf("%d calls did not queue", i+1)
			}
		}
		close(release)
		wg.Wait()
		f.r.faults = faultHooks{}
		if !errors.Is(first.err, ErrOutcomeUnknown) {
			t.Errorf("the submit that ran before the cut: %s %v, want ErrOutcomeUnknown", outcome(first), first.err)
		}
		if hold.err != nil {
			t.Errorf("the hold: %v", hold.err)
		}
		want := []string{"applied/", "already_applied/", "already_applied/"}
		for i, c := range calls[1:] {
			if c.err != nil || outcome(c) != want[i] {
				t.Errorf("submit %d, cut off before it ran: %s %v, want %s", i+1, outcome(c), c.err, want[i])
			} else if c.seq() < hold.seq() {
				t.Errorf("submit %d at seq %d, before the hold at %d", i+1, c.seq(), hold.seq())
			}
		}
	})
}

// Ensure that a hold sent twice with one ID stays one hold when its batch
// fails and is run again call by call and cut after the first submit: the
// first call holds, the repeat answers Repeated at the same epoch and
// entry, both are acknowledged by a checkpoint that covers the entry, and
// the submits cut off run after them with outcomes of their own.
func TestRedteamAdmin_RepeatedHoldAcrossRerunCut(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := gcFixtureOn(t, s, gcSeed)
		a, b := twoWorkers(t, f)
		third := thirdScope(t, f)
		boom := errors.New("injected fault")
		f.r.faults.beforeAudit = func(e *audit.Entry) error {
			if e.Action == "act-b" && e.Kind == KindSubmit {
				return boom
			}
			return nil
		}
		req := HoldRequest{ID: "once", Scopes: []string{third}, Reason: "sent twice"}
		h1, h2 := &gcCall{hold: &req}, &gcCall{hold: &req}
		calls := []*gcCall{
			{caller: "worker-a", envelope: a.envelope},
			{caller: "worker-b", envelope: b.envelope},
			{caller: "worker-a", envelope: a.envelope},
			h1, h2,
		}
		inOneBatch(t, f, calls)
		f.r.faults = faultHooks{}
		if h1.err != nil || h2.err != nil {
			t.Fatalf("holds: %v, %v", h1.err, h2.err)
		}
		if h1.held.Repeated || !h2.held.Repeated {
			t.Errorf("repeated: %v, %v; want false, true", h1.held.Repeated, h2.held.Repeated)
		}
		if h1.seq() != h2.seq() || h1.held.Scopes[0].Epoch != h2.held.Scopes[0].Epoch {
			t.Errorf("one ID held twice: epoch %d at seq %d, epoch %d at seq %d",
				h1.held.Scopes[0].Epoch, h1.seq(), h2.held.Scopes[0].Epoch, h2.seq())
		}
		for i, h := range []*gcCall{h1, h2} {
			if h.anchored < h.seq() {
				t.Errorf("hold %d acknowledged by the checkpoint at %d, before its entry at %d", i, h.anchored, h.seq())
			}
		}
		if !errors.Is(calls[1].err, boom) {
			t.Errorf("the faulted submit: %s %v, want the injected fault", outcome(calls[1]), calls[1].err)
		}
		if outcome(calls[0]) != "applied/" || outcome(calls[2]) != "already_applied/" {
			t.Errorf("worker A's submits: %s %v, %s %v", outcome(calls[0]), calls[0].err, outcome(calls[2]), calls[2].err)
		}
		if calls[2].seq() < h1.seq() {
			t.Errorf("the submit cut off at seq %d, before the hold at %d", calls[2].seq(), h1.seq())
		}
	})
}
