package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/audit"
)

// Ensure that the hint for a fence violation names both of its causes: a
// receiver without its fence checks, and records edited in the store
// under a running receiver.
func TestIntegrityHint_FenceViolationNamesBothCauses(t *testing.T) {
	err := fmt.Errorf("kvfence: db: %w", &audit.FenceViolationError{Seq: 7, Scope: "s", Epoch: 1, Grant: "g"})
	for _, suggest := range []bool{false, true} {
		hint := integrityHint(err, suggest)
		for _, want := range []string{"without its fence checks", "edited in the store under the running receiver"} {
			if !strings.Contains(hint, want) {
				t.Errorf("hint %q does not say %q", hint, want)
			}
		}
	}
}
