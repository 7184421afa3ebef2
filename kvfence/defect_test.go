package kvfence

import (
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// This package's tests open defective receivers with open(..., variant) to
// show that their assertions go red without the checks; they alone, and the
// lab build, allow it.
func init() { defectsAllowed.Store(true) }

// withoutDefects makes the rest of the test run as every build without the
// kvfencelab tag does: no defective variant takes effect.
func withoutDefects(t testing.TB) {
	t.Helper()
	defectsAllowed.Store(false)
	t.Cleanup(func() { defectsAllowed.Store(true) })
}

// Ensure that, without the switch that only the lab build and this
// package's tests set, open refuses every defective variant.
func TestOpen_DefectiveVariantNeedsLabBuild(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.r.Close()
	withoutDefects(t)
	for _, v := range []defect.Variant{{SkipAuthority: true}, {SkipAnchor: true}, {SkipAuthority: true, SkipAnchor: true},
		{CheckOutsideTransaction: true}, defect.CheckThenAct} {
		r, err := open(f.path, f.opts(), v)
		if err == nil {
			r.Close()
		}
		if !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("open(%+v) without the switch = %v, want ErrInvalidArgument", v, err)
		}
	}
	f.reopen()
}

// Ensure that Submit runs checks 2-4 without the switch even for a
// receiver that carries the SkipAuthority variant (defence in depth: the
// variant has no effect outside the lab build and this package's tests).
func TestSubmit_DefectiveVariantIneffectiveWithoutSwitch(t *testing.T) {
	f := newFixture(t, defect.Variant{SkipAuthority: true})
	withoutDefects(t)
	res, _ := staleWorker(t, f)
	wantDenied(t, res, ReasonStaleEpoch)
	f.wantTarget(1, fixValue)
}

// Ensure that Inspect and VerifyChain, which open without checking the
// anchor, are normal open modes that need no defect: they work on a
// restored copy without the switch.
func TestInspectVerifyChain_NoDefectNeeded(t *testing.T) {
	f, _ := restoredFixture(t)
	withoutDefects(t)
	q, err := Inspect(f.path, f.anchor)
	if err != nil || q.Head.Seq >= q.Anchor.Seq {
		t.Fatalf("Inspect(restored) = %+v, %v; want the head behind the anchor", q, err)
	}
	rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil || rep.Problem != audit.ProblemRollbackDetected {
		t.Fatalf("VerifyChain(restored) = %+v, %v; want rollback_detected", rep, err)
	}
	// For the fixture's cleanup: the restored copy, read-only, without its
	// anchor.
	if f.r, err = Open(f.path, &Options{ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
}
