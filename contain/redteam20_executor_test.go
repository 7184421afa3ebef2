package contain_test

import (
	"context"
	"errors"
	"testing"

	"github.com/kvfence/kvfence/contain"
	"github.com/kvfence/kvfence/ledger"
)

// Ensure that the successor's grants go to the worker that holds the
// action's live claim: the live claim's ref with another executor (the
// superseded worker's, say) is not the successor, and nothing is
// activated anywhere.
func TestRedteam20_ActivateForAnotherExecutor(t *testing.T) {
	w := newWorld(t, 2)
	sc := w.newScenario(2)
	co := w.coordinator(testTimeout)
	if rec := mustContain(t, co, sc); rec.State != ledger.ContainmentFull {
		t.Fatalf("state %s", rec.State)
	}
	w.reconcile(sc)
	req := w.activateReq(sc)
	req.Executor = "worker-a"
	if _, err := co.Activate(context.Background(), req); !errors.Is(err, contain.ErrNotSuccessor) {
		t.Fatalf("activate for worker-a under worker-b's claim: %v", err)
	}
	for _, b := range sc.bounds {
		if st := w.status(b); st.Grant != nil {
			t.Fatalf("grant at %s: %+v", b, st.Grant)
		}
	}
	if _, err := co.Activate(context.Background(), w.activateReq(sc)); err != nil {
		t.Fatal(err)
	}
}
