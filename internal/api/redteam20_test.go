package api

import (
	"errors"
	"testing"
)

// Ensure that an answer whose audit_seq is not its last acknowledged
// entry is refused: audit_seq is the hold's last entry, which the
// acknowledgments name under the receiver's key, and a checkpoint that
// covers a later seq does not make another number the hold's.
func TestRedteam20_HoldAuditSeqNotTheAcks(t *testing.T) {
	f := newHoldFixture(t)
	for _, seq := range []int{10, 12} {
		_, err := mutateHold(t, f.res, func(m map[string]any) { m["audit_seq"] = seq })
		if !errors.Is(err, ErrHoldMismatch) {
			t.Fatalf("audit_seq %d beside acknowledged entries 10 and 11: got %v, want ErrHoldMismatch", seq, err)
		}
	}
}
