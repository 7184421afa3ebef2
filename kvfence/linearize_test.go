package kvfence_test

import (
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/fencecheck"
	"github.com/kvfence/kvfence/kvfence"
)

// defectiveOpener opens fresh receivers of variant v for fencecheck.Run.
func defectiveOpener(v defect.Variant) func(testing.TB) *kvfence.Receiver {
	return fencecheck.Bolt{Open: func(path string, opts *kvfence.Options) (*kvfence.Receiver, error) {
		return kvfence.OpenDefective(path, opts, v)
	}}.Opener()
}

// linearizeDir keeps visualizations under $KVFENCE_LINEARIZE_DIR if set.
func linearizeDir(t *testing.T) string {
	if d := os.Getenv("KVFENCE_LINEARIZE_DIR"); d != "" {
		return d
	}
	return t.TempDir()
}

// focused is the workload of these tests: one scope with one target, so
// that every read and every grant meets the same record and a race between
// a hold and a write is pinned by the reads around it.
func focused(open func(testing.TB) *kvfence.Receiver, seed uint64) fencecheck.Config {
	return fencecheck.Config{Open: open, Seed: seed, Scopes: 1, Targets: 1, Calls: 300}
}

// Ensure that the linearizability checker calls a receiver that checks the
// fence in one transaction and applies in a later one (defect.CheckThenAct)
// illegal: a hold that commits between the two lets a superseded grant
// apply after the hold returned. The race needs a hold to land in that
// window while a read pins the order, so the test records histories until
// one shows it, within a bound (on this workload about every other history
// shows it).
func TestLinearizable_CheckThenActIllegal(t *testing.T) {
	// Most runs find it in the first history; the deadline only keeps a
	// receiver that is not caught from taking long to say so.
	const maxHistories = 20
	deadline := time.Now().Add(60 * time.Second)
	open := defectiveOpener(defect.CheckThenAct)
	for seed := uint64(1); seed <= maxHistories; seed++ {
		h := fencecheck.Run(t, focused(open, seed))
		rep, err := h.Check(fencecheck.CheckOptions{Dir: linearizeDir(t), Name: "check-then-act"})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("history %d: %s", seed, rep)
		if rep.Result == porcupine.Illegal {
			if fi, err := os.Stat(rep.Visualization); err != nil || fi.Size() == 0 {
				t.Fatalf("no visualization of the illegal history: %v", err)
			}
			// The race itself: a write under a superseded epoch that
			// returned after the hold that superseded it had returned.
			late := lateWrites(h.Ops)
			if late == 0 {
				t.Fatalf("history %d is illegal without a write applied after its hold returned", seed)
			}
			t.Logf("history %d: %d writes applied after the hold of their epoch returned", seed, late)
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("the checker found no illegal history of the check-then-act receiver")
}

// Ensure that the same workload finds the sound receiver linearizable, and
// the receiver that checks the fence before the transaction as well: it
// is the missing check inside the transaction that the test above catches,
// not the workload or the model.
func TestLinearizable_SoundReceiversLinearizable(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    defect.Variant
	}{
		{"receiver", defect.Variant{}},
		{"check before and inside", defect.Variant{CheckOutsideTransaction: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 2; seed++ {
				h := fencecheck.Run(t, focused(defectiveOpener(tc.v), seed))
				rep, err := h.Check(fencecheck.CheckOptions{Dir: linearizeDir(t), Name: "sound"})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("history %d: %s", seed, rep)
				if rep.Result != porcupine.Ok {
					t.Fatalf("history %d: %s", seed, rep)
				}
			}
		})
	}
}

// lateWrites counts the applied submits whose epoch a hold of their scope
// had already left when they returned: the hold returned first.
func lateWrites(ops []porcupine.Operation) int {
	n := 0
	for _, w := range ops {
		in, out := w.Input.(fencecheck.Input), w.Output.(fencecheck.Output)
		if in.Kind != fencecheck.Submit || out.Outcome != kvfence.Applied {
			continue
		}
		for _, h := range ops {
			hin, hout := h.Input.(fencecheck.Input), h.Output.(fencecheck.Output)
			if hin.Kind == fencecheck.Hold && hin.Scope == in.Scope && !hout.Unknown && hout.Err == "" &&
				hout.PreviousEpoch >= in.Epoch && h.Return < w.Return && h.Return > w.Call {
				n++
				break
			}
		}
	}
	return n
}
