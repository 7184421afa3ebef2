package kvfence

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// The second scope of the group-commit tests, beside the fixture's.
const (
	gcScope  = "gc/other"
	gcTarget = "gc/other-target"
)

// gcSeed seeds the random schedules; each run prints it.
const gcSeed = 20261202

// gcCall is one write call of a schedule with what it returned. Exactly one
// of the submit, hold and activate fields is set.
type gcCall struct {
	caller   string
	envelope []byte
	hold     *HoldRequest
	activate *ActivateRequest

	res   Result
	held  HoldResult
	grant Grant
	err   error
	// anchored is the seq of the checkpoint that acknowledged a hold.
	anchored uint64
}

// run makes the call on r and records its outcome.
func (c *gcCall) run(ctx context.Context, r *Receiver) {
	switch {
	case c.hold != nil:
		c.held, c.err = r.Admin().Hold(ctx, *c.hold)
		c.anchored = c.held.Checkpoint.Seq
		c.held = heldModuloAnchor(c.held)
	case c.activate != nil:
		c.grant, c.err = r.Admin().Activate(ctx, *c.activate)
	default:
		c.res, c.err = r.Submit(ctx, c.caller, c.envelope)
	}
}

// heldModuloAnchor is a hold's result without what depends on the commit
// that anchored it, which a batch decides: the checkpoint, and the
// checkpoint each acknowledgment names and its signature over it.
func heldModuloAnchor(res HoldResult) HoldResult {
	res.Checkpoint = audit.SignedCheckpoint{}
	res.Scopes = slices.Clone(res.Scopes)
	for i := range res.Scopes {
		ack := res.Scopes[i].Ack.HoldAck
		ack.CheckpointSeq, ack.CheckpointHead = 0, audit.Hash{}
		res.Scopes[i].Ack = audit.SignedHoldAck{HoldAck: ack}
	}
	return res
}

// seq is the audit seq of the call's last entry: its place in the order in
// which the receiver ran the calls.
func (c *gcCall) seq() uint64 {
	switch {
	case c.hold != nil:
		return c.held.AuditSeq
	case c.activate != nil:
		return c.grant.AuditSeq
	}
	return c.res.AuditSeq
}

func (c *gcCall) String() string {
	switch {
	case c.hold != nil:
		return fmt.Sprintf("hold %v", c.hold.Scopes)
	case c.activate != nil:
		return fmt.Sprintf("activate %s for %s", c.activate.Scope, c.activate.Executor)
	}
	return fmt.Sprintf("submit by %s (%d bytes)", c.caller, len(c.envelope))
}

// gcFixture is the fixture with the second scope and target, and a
// deterministic source of grant ids.
func gcFixture(t *testing.T, seed uint64) *fixture {
	t.Helper()
	return gcFixtureOn(t, engines[0].new(t), seed)
}

// gcFixtureOn is gcFixture on a fresh store of s's engine.
func gcFixtureOn(t *testing.T, s *store, seed uint64) *fixture {
	t.Helper()
	f := newFixtureOn(t, s, defect.Variant{})
	if _, err := f.admin.CreateScope(f.ctx, gcScope); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.CreateTarget(f.ctx, gcScope, gcTarget, []byte("plain text")); err != nil {
		t.Fatal(err)
	}
	var seedBytes [32]byte
	seedBytes[0], seedBytes[1] = byte(seed), byte(seed>>8)
	f.r.opts.Rand = rand.NewChaCha8(seedBytes)
	return f
}

// pool is what the workers of a schedule choose from: envelopes good, stale
// and bad, published as the administrator mints grants.
type pool struct {
	mu    sync.Mutex
	calls []gcCall
	good  []gcCall
}

// add publishes a grant's envelopes, the first of which is the good one.
func (p *pool) add(c ...gcCall) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, c...)
	p.good = append(p.good, c[0])
}

// pick prefers the newest good envelopes, which are the ones that can
// still apply, and otherwise takes any envelope.
func (p *pool) pick(rng *rand.Rand) gcCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rng.IntN(2) == 0 {
		return p.good[len(p.good)-1-rng.IntN(min(len(p.good), 2))]
	}
	return p.calls[rng.IntN(len(p.calls))]
}

// mint is one administrator round: hold some scopes, activate a new grant
// in each with a request drawn at random, and publish envelopes for it. It
// runs on one goroutine, so grant ids come from the random source in the
// order the activations commit.
func mint(t *testing.T, f *fixture, rng *rand.Rand, round int, p *pool, record func(*gcCall)) {
	scopes := [][]string{{fixScope}, {gcScope}, {fixScope, gcScope}}[rng.IntN(3)]
	h := &gcCall{hold: &HoldRequest{Scopes: scopes, Reason: fmt.Sprintf("round %d", round)}}
	h.run(f.ctx, f.r)
	record(h)
	for _, scope := range scopes {
		target := map[string]string{fixScope: fixTarget, gcScope: gcTarget}[scope]
		req := &Request{V: 1, Action: fmt.Sprintf("act-%d", round), Target: target}
		switch rng.IntN(8) {
		default:
			req.Set = ptr(fmt.Appendf(nil, `{"data":{"retention_days":"%d"}}`, round))
		case 1:
			req.Set = ptr([]byte("expects a revision"))
			req.ExpectRevision = ptr(uint64(1 + rng.IntN(4)))
		case 2:
			req.Patch = []byte(fixPatch)
		case 3:
			// The same action every time with other bytes: reuse conflicts.
			req.Action = "shared"
			req.Set = ptr(fmt.Appendf(nil, "shared %d", round))
		case 4:
			req.Set = ptr([]byte("expects a value"))
			req.ExpectValue = ptr([]byte(fixValue))
		}
		raw := f.request(req)
		// Another request for the same action, which the grant does not bind.
		unapproved := f.request(&Request{V: 1, Action: req.Action, Target: target, Set: ptr([]byte("not approved"))})
		executor, claim := fmt.Sprintf("worker-%d", round), fmt.Sprintf("claim-%d", round)
		ar := &ActivateRequest{Scope: scope, Executor: executor, Claim: claim, Request: raw, Decision: "review"}
		if rng.IntN(6) == 0 {
			ar.NotBefore = f.clock.Now().Add(time.Hour)
		}
		a := &gcCall{activate: ar}
		a.run(f.ctx, f.r)
		record(a)
		if a.err != nil {
			t.Errorf("activate: %v", a.err)
			return
		}
		g := a.grant
		env := func(e Envelope) []byte {
			e.V = 1
			return f.envelope(&e)
		}
		good := env(Envelope{Scope: scope, Epoch: g.Epoch, Grant: g.ID, Executor: executor, Claim: claim, Request: ar.Request})
		p.add(
			gcCall{caller: executor, envelope: good},
			gcCall{caller: "intruder", envelope: good},
			gcCall{caller: executor, envelope: env(Envelope{Scope: scope, Epoch: g.Epoch, Grant: g.ID, Executor: executor, Claim: "other-claim", Request: ar.Request})},
			gcCall{caller: executor, envelope: env(Envelope{Scope: scope, Epoch: g.Epoch, Grant: g.ID, Executor: executor, Claim: claim, Request: unapproved})},
			// An old grant copying the new epoch.
			gcCall{caller: "worker-0", envelope: env(Envelope{Scope: scope, Epoch: g.Epoch, Grant: "00000000000000000000000000000000", Executor: "worker-0", Claim: "claim-0", Request: ar.Request})},
			gcCall{caller: executor, envelope: env(Envelope{Scope: "no-such-scope", Epoch: 1, Grant: g.ID, Executor: executor, Claim: claim, Request: ar.Request})},
			gcCall{caller: executor, envelope: env(Envelope{Scope: scope, Epoch: g.Epoch, Grant: g.ID, Executor: executor, Claim: claim, Request: []byte{0xa1, 0x61, 0x76, 0x02}})},
			gcCall{caller: executor, envelope: good[:len(good)-1-rng.IntN(len(good)-1)]},
			gcCall{caller: executor, envelope: append(slices.Clip(good), 0)},
		)
	}
}

// Ensure that group-committed calls get exactly the results, and leave
// exactly the state, of the same calls run one by one in the order the
// receiver ran them: many workers submit a random mix of good, stale,
// duplicate, misaddressed and malformed envelopes while an administrator
// holds scopes and activates grants; the calls are then replayed one at a
// time, in audit seq order, on a fresh receiver with the same clock and
// grant ids.
func TestGroupCommit_MatchesOneByOne(t *testing.T) {
	// Long, and timed by nothing but the calls it makes (more load forms
	// larger batches, which it welcomes): it runs beside the parallel
	// tests that mostly wait. Its fixtures are its own (etcd stores get
	// a prefix of their own on the shared member).
	t.Parallel()
	seeds := uint64(3)
	switch {
	case testing.Short():
		seeds = 1
	case raceEnabled:
		seeds = 2
	}
	for i := range seeds {
		seed := gcSeed + i
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			// Every engine runs the first seed; the others run on bbolt
			// alone, which keeps the suite's time sane.
			run := engines[:1]
			if i == 0 {
				run = engines
			}
			for _, e := range run {
				t.Run(e.name, func(t *testing.T) {
					t.Logf("seed %d", seed)
					testMatchesOneByOne(t, e.new(t), seed)
				})
			}
		})
	}
}

func testMatchesOneByOne(t *testing.T, s *store, seed uint64) {
	const workers, perWorker, rounds = 16, 40, 12
	f := gcFixtureOn(t, s, seed)
	var mu sync.Mutex
	var calls []*gcCall
	record := func(c *gcCall) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, c)
	}
	p := &pool{}
	adminRng := rand.New(rand.NewPCG(seed, 0))
	mint(t, f, adminRng, 1, p, record)
	startCommits, startCalls := f.r.queue.commits.Load(), len(calls)

	// The administrator mints a round each time the workers have made a
	// few calls, so that holds land among submissions.
	progress := make(chan struct{}, workers*perWorker)
	workersDone := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for round := 2; round <= rounds; round++ {
			for range 3 * workers {
				select {
				case <-progress:
				case <-workersDone:
				}
			}
			mint(t, f, adminRng, round, p, record)
		}
	})
	var work sync.WaitGroup
	for w := range workers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)+1))
		work.Go(func() {
			for range perWorker {
				c := p.pick(rng)
				c.run(f.ctx, f.r)
				record(&c)
				progress <- struct{}{}
			}
		})
	}
	work.Wait()
	close(workersDone)
	wg.Wait()
	if t.Failed() {
		return
	}
	commits := f.r.queue.commits.Load() - startCommits
	batched := len(calls) - startCalls
	t.Logf("%d calls in %d commits", batched, commits)
	if commits >= uint64(batched) {
		t.Errorf("%d calls took %d commits: no batch formed", batched, commits)
	}

	// The order the receiver ran the calls in is their audit seq order.
	slices.SortFunc(calls, func(a, b *gcCall) int { return int(a.seq()) - int(b.seq()) })
	for i, c := range calls {
		if c.err != nil {
			t.Fatalf("%v: %v", c, c.err)
		}
		if i > 0 && c.seq() == calls[i-1].seq() {
			t.Fatalf("%v and %v both at seq %d", c, calls[i-1], c.seq())
		}
	}
	outcomes := map[string]int{}
	for _, c := range calls {
		if c.hold == nil && c.activate == nil {
			outcomes[string(c.res.Outcome)+"/"+string(c.res.Reason)]++
		}
	}
	t.Logf("outcomes: %v", outcomes)
	for _, want := range []string{"applied/", "already_applied/", "denied/stale_or_unknown_epoch", "denied/malformed_envelope"} {
		if outcomes[want] == 0 {
			t.Errorf("the schedule produced no %s; it tests less than it claims", want)
		}
	}

	one := gcFixtureOn(t, s, seed)
	for _, c := range calls {
		again := &gcCall{caller: c.caller, envelope: c.envelope, hold: c.hold, activate: c.activate}
		again.run(one.ctx, one.r)
		// The checkpoint that acknowledged a hold is its batch's.
		again.anchored = c.anchored
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("at seq %d, %v:\ngroup-committed %+v\none by one      %+v", c.seq(), c, c, again)
		}
	}
	compareState(t, f.r, one.r)
}

// compareState fails the test unless two receivers hold the same scopes,
// targets, receipts and audit chain.
func compareState(t *testing.T, a, b *Receiver) {
	t.Helper()
	sa, err := a.Scopes()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.Scopes()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sa, sb) {
		t.Errorf("scopes differ:\n%+v\n%+v", sa, sb)
	}
	for _, name := range []string{fixTarget, gcTarget} {
		ta, err := a.Target(name)
		if err != nil {
			t.Fatal(err)
		}
		tb, err := b.Target(name)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ta, tb) {
			t.Errorf("target %s differs: %+v, %+v", name, ta, tb)
		}
	}
	ea, eb := events(t, a), events(t, b)
	if len(ea) != len(eb) {
		t.Fatalf("audit chains of %d and %d entries", len(ea), len(eb))
	}
	for i := range ea {
		if !reflect.DeepEqual(ea[i], eb[i]) {
			t.Fatalf("audit entry %d differs:\n%+v\n%+v", i+1, ea[i], eb[i])
		}
		e := ea[i]
		if e.Outcome == string(Applied) {
			ra, err := a.Receipt(e.Scope, e.Action)
			if err != nil {
				t.Fatal(err)
			}
			rb, err := b.Receipt(e.Scope, e.Action)
			if err != nil {
				t.Fatal(err)
			}
			if ra != rb {
				t.Errorf("receipt %s/%s differs: %+v, %+v", e.Scope, e.Action, ra, rb)
			}
		}
	}
	if a.Head() != b.Head() {
		t.Errorf("heads differ: %v, %v", a.Head(), b.Head())
	}
}

func events(t *testing.T, r *Receiver) []Event {
	t.Helper()
	var out []Event
	if err := r.Events(0, func(e Event) bool { out = append(out, e); return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

// refusingAnchor refuses every Store for which fail returns an error.
type refusingAnchor struct {
	audit.AnchorStore
	fail func(next audit.SignedCheckpoint) error
}

func (a *refusingAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	if err := a.fail(next); err != nil {
		return err
	}
	return a.AnchorStore.Store(old, next)
}

// inOneBatch makes the calls, in this order, as one batch: a first write
// waits inside its transaction until every call has queued behind it. It
// returns the number of transactions the calls committed.
func inOneBatch(t *testing.T, f *fixture, calls []*gcCall) uint64 {
	t.Helper()
	entered, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		// A write with no entry of its own: it only re-signs the head.
		err := f.r.exec(0, func(*wtx) error {
			close(entered)
			<-release
			return nil
		})
		if err != nil {
			t.Errorf("blocking write: %v", err)
		}
	})
	<-entered
	start := f.r.queue.commits.Load()
	for i, c := range calls {
		wg.Go(func() { c.run(f.ctx, f.r) })
		if !queued(f.r, i+1) {
			close(release)
			wg.Wait()
			t.Fatalf("%d calls did not queue", i+1)
		}
	}
	close(release)
	wg.Wait()
	// Less the blocking write's own commit.
	return f.r.queue.commits.Load() - start - 1
}

// thirdScopeName is a scope that neither worker of twoWorkers writes.
const thirdScopeName = "gc/third"

// thirdScope creates thirdScopeName, open, and returns its name: a hold of
// it, which runs ahead of the submits of its batch, leaves theirs alone.
func thirdScope(t *testing.T, f *fixture) string {
	t.Helper()
	if _, err := f.admin.CreateScope(f.ctx, thirdScopeName); err != nil {
		t.Fatal(err)
	}
	return thirdScopeName
}

// queued waits until n calls wait in r's commit queue, and reports
// whether they did.
func queued(r *Receiver, n int) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Microsecond) {
		r.queue.mu.Lock()
		got := len(r.queue.pending) + len(r.queue.admin)
		r.queue.mu.Unlock()
		if got == n {
			return true
		}
	}
	return false
}

// twoWorkers activates worker A in the fixture scope and worker B in the
// second scope.
func twoWorkers(t *testing.T, f *fixture) (a, b worker) {
	t.Helper()
	a = f.activate("worker-a", "claim-a", f.patchRequest("act-a"))
	reqB := f.request(&Request{V: 1, Action: "act-b", Target: gcTarget, Set: ptr([]byte("b"))})
	g, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: gcScope, Executor: "worker-b", Claim: "claim-b", Request: reqB})
	if err != nil {
		t.Fatal(err)
	}
	b = worker{name: "worker-b", grant: g, envelope: f.envelope(&Envelope{V: 1, Scope: gcScope, Epoch: g.Epoch,
		Grant: g.ID, Executor: "worker-b", Claim: "claim-b", Request: reqB})}
	return a, b
}

func outcome(c *gcCall) string {
	switch {
	case c.err != nil:
		return "error"
	case c.hold != nil:
		return "held"
	}
	return string(c.res.Outcome) + "/" + string(c.res.Reason)
}

// Ensure that calls queued behind a running commit share one transaction,
// that within it each sees the effects of the calls before it, and that
// an administrator's call runs ahead of the submits queued before it: the
// hold, queued fourth, runs first, and worker B's submits, both queued
// before or after it, find the scope held.
func TestGroupCommit_FormsBatches(t *testing.T) {
	f := gcFixture(t, gcSeed)
	a, b := twoWorkers(t, f)
	head := f.r.Head()
	calls := []*gcCall{
		{caller: "worker-a", envelope: a.envelope},
		{caller: "worker-a", envelope: a.envelope},
		{caller: "worker-b", envelope: b.envelope},
		{hold: &HoldRequest{Scopes: []string{gcScope}, Reason: "mid-batch"}},
		{caller: "worker-b", envelope: b.envelope},
		{caller: "worker-a", envelope: []byte("not cbor")},
	}
	commits := inOneBatch(t, f, calls)
	if commits != 1 {
		t.Errorf("%d calls took %d commits, want 1", len(calls), commits)
	}
	want := []string{"applied/", "already_applied/", "denied/receiver_held", "held", "denied/receiver_held", "denied/malformed_envelope"}
	// The order the calls ran in: the admin lane's, then the rest's.
	ran := []int{3, 0, 1, 2, 4, 5}
	for pos, i := range ran {
		c := calls[i]
		if got := outcome(c); got != want[i] {
			t.Errorf("call %d (%v) = %s %v, want %s", i, c, got, c.err, want[i])
		}
		if c.seq() != head.Seq+uint64(pos)+1 {
			t.Errorf("call %d at seq %d, want %d: the batch ran out of lane order", i, c.seq(), head.Seq+uint64(pos)+1)
		}
	}
	f.wantTarget(2, fixAfter)
	if tg, err := f.r.Target(gcTarget); err != nil || tg.Revision != 1 {
		t.Errorf("second target %+v, %v", tg, err)
	}
}

// faultIsolation runs a batch in which one call, B's submit, faults, and
// returns what went wrong for the other calls or the state.
func faultIsolation(t *testing.T, fault string, share bool) []string {
	t.Helper()
	f := gcFixture(t, gcSeed)
	a, b := twoWorkers(t, f)
	boom := errors.New("injected fault")
	wantErr := boom
	switch fault {
	case "audit":
		f.r.faults.beforeAudit = func(e *audit.Entry) error {
			if e.Action == "act-b" && e.Kind == KindSubmit {
				return boom
			}
			return nil
		}
	case "receipt":
		f.r.faults.beforeReceipt = func(_, action string) error {
			if action == "act-b" {
				return boom
			}
			return nil
		}
	case "panic":
		f.r.faults.beforeReceipt = func(_, action string) error {
			if action == "act-b" {
				panic("injected panic")
			}
			return nil
		}
		wantErr = ErrBadFormat
	}
	f.r.faults.shareFault = share
	calls := []*gcCall{
		{caller: "worker-a", envelope: a.envelope},
		{caller: "worker-b", envelope: b.envelope},
		{caller: "worker-a", envelope: a.envelope},
		{hold: &HoldRequest{Scopes: []string{thirdScope(t, f)}, Reason: "after the fault"}},
		{caller: "worker-a", envelope: a.envelope},
	}
	inOneBatch(t, f, calls)
	f.r.faults = faultHooks{}

	var problems []string
	if !errors.Is(calls[1].err, wantErr) {
		problems = append(problems, fmt.Sprintf("faulted call: %s %v, want %v", outcome(calls[1]), calls[1].err, wantErr))
	}
	want := []string{"applied/", "", "already_applied/", "held", "already_applied/"}
	for i, c := range calls {
		if i != 1 && outcome(c) != want[i] {
			problems = append(problems, fmt.Sprintf("neighbour %d (%v): %s %v, want %s", i, c, outcome(c), c.err, want[i]))
		}
	}
	// Nothing of the faulted call was half-applied: its target did not
	// move, it has no receipt, and, once the fault is gone, it applies.
	if tg, err := f.r.Target(gcTarget); err != nil || tg.Revision != 1 {
		problems = append(problems, fmt.Sprintf("faulted call's target: %+v, %v", tg, err))
	}
	if _, err := f.r.Receipt(gcScope, "act-b"); !errors.Is(err, ErrNotFound) {
		problems = append(problems, fmt.Sprintf("faulted call's receipt: %v", err))
	}
	if res, err := f.r.Submit(f.ctx, "worker-b", b.envelope); err != nil || res.Outcome != Applied || res.Revision != 2 {
		problems = append(problems, fmt.Sprintf("faulted call retried: %+v, %v", res, err))
	}
	return problems
}

// Ensure that a call that faults inside a batch fails alone: its neighbours
// get the results they would have got without it, and nothing of it is
// half-applied. With the retry of the batch's calls one by one removed, the
// same check must fail, or it would prove nothing.
func TestGroupCommit_FaultIsolation(t *testing.T) {
	for _, fault := range []string{"audit", "receipt", "panic"} {
		t.Run(fault, func(t *testing.T) {
			for _, p := range faultIsolation(t, fault, false) {
				t.Error(p)
			}
		})
		t.Run(fault+"/without retry alone", func(t *testing.T) {
			if len(faultIsolation(t, fault, true)) == 0 {
				t.Error("the batch failed together and the check saw nothing wrong; it cannot go red")
			}
		})
	}
}

// Ensure that when the anchor write after a batch's commit fails, no call
// of the batch is acknowledged, and that the next Open moves the anchor up
// to cover them.
func TestGroupCommit_AnchorFailure(t *testing.T) {
	f := gcFixture(t, gcSeed)
	a, b := twoWorkers(t, f)
	third := thirdScope(t, f)
	// The anchor write of any checkpoint past the head now fails: that is
	// the batch's, not the blocking write's, which re-signs the head.
	head := f.r.Head()
	f.r.opts.Anchor = &refusingAnchor{AnchorStore: f.anchor, fail: func(next audit.SignedCheckpoint) error {
		if next.Seq > head.Seq {
			return errors.New("injected anchor failure")
		}
		return nil
	}}
	calls := []*gcCall{
		{caller: "worker-a", envelope: a.envelope},
		{caller: "worker-b", envelope: b.envelope},
		{caller: "worker-a", envelope: a.envelope},
		{hold: &HoldRequest{Scopes: []string{third}, Reason: "in the lost batch"}},
	}
	before, err := f.anchor.Load()
	if err != nil {
		t.Fatal(err)
	}
	if commits := inOneBatch(t, f, calls); commits != 1 {
		t.Fatalf("the batch took %d commits, want 1", commits)
	}
	for i, c := range calls {
		if !errors.Is(c.err, ErrNotAcknowledged) {
			t.Errorf("call %d (%v): %s %v, want ErrNotAcknowledged", i, c, outcome(c), c.err)
		}
	}
	if after, err := f.anchor.Load(); err != nil || after != before {
		t.Fatalf("anchor moved without being written: %v", err)
	}
	// Committed, not acknowledged: the database is ahead of its anchor.
	f.wantTarget(2, fixAfter)
	if st, err := f.r.Status(thirdScopeName); err != nil || st.Mode != ModeHeld {
		t.Fatalf("hold in the lost batch: %+v, %v", st, err)
	}
	f.reopen()
	anc, err := f.anchor.Load()
	if err != nil {
		t.Fatal(err)
	}
	if head := f.r.Head(); anc.Seq != head.Seq || anc.Head != head.Hash {
		t.Fatalf("anchor at %d, not refreshed to head %v", anc.Seq, head)
	}
	if res := f.submit("worker-a", a.envelope); res.Outcome != AlreadyApplied {
		t.Fatalf("retry after the lost acknowledgement: %+v, want already_applied", res)
	}
	if _, err := f.r.Receipt(gcScope, "act-b"); err != nil {
		t.Fatalf("B's receipt: %v", err)
	}
}

// Ensure that calls refused before they queue behave as they always did:
// a cancelled context records nothing, and a closed receiver is ErrClosed.
func TestGroupCommit_RefusedBeforeQueue(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
	head := f.r.Head()
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	if _, err := f.r.Submit(ctx, "worker-a", a.envelope); !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit with a cancelled context = %v", err)
	}
	if got := f.r.Head(); got != head {
		t.Fatalf("a cancelled Submit moved the head from %v to %v", head, got)
	}
	f.r.Close()
	var wg sync.WaitGroup
	var closed atomic.Int32
	for range 8 {
		wg.Go(func() {
			if _, err := f.r.Submit(f.ctx, "worker-a", a.envelope); errors.Is(err, ErrClosed) {
				closed.Add(1)
			} else {
				t.Errorf("Submit after Close = %v, want ErrClosed", err)
			}
		})
	}
	wg.Wait()
	if closed.Load() != 8 {
		t.Fatalf("%d of 8 calls got ErrClosed", closed.Load())
	}
	f.reopen()
}

// Ensure that a batch takes calls from the head of the queue, in order, up
// to the call and byte limits, and that a call over the byte limit still
// forms a batch of its own.
func TestCommitQueue_Take(t *testing.T) {
	const mib = 1 << 20
	many := make([]int, maxBatchCalls+6)
	for name, tc := range map[string]struct {
		sizes []int
		want  []int
	}{
		"a few small calls":        {[]int{10, 20, 30}, []int{3}},
		"more than the call limit": {many, []int{maxBatchCalls, 6}},
		"up to the byte limit":     {[]int{4 * mib, 4 * mib, 1}, []int{2, 1}},
		"over the byte limit":      {[]int{5 * mib, 5 * mib, 1}, []int{1, 2}},
		"one large call first":     {[]int{9 * mib, 1, 1}, []int{1, 2}},
		"one large call after":     {[]int{1, 9 * mib, 1}, []int{1, 1, 1}},
	} {
		var q commitQueue
		for _, size := range tc.sizes {
			q.pending = append(q.pending, &call{size: size})
		}
		all := slices.Clone(q.pending)
		var got []int
		var taken []*call
		for len(q.pending) > 0 {
			batch := q.take(nil, q.pending[0], maxBatchCalls, maxBatchBytes)
			got = append(got, len(batch))
			taken = append(taken, batch...)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: batches of %v, want %v", name, got, tc.want)
		}
		if !slices.Equal(taken, all) {
			t.Errorf("%s: calls taken out of queue order", name)
		}
	}
}
