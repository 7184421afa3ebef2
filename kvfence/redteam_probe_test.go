package kvfence

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/internal/defect"
)

// Ensure that a caller that is not the applied grant's executor cannot use
// stale denials as an oracle for what was applied: it guesses the request
// bytes of an applied change (a low-entropy value), submits each guess
// under a made-up grant to the held scope, and must not be told which one
// matched. Only the executor retrying its own envelope is told.
func TestRedteam_StaleDenialIsNoOracleForOthers(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	value := func(n int) []byte {
		return f.request(&Request{V: 1, Action: "set-retention", Target: fixTarget, Set: ptr([]byte(fmt.Sprintf(`{"days":%d}`, n)))})
	}
	secret := 37
	a := f.activate("worker-a", "claim-1", value(secret))
	if res := f.submit("worker-a", a.envelope); res.Outcome != Applied {
		t.Fatalf("first submit %+v", res)
	}
	f.hold("incident")
	probe := func(caller, grant string, n int) Result {
		return f.submit(caller, f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: 1, Grant: grant,
			Executor: caller, Claim: "x", Request: value(n)}))
	}
	for _, tc := range []struct {
		name, caller, grant string
	}{
		{"another caller, made-up grant", "prober", strings.Repeat("0", 32)},
		{"another caller, the applied grant", "prober", a.grant.ID},
		{"the executor, another grant", "worker-a", strings.Repeat("0", 32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for n := 30; n < 45; n++ {
				res := probe(tc.caller, tc.grant, n)
				wantDenied(t, res, ReasonReceiverHeld)
				if strings.Contains(res.Detail, "applied") || strings.Contains(res.Detail, "receipt") {
					t.Fatalf("guess %d: detail %q tells %s that its guess was the applied request", n, res.Detail, tc.caller)
				}
			}
		})
	}
	// The executor's own retry is still told.
	res := f.submit("worker-a", a.envelope)
	if !strings.Contains(res.Detail, "receipt is at audit seq") {
		t.Fatalf("the executor's retry of its own applied envelope: detail %q", res.Detail)
	}
	// So is a worker approved for the same request that a successor
	// applied under its own grant: its change is done.
	take := f.request(&Request{V: 1, Action: "takeover", Target: fixTarget, Set: ptr([]byte(`{"days":1}`))})
	b := f.activate("worker-b", "claim-2", take)
	f.hold("worker-b lost its lease")
	c := f.activate("worker-c", "claim-3", take)
	if res := f.submit("worker-c", c.envelope); res.Outcome != Applied {
		t.Fatalf("the successor's submit %+v", res)
	}
	res = f.submit("worker-b", b.envelope)
	wantDenied(t, res, ReasonStaleEpoch)
	if !strings.Contains(res.Detail, "receipt is at audit seq") {
		t.Fatalf("the superseded worker's retry of the request its successor applied: detail %q", res.Detail)
	}
}
