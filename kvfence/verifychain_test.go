package kvfence

import (
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// verifyClosed closes the fixture's receiver, runs VerifyChain on its files
// and reopens it (as a correct receiver) for the fixture's cleanup.
func verifyClosed(t *testing.T, f *fixture) audit.Report {
	t.Helper()
	f.r.Close()
	rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil {
		t.Fatal(err)
	}
	f.reopenAfterVerify()
	return rep
}

// Ensure that verify-chain catches a receiver that skipped checks 2-4 from
// its own evidence: the defective receiver applies worker A's superseded
// grant after the hold, and VerifyChain reports fence_violation naming
// that entry, its grant and the hold that superseded it; the same schedule
// on a correct receiver verifies.
func TestVerifyChain_FenceViolation(t *testing.T) {
	for _, tc := range []struct {
		name      string
		v         defect.Variant
		violation bool
	}{
		{"correct receiver", defect.Variant{}, false},
		{"receiver without checks 2-4", defect.Variant{SkipAuthority: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.v)
			a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
			hold := f.hold("worker-a lease expired")
			b := f.activate("worker-b", "claim-2", f.patchRequest("raise-retention"))
			stale := f.submit("worker-a", a.envelope)
			current := f.submit("worker-b", b.envelope)
			rep := verifyClosed(t, f)
			if !tc.violation {
				wantDenied(t, stale, ReasonStaleEpoch)
				if current.Outcome != Applied || !rep.OK() {
					t.Fatalf("worker B %s; VerifyChain = %s: %s; want applied and ok", current.Outcome, rep.Problem, rep.Detail)
				}
				return
			}
			if stale.Outcome != Applied {
				t.Fatalf("defective receiver: %+v; the check cannot go red without checks 2-4", stale)
			}
			var fv *audit.FenceViolationError
			if rep.Problem != audit.ProblemFenceViolation || !errors.As(rep.Err(), &fv) || !IsIntegrityError(rep.Err()) {
				t.Fatalf("VerifyChain = %s (%v), want fence_violation", rep.Problem, rep.Err())
			}
			if fv.Seq != stale.AuditSeq || fv.Scope != fixScope || fv.Grant != a.grant.ID || fv.Epoch != a.grant.Epoch ||
				fv.Hold != hold.AuditSeq || fv.ActiveGrant != b.grant.ID {
				t.Fatalf("violation %+v; want entry %d, grant %s, hold %d, active %s", fv, stale.AuditSeq, a.grant.ID, hold.AuditSeq, b.grant.ID)
			}
			// B's retry is already_applied, which changes nothing and is
			// not a second violation.
			if current.Outcome != AlreadyApplied {
				t.Fatalf("worker B: %+v", current)
			}
		})
	}
}
