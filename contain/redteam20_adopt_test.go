package contain_test

import (
	"context"
	"testing"

	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
)

// Ensure that a grant for the successor's claim, executor and request
// that someone activated at the installed epoch by hand, under another
// decision (before the superseded claim was reconciled, say), is not
// recorded as the successor's grant under the decision the ledger gives
// it: the activation's own grant is the only one adopted.
func TestRedteam20_AdoptGrantOfAnotherDecision(t *testing.T) {
	w := newWorld(t, 2)
	sc := w.newScenario(2)
	co := w.coordinator(testTimeout)
	rec := mustContain(t, co, sc)
	if rec.State != ledger.ContainmentFull {
		t.Fatalf("state %s", rec.State)
	}
	b := sc.bounds[0]
	if _, err := w.byName[b.Receiver].r.Admin().Activate(context.Background(), kvfence.ActivateRequest{Scope: b.Scope,
		Executor: "worker-b", Claim: sc.claimB.Ref, Request: sc.request, Epoch: rec.Boundaries[0].InstalledEpoch,
		Decision: "by hand, unreviewed"}); err != nil {
		t.Fatal(err)
	}
	w.reconcile(sc)
	res, err := co.Activate(context.Background(), w.activateReq(sc))
	t.Logf("activate: %v", err)
	for _, g := range res.Activated {
		if g.Receiver == b.Receiver && g.Scope == b.Scope {
			st := w.status(b)
			t.Fatalf("grant %s recorded with decision %q; the receiver's grant says %q", g.Grant, g.Decision, st.Grant.Decision)
		}
	}
	if err == nil {
		t.Fatal("activation complete with a boundary whose grant is not the successor's")
	}
}
