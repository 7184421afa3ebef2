package kvfence

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/internal/etcdtest"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// The hold race on a 3-member etcd cluster whose members sync to disk:
// workers submit under the current grant and under superseded ones while
// an administrator activates and holds, and meanwhile the leader is
// hard-stopped, then one of the two members left is cut off (no quorum)
// and let back. Every call is recorded with what it was told, and every
// call that got no verdict is retried with the same envelope until it
// gets one. The faults follow the race's progress, not a clock: each
// waits for acknowledged calls begun after the one before.

// Bounds of the cluster race; a bound that runs out fails the test.
const (
	// clusterPhaseWait bounds each wait for progress. etcd times a
	// request out after about five seconds without a leader, so a phase
	// after a fault may take that long to get going.
	clusterPhaseWait = 25 * time.Second
	// clusterRetryWait bounds the retries of one call until a verdict.
	clusterRetryWait = 30 * time.Second
)

// submitCommit reports whether a Txn of the receiver under prefix
// decides a submit: it puts an audit entry of that kind.
func submitCommit(prefix string) func(*etcdserverpb.TxnRequest) bool {
	return func(txn *etcdserverpb.TxnRequest) bool {
		for _, op := range txn.Success {
			put := op.GetRequestPut()
			if put == nil || !strings.HasPrefix(string(put.Key), prefix+string(bucketAudit)+"/") {
				continue
			}
			if e, err := audit.DecodeEntry(put.Value); err == nil && e.Kind == KindSubmit {
				return true
			}
		}
		return false
	}
}

// clusterCall is one attempt of a call of the cluster race and what it was
// told. Attempts of one call (the same envelope, or the same hold) share
// a chain number and count up from 0.
type clusterCall struct {
	kind           string // KindSubmit, KindActivate or KindHold
	chain, attempt int
	// caller is the submitting identity, or the executor an activation
	// names; action the request's action.
	caller, action string
	// grant is the envelope's grant (a submit), the grant minted (an
	// activation that returned) or the grant a hold supersedes ("" if its
	// activation got no verdict).
	grant      string
	start, end time.Time
	res        Result
	g          Grant
	hold       HoldResult
	err        error
}

// unknown reports an attempt whose outcome nobody knows: it may have
// taken effect. ErrNotAcknowledged (committed, anchor not moved) is in
// doubt for its caller as well.
func (c *clusterCall) unknown() bool {
	return errors.Is(c.err, ErrOutcomeUnknown) || errors.Is(c.err, ErrNotAcknowledged)
}

// clusterRace is one run's shared state.
type clusterRace struct {
	r     *Receiver
	mu    sync.Mutex
	calls []clusterCall
	// since is the start of the current phase; acked and holds count the
	// acknowledged calls and holds begun in it.
	since        time.Time
	acked, holds int
	chains       atomic.Int64
	done         atomic.Bool
	cur          atomic.Pointer[raceEnvelope]
	poolMu       sync.Mutex
	pool         []raceEnvelope
	epoch        atomic.Uint64
	adminErr     error
	// inDoubt counts, per grant, the submits under it still retried after
	// an error; the administrator holds a grant only once they have their
	// verdicts, so that a retry meets the grant it was made under and is
	// answered from the receipt if the first attempt applied.
	inDoubt map[string]int
}

// doubt changes the count of grant's submits in doubt by d.
func (cr *clusterRace) doubt(grant string, d int) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	cr.inDoubt[grant] += d
}

// settled waits until no submit under grant is in doubt, up to
// clusterRetryWait.
func (cr *clusterRace) settled(grant string) {
	for deadline := time.Now().Add(clusterRetryWait); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		cr.mu.Lock()
		n := cr.inDoubt[grant]
		cr.mu.Unlock()
		if n == 0 {
			return
		}
	}
}

// answered waits up to d until a submit of grant has a verdict.
func (cr *clusterRace) answered(grant string, d time.Duration) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		cr.mu.Lock()
		for _, c := range cr.calls {
			if c.kind == KindSubmit && c.grant == grant && c.err == nil {
				cr.mu.Unlock()
				return
			}
		}
		cr.mu.Unlock()
	}
}

func (cr *clusterRace) record(c clusterCall) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	cr.calls = append(cr.calls, c)
	if c.err == nil && !c.start.Before(cr.since) {
		cr.acked++
		if c.kind == KindHold {
			cr.holds++
		}
	}
}

// phase starts a new phase and returns its start.
func (cr *clusterRace) phase() time.Time {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	cr.since, cr.acked, cr.holds = time.Now(), 0, 0
	return cr.since
}

func (cr *clusterRace) progress() (acked, holds int) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	return cr.acked, cr.holds
}

// submit submits env as caller until it gets a verdict or the retries run
// out, recording every attempt.
func (cr *clusterRace) submit(caller, grant, action string, env []byte) {
	chain := int(cr.chains.Add(1))
	first := time.Now()
	for attempt := 0; ; attempt++ {
		start := time.Now()
		res, err := cr.r.Submit(context.Background(), caller, env)
		cr.record(clusterCall{kind: KindSubmit, chain: chain, attempt: attempt, caller: caller, action: action,
			grant: grant, start: start, end: time.Now(), res: res, err: err})
		if err == nil {
			if attempt > 0 {
				cr.doubt(grant, -1)
			}
			return
		}
		if attempt == 0 {
			cr.doubt(grant, 1)
		}
		if time.Since(first) > clusterRetryWait {
			cr.doubt(grant, -1)
			// The checks report the call without a verdict.
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// administrate activates a grant, lets the workers use it a moment, and
// holds, until the race is done. An activation without a verdict is
// followed by the hold all the same, which supersedes whatever it did; a
// hold without one is retried until it is acknowledged.
func (cr *clusterRace) administrate(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	admin := cr.r.Admin()
	ctx := context.Background()
	for i := 0; !cr.done.Load(); i++ {
		action := fmt.Sprintf("c%d-a%d", seed, i)
		executor := "worker-" + action
		start := time.Now()
		g, err := admin.Activate(ctx, ActivateRequest{Scope: raceScope, Executor: executor,
			Claim: "claim-" + action, Request: raceRequest(action)})
		cr.record(clusterCall{kind: KindActivate, chain: int(cr.chains.Add(1)), caller: executor, action: action,
			grant: g.ID, start: start, end: time.Now(), g: g, err: err})
		// An activation without a verdict minted no grant the workers know.
		e := &raceEnvelope{}
		if err == nil {
			e = &raceEnvelope{grant: g, executor: executor, env: raceEnv(g, g.Epoch)}
			cr.cur.Store(e)
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
			if i%2 == 0 {
				// Every other hold waits a bounded moment for a submit of
				// the grant to be answered: on a loaded machine the holds
				// can otherwise overtake every submit, and the race would
				// apply nothing. The other holds race the submits.
				cr.answered(g.ID, 200*time.Millisecond)
			}
			cr.settled(g.ID)
		}
		chain, first := int(cr.chains.Add(1)), time.Now()
		for attempt := 0; ; attempt++ {
			start := time.Now()
			h, herr := admin.Hold(ctx, HoldRequest{Scopes: []string{raceScope}, Reason: "rotate " + action})
			cr.record(clusterCall{kind: KindHold, chain: chain, attempt: attempt, grant: e.grant.ID, start: start,
				end: time.Now(), hold: h, err: herr})
			if herr == nil {
				cr.epoch.Store(h.Scopes[0].Epoch)
				break
			}
			if time.Since(first) > clusterRetryWait {
				cr.adminErr = fmt.Errorf("hold after %s: no verdict in %v: %w", action, clusterRetryWait, herr)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err == nil {
			// Published only once the hold is acknowledged: from now on
			// the grant is superseded.
			cr.poolMu.Lock()
			cr.pool = append(cr.pool, *e)
			cr.poolMu.Unlock()
		}
	}
}

// work runs a current worker (stale false), which submits the newest
// grant's envelope, or a stale one, which submits superseded envelopes as
// they were, with the newest epoch copied in, or as another caller.
func (cr *clusterRace) work(seed uint64, stale bool) {
	rng := rand.New(rand.NewPCG(seed, 2))
	for !cr.done.Load() {
		var e raceEnvelope
		if stale {
			cr.poolMu.Lock()
			ok := len(cr.pool) > 0
			if ok {
				e = cr.pool[rng.IntN(len(cr.pool))]
			}
			cr.poolMu.Unlock()
			if !ok {
				time.Sleep(time.Millisecond)
				continue
			}
			switch rng.IntN(3) {
			case 1:
				e.env = raceEnv(e.grant, cr.epoch.Load())
			case 2:
				e.executor = "intruder"
			}
		} else {
			p := cr.cur.Load()
			if p == nil {
				time.Sleep(time.Millisecond)
				continue
			}
			e = *p
		}
		cr.submit(e.executor, e.grant.ID, e.grant.Action, e.env)
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
	}
}

// clusterCounts sums up a run.
type clusterCounts struct {
	calls, acked, unknown, failed, retried int
	applied, alreadyApplied, staleDenied   int
	holds, activations                     int
	// unknownInChain counts chain entries that only calls without a
	// verdict account for: unknown outcomes that did take effect.
	unknownInChain int
	// retryVerdicts counts the verdicts of submits retried after an
	// error, by outcome and reason.
	retryVerdicts map[string]int
}

// checkClusterRace fails t unless the run's calls and the chain agree:
//   - an attempt that returned an error returned no result with it, and an
//     error that wraps the engine's unknown outcome is ErrOutcomeUnknown;
//   - every acknowledged call names the chain entry that records exactly
//     it (kind, scope, grant, caller, outcome; an applied one its receipt,
//     an already_applied one the revision its receipt recorded), and no
//     two name the same entry: nothing acknowledged is lost;
//   - every chain entry of the race is named by an acknowledged call or
//     accounted for by a distinct call of the same kind and identity whose
//     outcome is unknown: no failed call left an effect;
//   - every submit whose grant a hold had superseded, acknowledged before
//     the submit began, was denied as stale;
//   - every call that got no verdict was retried with the same envelope
//     until it got one, and an already_applied verdict follows the entry
//     that applied the action.
func checkClusterRace(t testing.TB, m *chainModel, calls []clusterCall) clusterCounts {
	t.Helper()
	n := clusterCounts{calls: len(calls), retryVerdicts: map[string]int{}}
	claimed := map[uint64]int{}
	superseded := map[string]time.Time{}
	for _, c := range calls {
		if c.kind == KindHold && c.err == nil && c.grant != "" {
			superseded[c.grant] = c.end
		}
	}
	// pending counts, per identity, the calls whose outcome is unknown.
	pending := map[string]int{}
	chains := map[int][]clusterCall{}
	for i, c := range calls {
		chains[c.chain] = append(chains[c.chain], c)
		if c.attempt > 0 {
			n.retried++
		}
		if c.err != nil {
			if c.res != (Result{}) || len(c.hold.Scopes) != 0 || c.g.ID != "" {
				t.Errorf("%s chain %d attempt %d returned a result beside its error %v: %+v %+v %+v",
					c.kind, c.chain, c.attempt, c.err, c.res, c.hold, c.g)
			}
			if errors.Is(c.err, engine.ErrOutcomeUnknown) && !errors.Is(c.err, ErrOutcomeUnknown) {
				t.Errorf("%s chain %d attempt %d: an unknown outcome not reported as ErrOutcomeUnknown: %v", c.kind, c.chain, c.attempt, c.err)
			}
			if errors.Is(c.err, ErrOutcomeUnknown) && errors.Is(c.err, engine.ErrConflict) {
				t.Errorf("%s chain %d attempt %d: an unknown outcome that is also a conflict: %v", c.kind, c.chain, c.attempt, c.err)
			}
			if c.unknown() {
				n.unknown++
				pending[identity(c.kind, c.caller, c.grant, c.action)]++
			} else {
				n.failed++
			}
			continue
		}
		n.acked++
		var seq uint64
		var ok bool
		switch c.kind {
		case KindSubmit:
			seq = c.res.AuditSeq
			e := m.entries[seq]
			ok = e.Kind == KindSubmit && e.Scope == raceScope && e.Grant == c.grant && e.Executor == c.caller &&
				e.Action == c.action && e.Outcome == string(c.res.Outcome) && e.Reason == string(c.res.Reason)
			switch c.res.Outcome {
			case Applied:
				n.applied++
				if got := m.applied[string(receiptKey(raceScope, c.action))]; got != seq {
					t.Errorf("applied %s at entry %d, but its receipt names entry %d", c.action, seq, got)
				}
			case AlreadyApplied:
				n.alreadyApplied++
				first, found := m.applied[string(receiptKey(raceScope, c.action))]
				if !found || first >= seq || m.entries[first].RevAfter != c.res.Revision {
					t.Errorf("%s already_applied at entry %d with revision %d; applied at entry %d (found %v) with revision %d",
						c.action, seq, c.res.Revision, first, found, m.entries[first].RevAfter)
				}
			}
			if at, ok := superseded[c.grant]; ok && c.start.After(at) {
				if c.res.Outcome != Denied || !c.res.Reason.isStale() {
					t.Errorf("grant %s superseded at %v, then submitted by %s at %v: %+v",
						c.grant, at.Format(time.StampMicro), c.caller, c.start.Format(time.StampMicro), c.res)
				} else {
					n.staleDenied++
				}
			}
		case KindHold:
			n.holds++
			seq = c.hold.AuditSeq
			e := m.entries[seq]
			ok = len(c.hold.Scopes) == 1 && e.Kind == KindHold && e.Scope == raceScope && e.Epoch == c.hold.Scopes[0].Epoch
		case KindActivate:
			n.activations++
			seq = c.g.AuditSeq
			e := m.entries[seq]
			ok = e.Kind == KindActivate && e.Scope == raceScope && e.Grant == c.g.ID && e.Epoch == c.g.Epoch &&
				e.Executor == c.caller && e.Action == c.action
		}
		if !ok {
			t.Errorf("acknowledged %s (chain %d attempt %d) %+v%+v%+v names entry %d, which is %+v: lost",
				c.kind, c.chain, c.attempt, c.res, c.hold, c.g, seq, m.entries[seq])
		}
		if j, dup := claimed[seq]; dup {
			t.Errorf("calls %d and %d are both answered by entry %d", j, i, seq)
		}
		claimed[seq] = i
	}
	// Entries no acknowledged call names must each be the effect of a call
	// of unknown outcome.
	for _, seq := range slices.Sorted(maps.Keys(m.entries)) {
		e := m.entries[seq]
		if _, ok := claimed[seq]; ok || (e.Kind != KindSubmit && e.Kind != KindHold && e.Kind != KindActivate) {
			continue
		}
		id := identity(e.Kind, e.Executor, e.Grant, e.Action)
		if pending[id] == 0 {
			t.Errorf("audit entry %d (%s %s %s by %s under %s) is no call's effect", seq, e.Kind, e.Action, e.Outcome, e.Executor, e.Grant)
			continue
		}
		pending[id]--
		n.unknownInChain++
	}
	// Every call without a verdict was retried to one.
	for _, id := range slices.Sorted(maps.Keys(chains)) {
		ch := chains[id]
		last := ch[len(ch)-1]
		if last.kind == KindActivate {
			continue // followed by a hold, not retried
		}
		if last.err != nil {
			t.Errorf("%s chain %d by %s (%s): %d attempts, no verdict; last: %v", last.kind, id, last.caller, last.action, len(ch), last.err)
		} else if len(ch) > 1 && last.kind == KindSubmit {
			n.retryVerdicts[strings.TrimSuffix(string(last.res.Outcome)+" "+string(last.res.Reason), " ")]++
		}
	}
	return n
}

// identity names what a call of unknown outcome may have left in the
// chain: a submit's entry names its grant, caller and action; an
// activation's its executor and action (its caller never learned the
// grant's id); a hold's nothing but its scope, which is the race's.
func identity(kind, caller, grant, action string) string {
	switch kind {
	case KindHold:
		return KindHold
	case KindActivate:
		grant = ""
	}
	return strings.Join([]string{kind, caller, grant, action}, "\x00")
}

// Ensure that on a 3-member etcd cluster, through a leader hard-stopped and
// a member cut off both ways and let back, the hold race loses nothing
// acknowledged, applies no superseded grant, reports every outcome it
// cannot know as ErrOutcomeUnknown and answers its retry from the receipt
// or with a fresh decision, and leaves a chain that verifies against the
// anchor. Then show that the run's checks fail on records doctored the
// ways a faulty receiver or a careless test would leave them.
func TestClusterHoldRace(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs in the full test command (go test without -short)")
	}
	// Most of its time goes to waiting on etcd (an election, a request
	// timing out in the partition), so it runs beside the other parallel
	// tests; it shares nothing with them: its cluster, anchor and
	// receiver are its own.
	t.Parallel()
	c := etcdtest.NewCluster(t, etcdtest.Config{Members: 3, Gates: true, Fsync: true})
	t.Logf("3 members (fsync, gated) ready in %v", c.Ready.Round(time.Millisecond))
	const prefix = "/kvfence-cluster-race/"
	gate := &etcdtest.TxnGate{}
	newEngine := func() engine.Engine {
		e, err := etcdengine.New(c.GatedClient(t, gate), &etcdengine.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	anchor := audit.FileAnchor{Path: filepath.Join(t.TempDir(), "race.anchor")}
	if err := InitEngine(newEngine(), &InitOptions{ReceiverID: "cluster-race", Key: testKey, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	r, err := OpenEngine(newEngine(), &Options{Key: testKey, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ctx := t.Context()
	if _, err := r.Admin().CreateScope(ctx, raceScope); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admin().CreateTarget(ctx, raceScope, raceTarget, []byte("initial")); err != nil {
		t.Fatal(err)
	}

	const seed = 1303
	cr := &clusterRace{r: r, inDoubt: map[string]int{}}
	begin := cr.phase()
	var wg sync.WaitGroup
	wg.Go(func() { defer cr.done.Store(true); cr.administrate(seed) })
	for w := range 4 {
		wg.Go(func() { cr.work(seed+uint64(w), w >= 2) })
	}
	stopRace := func() {
		cr.done.Store(true)
		wg.Wait()
	}
	// waitFor waits for acked calls and holds begun in the current phase.
	waitFor := func(what string, acked, holds int) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			a, h := cr.progress()
			if a >= acked && h >= holds {
				return time.Since(start)
			}
			if cr.done.Load() {
				stopRace()
				t.Fatalf("%s: the administrator stopped: %v", what, cr.adminErr)
			}
			if time.Since(start) > clusterPhaseWait {
				stopRace()
				t.Fatalf("%s: %d acknowledged calls and %d holds in %v, want %d and %d", what, a, h, clusterPhaseWait, acked, holds)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("before the faults", 80, 5)
	leader := c.Leader(t)
	stopAt := time.Now()
	c.HardStop(leader)
	// The phase starts once the member is gone: calls begun while it
	// stopped may still have been acknowledged by it.
	cr.phase()
	afterStop := waitFor("after the leader stopped", 40, 3)
	// Hold a commit of a submit on its way, cut the new leader off, which
	// leaves no quorum, and let the commit go: it cannot commit while the
	// member is cut off. Heal once etcd answered it.
	bounded(t, "a commit of a submit to hold", gate.Arm(submitCommit(prefix)), stopRace)
	cut := c.Leader(t)
	cutAt := time.Now()
	c.Partition(cut)
	var held error
	select {
	case held = <-gate.Release():
	case <-time.After(clusterPhaseWait):
		stopRace()
		t.Fatalf("the commit sent while m%d was cut off got no answer in %v", cut, clusterPhaseWait)
	}
	c.Heal(cut)
	partition := time.Since(cutAt)
	healAt := cr.phase()
	afterHeal := waitFor("after the partition healed", 40, 3)
	stopRace()
	if cr.adminErr != nil {
		t.Fatalf("administrator: %v", cr.adminErr)
	}
	t.Logf("faults: leader m%d hard-stopped %v into the race, 40 calls and 3 holds acknowledged %v later; "+
		"m%d cut off (no quorum) %v into the race for %v, 40 calls and 3 holds acknowledged %v after the heal; race over %v after the start",
		leader, stopAt.Sub(begin).Round(time.Millisecond), afterStop.Round(time.Millisecond), cut,
		cutAt.Sub(begin).Round(time.Millisecond), partition.Round(time.Millisecond), afterHeal.Round(time.Millisecond),
		time.Since(begin).Round(time.Millisecond))
	t.Logf("the commit sent into the partition: %v", held)
	if held == nil {
		t.Errorf("a commit sent while m%d was cut off, with m%d stopped, succeeded", cut, leader)
	}
	t.Logf("first acknowledgement of a call begun after: the stop %v, the heal %v",
		firstAck(cr.calls, stopAt).Round(time.Millisecond), firstAck(cr.calls, healAt).Round(time.Millisecond))

	m := replayChain(t, r)
	checkState(t, r, m)
	n := checkClusterRace(t, m, cr.calls)
	t.Logf("%d attempts: %d acknowledged (%d applied, %d already_applied, %d superseded grants denied as stale, %d holds, %d activations), "+
		"%d unknown (%d of them in the chain), %d failed before the commit, %d retries; verdicts of retried submits %v",
		n.calls, n.acked, n.applied, n.alreadyApplied, n.staleDenied, n.holds, n.activations,
		n.unknown, n.unknownInChain, n.failed, n.retried, n.retryVerdicts)
	if n.applied == 0 || n.staleDenied == 0 || n.unknown == 0 {
		t.Errorf("the race applied %d, denied %d superseded grants and met %d unknown outcomes; it must do each",
			n.applied, n.staleDenied, n.unknown)
	}
	r.Close()
	rep, err := VerifyChainEngine(newEngine(), VerifyOptions{Anchor: anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil || !rep.OK() {
		t.Errorf("VerifyChain = %s (%s), %v; want ok", rep.Problem, rep.Detail, err)
	}
	if t.Failed() {
		return
	}
	checkClusterChecksFail(t, m, cr.calls)
}

// bounded waits for ch to close, or stops the race and fails t after
// clusterPhaseWait.
func bounded(t *testing.T, what string, ch <-chan struct{}, stop func()) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(clusterPhaseWait):
		stop()
		t.Fatalf("no %s in %v", what, clusterPhaseWait)
	}
}

// firstAck is how long after since the first call begun after it was
// acknowledged.
func firstAck(calls []clusterCall, since time.Time) time.Duration {
	var first time.Duration
	for _, c := range calls {
		if c.err == nil && !c.start.Before(since) {
			if d := c.end.Sub(since); first == 0 || d < first {
				first = d
			}
		}
	}
	return first
}

// checkClusterChecksFail doctors a passing run's records the ways a faulty
// receiver (or a test that does not retry) would leave them, and fails t
// unless checkClusterRace reports each.
func checkClusterChecksFail(t *testing.T, m *chainModel, calls []clusterCall) {
	t.Helper()
	find := func(ok func(c clusterCall) bool) int {
		return slices.IndexFunc(calls, ok)
	}
	unknownSubmit := find(func(c clusterCall) bool { return c.kind == KindSubmit && c.unknown() })
	applied := find(func(c clusterCall) bool { return c.err == nil && c.kind == KindSubmit && c.res.Outcome == Applied })
	superseded := map[string]time.Time{}
	for _, c := range calls {
		if c.kind == KindHold && c.err == nil && c.grant != "" {
			superseded[c.grant] = c.end
		}
	}
	stale := find(func(c clusterCall) bool {
		at, ok := superseded[c.grant]
		return c.err == nil && c.kind == KindSubmit && ok && c.start.After(at)
	})
	// A call to drop must be the only one that can account for its entry:
	// a call of unknown outcome with the same identity could.
	doubtful := map[string]bool{}
	for _, c := range calls {
		if c.unknown() {
			doubtful[identity(c.kind, c.caller, c.grant, c.action)] = true
		}
	}
	sole := find(func(c clusterCall) bool {
		return c.err == nil && c.kind == KindSubmit && !doubtful[identity(c.kind, c.caller, c.grant, c.action)]
	})
	if unknownSubmit < 0 || applied < 0 || stale < 0 || sole < 0 {
		t.Fatalf("the run has no unknown submit (%d), applied submit (%d), stale submit (%d) or submit sure of its identity (%d) to doctor",
			unknownSubmit, applied, stale, sole)
	}
	// verdictOf is the acknowledged attempt of c's chain.
	verdictOf := func(c clusterCall) clusterCall {
		for _, v := range calls {
			if v.chain == c.chain && v.err == nil {
				return v
			}
		}
		t.Fatalf("chain %d has no verdict", c.chain)
		return clusterCall{}
	}
	cases := []struct {
		name, want string
		doctor     func(calls []clusterCall, m *chainModel) []clusterCall
	}{
		{"an unknown outcome reported as applied", "both answered by entry", func(calls []clusterCall, _ *chainModel) []clusterCall {
			c := &calls[unknownSubmit]
			c.err, c.res = nil, Result{Outcome: Applied, AuditSeq: verdictOf(*c).res.AuditSeq}
			return calls
		}},
		{"an unknown outcome with a denial beside it", "beside its error", func(calls []clusterCall, _ *chainModel) []clusterCall {
			calls[unknownSubmit].res = Result{Outcome: Denied, Reason: ReasonReceiverHeld}
			return calls
		}},
		{"an unknown outcome not reported as ErrOutcomeUnknown", "not reported as ErrOutcomeUnknown", func(calls []clusterCall, _ *chainModel) []clusterCall {
			calls[unknownSubmit].err = fmt.Errorf("commit: %w", engine.ErrOutcomeUnknown)
			return calls
		}},
		{"no retry after an unknown outcome", "no verdict", func(calls []clusterCall, _ *chainModel) []clusterCall {
			return slices.DeleteFunc(calls, func(c clusterCall) bool { return c.attempt > 0 })
		}},
		{"an acknowledged entry lost", ": lost", func(calls []clusterCall, m *chainModel) []clusterCall {
			delete(m.entries, calls[applied].res.AuditSeq)
			return calls
		}},
		{"a superseded grant applied", "superseded at", func(calls []clusterCall, _ *chainModel) []clusterCall {
			calls[stale].res.Outcome, calls[stale].res.Reason = Applied, ""
			return calls
		}},
		{"an effect of no call", "no call's effect", func(calls []clusterCall, _ *chainModel) []clusterCall {
			return slices.Delete(calls, sole, sole+1)
		}},
	}
	for _, tc := range cases {
		dm := *m
		dm.entries, dm.applied = maps.Clone(m.entries), maps.Clone(m.applied)
		rec := &errRecorder{TB: t}
		checkClusterRace(rec, &dm, tc.doctor(slices.Clone(calls), &dm))
		i := slices.IndexFunc(rec.errs, func(e string) bool { return strings.Contains(e, tc.want) })
		if i < 0 {
			t.Errorf("%s: the checks found no %q among %d findings %q", tc.name, tc.want, len(rec.errs), rec.errs)
			continue
		}
		t.Logf("%s: %d findings, among them: %.160s", tc.name, len(rec.errs), rec.errs[i])
	}
}
