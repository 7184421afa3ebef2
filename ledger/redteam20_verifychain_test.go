package ledger

import (
	"crypto/ed25519"
	"testing"

	"github.com/kvfence/kvfence/audit"
)

// Ensure that `ledger verify-chain` does not report as verified a chain
// whose tail past the anchor was appended without the ledger's key (no
// checkpoint signed with it covers the head), which Open refuses.
func TestRedteam20_VerifyChainForgedTail(t *testing.T) {
	f, l, rs, _, c := containedFixture(t)
	if _, err := l.RecordBoundaries(ctx, c.ID, []BoundaryContainment{rs["r1"].ackFor(t, c.Boundaries[0], 0)}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	forgeAlternate(t, f.path, c.ID, 2)
	rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil || rep.Problem != audit.ProblemStateMismatch {
		t.Fatalf("verify-chain passes a tail no ledger checkpoint covers: %+v", rep)
	}
}
