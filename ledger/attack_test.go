package ledger

import (
	"errors"
	"testing"
)

// Ensure that a takeover cannot hand the action back to the worker it
// supersedes: the ledger knows workers only by name, so a new claim for
// the same name would let the superseded instance, still running, resume
// the new claim (Claim answers Resumed) and dispatch and finish it.
func TestAttack_TakeoverToSupersededWorker(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	defer l.Close()
	approve(t, l, "act")
	old := mustClaim(t, l, "act", "worker-a")
	if _, err := l.Dispatch(ctx, old.Ref, "worker-a"); err != nil {
		t.Fatal(err)
	}
	nc, err := l.Takeover(ctx, TakeoverRequest{Action: "act", Operator: "op", Reason: "worker-a paused", Worker: "worker-a"})
	if err == nil {
		// The superseded instance, retrying its claim, now holds the
		// operator's new claim.
		c, cerr := l.Claim(ctx, ClaimRequest{Action: "act", Worker: "worker-a"})
		t.Fatalf("takeover to the superseded worker committed (claim %s); its stale instance re-claims: %+v, %v", nc.Ref, c, cerr)
	}
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("takeover to the superseded worker: %v, want ErrInvalidArgument", err)
	}
	v, _ := l.Action("act")
	if v.Live != old.Ref || len(v.Claims) != 1 {
		t.Fatalf("a refused takeover changed the action: %+v", v)
	}
}
