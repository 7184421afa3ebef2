package ledger

import (
	"errors"
	"testing"

	"github.com/kvfence/kvfence/internal/defect"
)

// This package's tests open a ledger without its anchor check with
// open(..., variant) to show what the check prevents; they alone, and the
// lab build, allow it.
func init() { defectsAllowed.Store(true) }

// Ensure that, without the switch that only the lab build and this
// package's tests set, open refuses a ledger without its anchor check.
func TestOpen_DefectiveVariantNeedsLabBuild(t *testing.T) {
	f := newFixture(t)
	defectsAllowed.Store(false)
	t.Cleanup(func() { defectsAllowed.Store(true) })
	l, err := open(f.path, &Options{Key: f.key, Now: f.clock.Now}, defect.Variant{SkipAnchor: true})
	if err == nil {
		l.Close()
	}
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("open(SkipAnchor) without the switch = %v, want ErrInvalidArgument", err)
	}
	f.open().Close()
}
