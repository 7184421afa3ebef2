package etcdanchor

import (
	"fmt"

	"github.com/kvfence/kvfence/audit"
)

// checkSwap decides a compare-and-swap from the current anchor cur (nil if
// none) to next with the rules and errors of every audit.AnchorStore: the
// stored anchor must be old (ErrWriteConflict), next must be for the same
// receiver (ErrReceiverMismatch) and, unless it supersedes, must not move
// back (ErrAnchorRegression, which Checkpoint.CheckAdvance decides); a
// supersession must keep the consumed admission or name a later one
// (Checkpoint.CheckSupersede). next has been validated by MarshalAnchor.
func checkSwap(cur, old, next *audit.SignedCheckpoint, supersede bool) error {
	switch {
	case supersede && cur != nil && *cur == *next:
		// A supersession retried after it wrote next: it holds.
		return nil
	case old == nil && cur != nil:
		return fmt.Errorf("%w: expected no anchor, found seq %d (%x)", audit.ErrWriteConflict, cur.Seq, cur.Head[:])
	case old != nil && cur == nil:
		return fmt.Errorf("%w: expected anchor seq %d (%x): %w", audit.ErrWriteConflict, old.Seq, old.Head[:], audit.ErrAnchorMissing)
	case old != nil && *old != *cur:
		return fmt.Errorf("%w: expected anchor seq %d (%x), found seq %d (%x)",
			audit.ErrWriteConflict, old.Seq, old.Head[:], cur.Seq, cur.Head[:])
	case cur == nil:
		return nil
	case supersede:
		return cur.CheckSupersede(next.Checkpoint)
	}
	return cur.CheckAdvance(next.Checkpoint)
}
