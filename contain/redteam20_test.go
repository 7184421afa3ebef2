package contain_test

import (
	"context"
	"testing"

	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
)

// Ensure that a hold planted at a boundary with the id the containment
// will derive, and the reason it will give, before worker A's grant was
// activated there, is not taken for the containment's hold: the receiver
// repeats the planted hold's result, whose epoch A's grant was activated
// at, so A is not fenced by it. The boundary must not read acknowledged,
// and the containment must not read full while A's grant is open.
func TestRedteam20_PlantedHoldBeforeGrant(t *testing.T) {
	w := newWorld(t, 2)
	ctx := context.Background()
	w.beforeActivate = func(sc *scenario) {
		b := sc.bounds[0]
		id := ledger.HoldID(ledger.ContainmentID("ledger-1", sc.action, sc.claimA.Ref), b.Receiver, b.Scope)
		if _, err := w.byName[b.Receiver].r.Admin().Hold(ctx, kvfence.HoldRequest{Scopes: []string{b.Scope},
			Reason: "worker-a paused", ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	sc := w.newScenario(2)
	w.beforeActivate = nil
	b := sc.bounds[0]
	if st := w.status(b); st.Grant == nil || st.Grant.Claim != sc.claimA.Ref {
		t.Fatalf("setup: A's grant is not open at %s: %+v", b, st)
	}
	co := w.coordinator(testTimeout)
	rec := mustContain(t, co, sc)
	st := w.status(b)
	open := st.Grant != nil && st.Grant.Claim == sc.claimA.Ref
	if rec.Boundaries[0].Result == ledger.BoundaryAcknowledged || rec.State == ledger.ContainmentFull {
		t.Fatalf("containment %s, boundary %s %s at epoch %d, while A's grant is open there: %v", rec.State, b,
			rec.Boundaries[0].Result, rec.Boundaries[0].InstalledEpoch, open)
	}
	// A rerun neither acknowledges it nor issues a second generation.
	epoch := st.Epoch
	rec = mustContain(t, co, sc)
	if rec.State == ledger.ContainmentFull || w.status(b).Epoch != epoch {
		t.Fatalf("rerun: %s, epoch %d then %d", rec.State, epoch, w.status(b).Epoch)
	}
	w.reconcile(sc)
	if _, err := co.Activate(ctx, w.activateReq(sc)); err == nil {
		t.Fatal("successor activated while A's grant is open")
	}
	if g := w.successorGrants(sc); len(g) != 0 {
		t.Fatalf("successor grants at %v", g)
	}
}
