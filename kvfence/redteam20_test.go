package kvfence

import (
	"errors"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// syncFailAnchor is an anchor store whose next Store writes the
// checkpoint and then reports a failure, as a write whose fdatasync
// failed after the data reached the file: the anchor then reads back the
// checkpoint, but nothing says it is durable.
type syncFailAnchor struct {
	audit.AnchorStore
	fail bool
	// stored counts the Store calls that succeeded.
	stored int
}

func (a *syncFailAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	err := a.AnchorStore.Store(old, next)
	if a.fail {
		a.fail = false
		if err == nil {
			return errors.New("injected fdatasync failure after the anchor write")
		}
	}
	if err == nil {
		a.stored++
	}
	return err
}

// Ensure that a repeated hold whose first anchor write failed after the
// checkpoint reached the anchor (a failed fdatasync) is not acknowledged
// on the strength of that write: the checkpoint it names must come from
// an anchor write that succeeded.
func TestRedteam20_RepeatAfterFailedAnchorSync(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	fa := &syncFailAnchor{AnchorStore: f.anchor, fail: true}
	f.r.opts.Anchor = fa
	if _, err := f.admin.Hold(f.ctx, holdReq("h", fixScope)); !errors.Is(err, ErrNotAcknowledged) {
		t.Fatalf("Hold with a failing anchor sync = %v, want ErrNotAcknowledged", err)
	}
	res := f.holdOK(holdReq("h", fixScope))
	if !res.Repeated || res.Scopes[0].Epoch != 2 {
		t.Fatalf("repeat = %+v", res)
	}
	if fa.stored == 0 {
		t.Fatalf("repeat acknowledged hold entry %d with checkpoint %d, which no successful anchor write holds",
			res.AuditSeq, res.Checkpoint.Seq)
	}
	wantAcks(t, res, "h")
}
