package kvfence

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// Ensure that remote writes race holds safely over many schedules: an
// administrator activates and holds at random moments while the current
// worker submits (and repeats) and the stale workers of earlier grants
// submit again, with writes delayed and answers lost at random. After
// every hold's acknowledgment: no write under a superseded grant reaches
// the object; every dispatch decided before the hold has settled, and
// each unknown one is listed as outstanding. At the end the receipts, the
// audit chain and the object's stamps agree, and the store reopens (its
// chain replays without a fence violation).
func TestDispatchHoldRace(t *testing.T) {
	// Its schedules sleep and wait on delayed writes, beside the other
	// parallel tests; its fixtures and fake objects are its own.
	t.Parallel()
	schedules := map[string]int{"bbolt": 12, "etcd": 4}
	if testing.Short() {
		schedules = map[string]int{"bbolt": 3, "etcd": 1}
	}
	forEngines(t, func(t *testing.T, s *store) {
		for i := range schedules[s.name] {
			seed := uint64(2200 + i)
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				if v := dispatchRace(t, s, seed, false); v != "" {
					t.Fatal(v)
				}
			})
		}
	})
}

// Ensure that the race goes red when a hold does not wait for the writes
// decided before it: some schedule then lets a superseded grant's write
// reach the object after the acknowledgment, or acknowledges a dispatch
// still in flight.
func TestDispatchHoldRaceWithoutWait(t *testing.T) {
	s := engines[0].new(t)
	for i := range 40 {
		if v := dispatchRace(t, s, uint64(3300+i), true); v != "" {
			t.Logf("caught at schedule %d: %s", i, v)
			return
		}
	}
	t.Fatal("no schedule caught a hold acknowledged before its writes settled")
}

// dispatchRace runs one schedule and returns the first violation of the
// invariants, or "". defective removes the hold's wait.
func dispatchRace(t *testing.T, s *store, seed uint64, defective bool) string {
	rng := rand.New(rand.NewPCG(seed, seed))
	var rngMu sync.Mutex
	randn := func(n int) int {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.IntN(n)
	}
	obj := newFakeObject(fixValue)
	f := newRemoteFixture(t, s, obj, 60*time.Millisecond)
	f.r.faults.skipHoldWait = defective
	type superseded struct {
		grant  string
		ackLen int
	}
	var gone []superseded
	var stale [][2]string // executor, envelope
	for round := range 4 {
		action := fmt.Sprintf("a-%d", round)
		name := fmt.Sprintf("worker-%d", round)
		req := f.request(&Request{V: 1, Action: action, Target: remoteTarget, Set: ptr([]byte(fmt.Sprintf(`{"round":%d}`, round)))})
		w := f.activate(name, "claim-"+action, req)
		obj.set(func(o *fakeObject) {
			o.applyDelay = time.Duration(randn(3000)) * time.Microsecond
			o.loseAnswer = randn(4) == 0
		})
		var wg sync.WaitGroup
		submit := func(caller string, env []byte) {
			defer wg.Done()
			time.Sleep(time.Duration(randn(1000)) * time.Microsecond)
			if _, err := f.r.Submit(f.ctx, caller, env); err != nil {
				t.Errorf("Submit: %v", err)
			}
		}
		wg.Add(2 + len(stale))
		go submit(name, w.envelope)
		go submit(name, w.envelope)
		for _, st := range stale {
			go submit(st[0], []byte(st[1]))
		}
		time.Sleep(time.Duration(randn(8000)) * time.Microsecond)
		h, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "rotate"})
		if err != nil {
			t.Fatalf("Hold: %v", err)
		}
		_, log, _ := obj.snapshot()
		gone = append(gone, superseded{w.grant.ID, len(log)})
		stale = append(stale, [2]string{name, string(w.envelope)})
		// Every dispatch decided before the hold has settled; an unknown
		// one is listed.
		if rc, err := f.r.Receipt(fixScope, action); err == nil {
			switch rc.Dispatch {
			case DispatchDispatching:
				wg.Wait()
				return fmt.Sprintf("round %d: dispatch %s still in flight at the acknowledgment", round, rc.DispatchID)
			case DispatchUnknown:
				// Unknown dispatches of earlier rounds stay outstanding
				// and are listed again: this one must be among them.
				if !slices.ContainsFunc(h.Outstanding, func(o OutstandingDispatch) bool { return o.DispatchID == rc.DispatchID }) {
					wg.Wait()
					return fmt.Sprintf("round %d: unknown dispatch %s not listed: %+v", round, rc.DispatchID, h.Outstanding)
				}
			}
		}
		wg.Wait()
	}
	// Late stale submits, after every hold.
	for _, st := range stale {
		if res := f.submit(st[0], []byte(st[1])); res.Outcome == Applied || res.Outcome == Dispatching {
			return fmt.Sprintf("stale submit %s", res.Outcome)
		}
	}
	_, log, _ := obj.snapshot()
	for _, g := range gone {
		for _, wr := range log[g.ackLen:] {
			if !wr.fence && wr.stamp.Grant == g.grant {
				return fmt.Sprintf("a write under grant %s reached the object after its hold's acknowledgment", g.grant)
			}
		}
	}
	// Receipts and stamps agree: every applied receipt's write is on the
	// object at its version, and every stamped write is a receipt's.
	byID := map[string]Receipt{}
	for round := range 4 {
		if rc, err := f.r.Receipt(fixScope, fmt.Sprintf("a-%d", round)); err == nil {
			byID[rc.DispatchID] = rc
			found := false
			for _, wr := range log {
				if !wr.fence && wr.stamp.Receipt == rc.DispatchID && fmt.Sprint(wr.version) == rc.Version {
					found = true
				}
			}
			if rc.Dispatch == DispatchApplied && !found {
				return fmt.Sprintf("applied receipt %+v has no write on the object", rc)
			}
			if rc.Dispatch == DispatchApplied {
				wantAudit(t, f.r, rc.DispatchID, DispatchApplied)
			}
		}
	}
	// Each action was dispatched at most once, whoever repeated it: every
	// Apply call is a receipt's that was not cancelled.
	started := 0
	for _, rc := range byID {
		if rc.Dispatch != DispatchCancelled {
			started++
		}
	}
	if _, _, applies := obj.snapshot(); applies != started {
		return fmt.Sprintf("%d writes started for %d dispatches", applies, started)
	}
	for _, wr := range log {
		if wr.fence || wr.stamp.Receipt == "" {
			continue
		}
		rc, ok := byID[wr.stamp.Receipt]
		if !ok || (rc.Dispatch != DispatchApplied && rc.Dispatch != DispatchUnknown) {
			return fmt.Sprintf("write stamped %+v matches receipt %+v", wr.stamp, rc)
		}
	}
	if defective {
		// Let the writes the defective holds left behind settle before
		// the fixture's chain check.
		time.Sleep(150 * time.Millisecond)
	}
	f.reopen()
	return ""
}
