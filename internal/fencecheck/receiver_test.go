package fencecheck

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
)

// visualizationDir is where a failed check writes its visualization:
// $KVFENCE_LINEARIZE_DIR if set (to keep it after the test), else a
// directory removed with the test.
func visualizationDir(t *testing.T) string {
	if d := os.Getenv("KVFENCE_LINEARIZE_DIR"); d != "" {
		return d
	}
	return t.TempDir()
}

// outcomes counts a history's calls by what they observed, so that a test
// can tell a history that exercised the fence from one that did not.
type outcomes struct {
	applied, alreadyApplied, stale, otherDenials, holds, activations, reads, unknown int
}

func count(h History) outcomes {
	var c outcomes
	for _, op := range h.Ops {
		in, out := op.Input.(Input), op.Output.(Output)
		switch {
		case out.Unknown:
			c.unknown++
		case in.Kind == Submit && out.Outcome == kvfence.Applied:
			c.applied++
		case in.Kind == Submit && out.Outcome == kvfence.AlreadyApplied:
			c.alreadyApplied++
		case in.Kind == Submit && (out.Reason == kvfence.ReasonReceiverHeld || out.Reason == kvfence.ReasonStaleEpoch ||
			out.Reason == kvfence.ReasonInactiveGrant):
			c.stale++
		case in.Kind == Submit:
			c.otherDenials++
		case in.Kind == Hold:
			c.holds++
		case in.Kind == Activate && out.Err == "":
			c.activations++
		default:
			c.reads++
		}
	}
	return c
}

// Ensure that the receiver's histories of concurrent submits, holds,
// activations and reads are linearizable with respect to the fence model,
// and that they exercise it: grants applied, stale workers denied, retries
// answered from receipts.
func TestRun_ReceiverLinearizable(t *testing.T) {
	var total outcomes
	start := time.Now()
	for seed := uint64(1); seed <= 4; seed++ {
		cfg := Config{Open: Bolt{}.Opener(), Seed: seed, Calls: 300}
		if seed%2 == 0 {
			// One scope with one target: every call meets the same record.
			cfg.Scopes, cfg.Targets = 1, 1
		}
		if seed > 2 {
			// Longer-lived grants: more writes, fewer races with holds.
			cfg.AdminPause = 2 * time.Millisecond
		}
		h := Run(t, cfg)
		rep, err := h.Check(CheckOptions{Dir: visualizationDir(t), Name: "receiver"})
		if err != nil {
			t.Fatal(err)
		}
		c := count(h)
		t.Logf("seed %d: %s; %+v", seed, rep, c)
		if rep.Result != porcupine.Ok {
			t.Fatalf("seed %d: the receiver's history is not linearizable: %s", seed, rep)
		}
		if rep.Ops != 300 || rep.Unknown != 0 {
			t.Fatalf("seed %d: %d calls, %d of unknown outcome; want 300 and none without faults", seed, rep.Ops, rep.Unknown)
		}
		total.applied += c.applied
		total.alreadyApplied += c.alreadyApplied
		total.stale += c.stale
		total.holds += c.holds
		total.activations += c.activations
	}
	t.Logf("4 histories recorded and checked in %s", time.Since(start).Round(time.Millisecond))
	if total.applied == 0 || total.alreadyApplied == 0 || total.stale == 0 || total.holds == 0 || total.activations == 0 {
		t.Fatalf("the histories did not exercise the fence: %+v", total)
	}
}

// flakyAnchor fails some anchor writes, before or after writing, as a full
// disk or a lost connection to the anchor's host would: the commits they
// follow are ErrNotAcknowledged, calls of unknown outcome.
type flakyAnchor struct {
	audit.AnchorStore
	mu  sync.Mutex
	rng *rand.Rand
}

var errAnchorDown = errors.New("anchor store unavailable")

func (f *flakyAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	f.mu.Lock()
	n := f.rng.IntN(10)
	f.mu.Unlock()
	switch n {
	case 0:
		return errAnchorDown
	case 1:
		if err := f.AnchorStore.Store(old, next); err != nil {
			return err
		}
		return errAnchorDown
	}
	return f.AnchorStore.Store(old, next)
}

// Ensure that calls of unknown outcome (commits whose anchor write failed)
// are recorded as such and that the histories stay linearizable: each such
// call took effect at some instant after its start.
func TestRun_UnknownOutcomesLinearizable(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		flaky := func(a audit.AnchorStore) audit.AnchorStore {
			return &flakyAnchor{AnchorStore: a, rng: rand.New(rand.NewPCG(seed, 0))}
		}
		h := Run(t, Config{Open: Bolt{Anchor: flaky}.Opener(), Seed: seed, Calls: 300})
		rep, err := h.Check(CheckOptions{Dir: visualizationDir(t), Name: "unknown"})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d: %s; %+v", seed, rep, count(h))
		if rep.Result != porcupine.Ok {
			t.Fatalf("seed %d: not linearizable: %s", seed, rep)
		}
		if rep.Unknown == 0 {
			t.Fatalf("seed %d: no call of unknown outcome recorded; the anchor faults did not reach the history", seed)
		}
	}
}

// Ensure that the recorder gives a call of unknown outcome a return after
// every other call and a row of its own, and a known one its own times.
func TestRecorder(t *testing.T) {
	rec := NewRecorder()
	start := rec.Now()
	rec.Record(0, submit1, start, applied(2))
	rec.Record(0, submit1, rec.Now(), unknown)
	rec.Record(0, submit1, rec.Now(), unknown)
	ops := rec.History()
	if len(ops) != 3 {
		t.Fatalf("%d calls recorded, want 3", len(ops))
	}
	if k := ops[0]; k.Call != start || k.Return < k.Call || k.Return == math.MaxInt64 || k.ClientId != 0 {
		t.Errorf("known call recorded as %+v", k)
	}
	for _, u := range ops[1:] {
		if u.Return != math.MaxInt64 || u.ClientId == 0 {
			t.Errorf("call of unknown outcome recorded as %+v, want return MaxInt64 on a row of its own", u)
		}
	}
	if ops[1].ClientId == ops[2].ClientId {
		t.Errorf("two calls of unknown outcome share row %d", ops[1].ClientId)
	}
}
