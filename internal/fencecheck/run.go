package fencecheck

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/kvfence/kvfence/kvfence"
)

// Config configures Run. Zero fields take the defaults in brackets.
type Config struct {
	// Open returns an initialised receiver with no scopes, on whatever
	// engine the caller chooses; closing it is the caller's (tb.Cleanup).
	Open func(tb testing.TB) *kvfence.Receiver
	// Seed drives every client's choices.
	Seed uint64
	// Scopes [2] and Targets per scope [2] are created before recording.
	Scopes, Targets int
	// Workers [4] submit envelopes; Readers [2] read statuses and targets;
	// one administrator holds and activates.
	Workers, Readers int
	// AdminPause is the longest pause of the administrator between its
	// calls [none]. Without one, holds race with the first writes under
	// each grant; with one, grants live long enough for more writes.
	AdminPause time.Duration
	// Calls is the number of calls to record [300]: a sixth of them the
	// administrator's, a quarter the readers', the rest the workers'.
	Calls int
}

func (c *Config) defaults() {
	for _, f := range []struct {
		p *int
		v int
	}{{&c.Scopes, 2}, {&c.Targets, 2}, {&c.Workers, 4}, {&c.Readers, 2}, {&c.Calls, 300}} {
		if *f.p == 0 {
			*f.p = f.v
		}
	}
}

// History is a recorded history with the state it started from.
type History struct {
	// Setup is the state the run started from.
	Setup Setup
	// Ops are the calls the clients made, each with its start, its return
	// and what it returned, as the recorder saw them.
	Ops []porcupine.Operation
}

// Check checks the history against Model(h.Setup).
func (h History) Check(opts CheckOptions) (Report, error) {
	return Check(Model(h.Setup), h.Ops, opts)
}

// grantTTL outlives any run: the model knows no clock.
const grantTTL = time.Hour

// Run opens a receiver with cfg.Open, creates the scopes and targets, and
// records cfg.Calls calls of concurrent clients:
//
//   - an administrator that holds scopes and activates grants, sometimes
//     on a scope that is open or naming an epoch that has passed;
//   - workers that submit under the newest grant of a scope, or under a
//     superseded one (a stale worker), sometimes copying the newest epoch,
//     sometimes as the wrong caller, and sometimes twice;
//   - readers of scope statuses and target values.
//
// It fails tb on a setup error; a call's error is recorded, not fatal.
func Run(tb testing.TB, cfg Config) History {
	tb.Helper()
	cfg.defaults()
	r := cfg.Open(tb)
	ctx := context.Background()
	admin := r.Admin()
	w := &workload{r: r, admin: admin, cfg: cfg, rec: NewRecorder(), setup: Setup{}}
	for i := range cfg.Scopes {
		scope := fmt.Sprintf("scope-%d", i)
		if _, err := admin.CreateScope(ctx, scope); err != nil {
			// An error that is not a verdict (ErrNotAcknowledged) may
			// have created the scope all the same: look before failing.
			if _, serr := r.Status(scope); serr != nil {
				tb.Fatal(err)
			}
		}
		sc := &scopeBoard{name: scope}
		w.setup[scope] = map[string]string{}
		for j := range cfg.Targets {
			target := fmt.Sprintf("%s/t%d", scope, j)
			if _, err := admin.CreateTarget(ctx, scope, target, []byte("v0")); err != nil {
				if _, terr := r.Target(target); terr != nil {
					tb.Fatal(err)
				}
			}
			w.setup[scope][target] = "v0"
			sc.targets = append(sc.targets, target)
		}
		w.scopes = append(w.scopes, sc)
		for _, t := range sc.targets {
			w.targetScope.Store(t, sc)
		}
	}
	// Each client has its own quota of calls: writes wait for commits and
	// reads do not, so shared tickets would go to the readers.
	adminCalls, readerCalls := cfg.Calls/6, cfg.Calls/4
	workerCalls := cfg.Calls - adminCalls - readerCalls
	var wg sync.WaitGroup
	clients := 0
	spawn := func(calls int, fn func(c *client)) {
		c := &client{id: clients, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(clients))), calls: calls}
		clients++
		wg.Go(func() { fn(c) })
	}
	spawn(adminCalls, w.administrate)
	for i := range cfg.Workers {
		spawn(share(workerCalls, cfg.Workers, i), w.work)
	}
	for i := range cfg.Readers {
		spawn(share(readerCalls, cfg.Readers, i), w.read)
	}
	wg.Wait()
	return History{Setup: w.setup, Ops: w.rec.History()}
}

// workload is the shared state of one run's clients.
type workload struct {
	r           *kvfence.Receiver
	admin       *kvfence.Admin
	cfg         Config
	rec         *Recorder
	setup       Setup
	scopes      []*scopeBoard
	targetScope sync.Map
	// activations numbers the requests the administrator approves.
	activations atomic.Int64
	// adminDone is set once the administrator made its last call.
	adminDone atomic.Bool
}

// client is one of a run's clients.
type client struct {
	id  int
	rng *rand.Rand
	// calls is the number of calls it has still to make.
	calls int
}

// next takes one of the client's calls, if it has any left.
func (c *client) next() bool {
	c.calls--
	return c.calls >= 0
}

// share is client i's part of n calls split among k clients.
func share(n, k, i int) int {
	if i < n%k {
		return n/k + 1
	}
	return n / k
}

// scopeBoard is what the clients know of one scope: the grants activated in
// it, newest last, and the target revisions last read.
type scopeBoard struct {
	name    string
	targets []string
	mu      sync.Mutex
	grants  []issued
	// revs is the last revision read or applied per target; requests use
	// it as their expected revision, so that some of them are outdated.
	revs map[string]uint64
}

// issued is an activated grant with the request it binds.
type issued struct {
	in      Input // the activation's input: executor, claim, request
	request []byte
	grant   string
	epoch   uint64
}

func (b *scopeBoard) pick(rng *rand.Rand) (issued, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.grants)
	if n == 0 {
		return issued{}, false
	}
	// Mostly the newest grant, often a superseded one: a stale worker.
	if rng.IntN(3) > 0 {
		return b.grants[n-1], true
	}
	return b.grants[rng.IntN(n)], true
}

func (b *scopeBoard) newestEpoch() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.grants) == 0 {
		return 1
	}
	return b.grants[len(b.grants)-1].epoch
}

func (b *scopeBoard) lastRev(target string) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.revs[target]
}

func (b *scopeBoard) sawRev(target string, rev uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.revs == nil {
		b.revs = map[string]uint64{}
	}
	if rev > b.revs[target] {
		b.revs[target] = rev
	}
}

func (b *scopeBoard) publish(g issued) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.grants = append(b.grants, g)
}

// administrate holds and activates, mostly alternating per scope as an
// operator replacing workers would, sometimes out of turn.
func (w *workload) administrate(c *client) {
	id, rng := c.id, c.rng
	defer w.adminDone.Store(true)
	ctx := context.Background()
	open := make(map[string]bool)
	epoch := make(map[string]uint64)
	for c.next() {
		if w.cfg.AdminPause > 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(w.cfg.AdminPause))))
		}
		b := w.scopes[rng.IntN(len(w.scopes))]
		hold := open[b.name]
		if rng.IntN(8) == 0 {
			hold = !hold
		}
		if hold {
			in := Input{Kind: Hold, Scope: b.name}
			call := w.rec.Now()
			res, err := w.admin.Hold(ctx, kvfence.HoldRequest{Scopes: []string{b.name}, Reason: "replace worker"})
			out := Output{}
			if err != nil {
				out = errorOutput(err)
			} else {
				out.PreviousEpoch, out.Epoch = res.Scopes[0].PreviousEpoch, res.Scopes[0].Epoch
				open[b.name], epoch[b.name] = false, out.Epoch
			}
			w.rec.Record(id, in, call, out)
			continue
		}
		n := w.activations.Add(1)
		target := b.targets[rng.IntN(len(b.targets))]
		req := kvfence.Request{V: 1, Action: fmt.Sprintf("act-%d", n), Target: target}
		value := []byte(fmt.Sprintf("v%d", n))
		req.Set = &value
		var expect uint64
		if rev := b.lastRev(target); rev != 0 && rng.IntN(2) == 0 {
			expect = rev
			req.ExpectRevision = &expect
		}
		raw, err := kvfence.EncodeRequest(&req)
		if err != nil {
			panic(err) // the workload's own request: a bug here, not in the receiver
		}
		sum := sha256.Sum256(raw)
		in := Input{Kind: Activate, Scope: b.name, Executor: fmt.Sprintf("worker-%d", rng.IntN(w.cfg.Workers)),
			Claim: fmt.Sprintf("claim-%d", n), Action: req.Action, Target: target, ExpectRevision: expect,
			Value: string(value), Digest: hex.EncodeToString(sum[:])}
		if rng.IntN(3) == 0 {
			// A compare-and-swap on the epoch last seen, which a hold by
			// another administrator would have moved.
			in.Epoch = max(epoch[b.name], 1)
		}
		call := w.rec.Now()
		g, err := w.admin.Activate(ctx, kvfence.ActivateRequest{Scope: b.name, Executor: in.Executor, Claim: in.Claim,
			Request: raw, Epoch: in.Epoch, TTL: grantTTL})
		out := Output{}
		if err != nil {
			out = errorOutput(err)
		} else {
			out.Grant, out.Epoch = g.ID, g.Epoch
		}
		w.rec.Record(id, in, call, out)
		if err == nil {
			open[b.name], epoch[b.name] = true, g.Epoch
			b.publish(issued{in: in, request: raw, grant: g.ID, epoch: g.Epoch})
		} else if errors.Is(err, kvfence.ErrNotHeld) {
			open[b.name] = true
		}
	}
}

// work submits envelopes under the grants of the board.
func (w *workload) work(c *client) {
	id, rng := c.id, c.rng
	ctx := context.Background()
	var last *Input
	var lastEnv []byte
	for c.next() {
		in, env := w.envelope(rng)
		if last != nil && rng.IntN(5) == 0 {
			// The same envelope again: a retry, answered from its receipt
			// if the first one applied.
			in, env = *last, lastEnv
		}
		if env == nil {
			if !w.adminDone.Load() {
				// No grant yet in this scope: wait for one, keeping the call.
				c.calls++
				time.Sleep(100 * time.Microsecond)
				continue
			}
			w.readOnce(id, rng)
			continue
		}
		call := w.rec.Now()
		res, err := w.r.Submit(ctx, in.Caller, env)
		out := Output{}
		if err != nil {
			out = errorOutput(err)
		} else {
			out.Outcome, out.Reason = res.Outcome, res.Reason
			if res.Outcome != kvfence.Denied {
				out.Revision = res.Revision
			}
		}
		w.rec.Record(id, in, call, out)
		if out.Outcome == kvfence.Applied {
			w.board(in.Target).sawRev(in.Target, out.Revision)
		}
		last, lastEnv = &in, env
	}
}

// envelope builds a worker's next envelope, or none while its scope has
// no grant yet.
func (w *workload) envelope(rng *rand.Rand) (Input, []byte) {
	b := w.scopes[rng.IntN(len(w.scopes))]
	g, ok := b.pick(rng)
	if !ok {
		return Input{}, nil
	}
	in := g.in
	in.Kind, in.Epoch, in.Grant, in.Caller = Submit, g.epoch, g.grant, g.in.Executor
	switch rng.IntN(10) {
	case 0:
		// A stale worker that copies the newest epoch.
		in.Epoch = b.newestEpoch()
	case 1:
		// A caller other than the grant's executor.
		in.Caller = in.Executor + "-other"
	}
	env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: in.Scope, Epoch: in.Epoch, Grant: in.Grant,
		Executor: in.Executor, Claim: in.Claim, Request: g.request})
	if err != nil {
		panic(err) // the workload's own envelope
	}
	return in, env
}

func (w *workload) board(target string) *scopeBoard {
	b, _ := w.targetScope.Load(target)
	return b.(*scopeBoard)
}

// read reads statuses and targets.
func (w *workload) read(c *client) {
	for c.next() {
		// Reads take microseconds and writes a commit each: a reader
		// that paused for nothing would be done before the first grant.
		time.Sleep(time.Duration(c.rng.IntN(2000)) * time.Microsecond)
		w.readOnce(c.id, c.rng)
	}
}

func (w *workload) readOnce(id int, rng *rand.Rand) {
	b := w.scopes[rng.IntN(len(w.scopes))]
	if rng.IntN(2) == 0 {
		in := Input{Kind: ReadStatus, Scope: b.name}
		call := w.rec.Now()
		st, err := w.r.Status(b.name)
		out := Output{Epoch: st.Epoch, Mode: st.Mode, Grant: st.ActiveGrant}
		if err != nil {
			out = errorOutput(err)
		}
		w.rec.Record(id, in, call, out)
		return
	}
	target := b.targets[rng.IntN(len(b.targets))]
	in := Input{Kind: ReadTarget, Scope: b.name, Target: target}
	call := w.rec.Now()
	t, err := w.r.Target(target)
	out := Output{Revision: t.Revision, Value: string(t.Value)}
	if err != nil {
		out = errorOutput(err)
	}
	w.rec.Record(id, in, call, out)
	if err == nil {
		b.sawRev(target, t.Revision)
	}
}

// verdicts are the errors that say a call changed nothing, by the name the
// model gives them. The model expects only the first three; the others
// make a history illegal, so that a workload or receiver bug shows.
var verdicts = []struct {
	err  error
	name string
}{
	{kvfence.ErrNotHeld, ErrNotHeld},
	{kvfence.ErrEpochMismatch, ErrEpochMismatch},
	{kvfence.ErrUnknownTarget, ErrUnknownTarget},
	{kvfence.ErrUnknownScope, "unknown_scope"},
	{kvfence.ErrInvalidArgument, "invalid_argument"},
	{kvfence.ErrInvalidWindow, "invalid_window"},
	{kvfence.ErrEpochExhausted, "epoch_exhausted"},
}

// errorOutput is the output of a call that returned err: a verdict, or
// else an outcome the caller cannot know (ErrNotAcknowledged, a storage
// fault, an engine's lost answer).
func errorOutput(err error) Output {
	if errors.Is(err, kvfence.ErrNotAcknowledged) {
		// The write committed; its cause may wrap anything.
		return Output{Unknown: true}
	}
	for _, v := range verdicts {
		if errors.Is(err, v.err) {
			return Output{Err: v.name}
		}
	}
	return Output{Unknown: true}
}
