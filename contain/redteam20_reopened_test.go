package contain_test

import (
	"context"
	"testing"

	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
)

// Ensure that a rerun that finds an acknowledged boundary open again
// under the superseded claim (its grant activated by hand at the
// installed epoch) says so in the record instead of reading it as it
// did: the acknowledgment stands as history, and the observation error
// shows that the scope no longer fences the superseded worker.
func TestRedteam20_AcknowledgedBoundaryReopened(t *testing.T) {
	w := newWorld(t, 2)
	sc := w.newScenario(2)
	co := w.coordinator(testTimeout)
	rec := mustContain(t, co, sc)
	if rec.State != ledger.ContainmentFull {
		t.Fatalf("state %s", rec.State)
	}
	b := sc.bounds[0]
	if _, err := w.byName[b.Receiver].r.Admin().Activate(context.Background(), kvfence.ActivateRequest{Scope: b.Scope,
		Executor: "worker-a", Claim: sc.claimA.Ref, Request: sc.request, Epoch: rec.Boundaries[0].InstalledEpoch,
		Decision: "by hand"}); err != nil {
		t.Fatal(err)
	}
	rec = mustContain(t, co, sc)
	if got := rec.Boundaries[0]; got.ObservationError == "" {
		t.Fatalf("%s reads %s with no observation error while worker-a's grant is open there", b, got.Result)
	}
	if got := rec.Boundaries[1]; got.ObservationError != "" {
		t.Fatalf("the other boundary: %q", got.ObservationError)
	}
}
