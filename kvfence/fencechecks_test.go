package kvfence

import (
	"testing"

	"github.com/kvfence/kvfence/internal/defect"
)

// Ensure that check 3 (the envelope's epoch equals the scope's) decides
// on its own, in both directions: an envelope that names the scope's
// active grant, with the scope open, but another epoch is stale_epoch.
// Check 5 would refuse it as well (the grant's epoch differs), but as
// unknown_grant; so a check 3 weakened to "<" or ">" turns this test red
// while every other check still passes.
func TestSubmit_Check3ExactEpoch(t *testing.T) {
	for _, tc := range []struct {
		name string
		// epoch returns the envelope's epoch, given the active grant's.
		epoch func(active uint64) uint64
		// holds is how many hold-and-activate rounds come first, so that
		// an earlier epoch exists.
		holds int
	}{
		{"epoch above the scope's", func(e uint64) uint64 { return e + 1 }, 0},
		{"epoch below the scope's", func(e uint64) uint64 { return e - 1 }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, defect.Variant{})
			req := f.patchRequest("raise-retention")
			w := f.activate("worker-a", "claim-1", req)
			for range tc.holds {
				f.hold("next epoch")
				w = f.activate("worker-a", "claim-1", req)
			}
			env := f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: tc.epoch(w.grant.Epoch), Grant: w.grant.ID,
				Executor: "worker-a", Claim: "claim-1", Request: req})
			wantDenied(t, f.submit("worker-a", env), ReasonStaleEpoch)
			f.wantTarget(1, fixValue)
			// The same grant at its own epoch applies: nothing else in the
			// envelope was wrong.
			if res := f.submit("worker-a", w.envelope); res.Outcome != Applied {
				t.Fatalf("the grant at its epoch: %+v", res)
			}
		})
	}
}
