package kvfence

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// writtenThenHeldAnchor stores the first checkpoint past a given seq in
// the anchor it wraps, so that a Load sees it, and then holds the Store
// call until it is released, answering it with the error it is given: an
// anchor write that has reached the anchor but not returned (a slot
// written and not yet synced, a reply still on its way), and then fails.
type writtenThenHeldAnchor struct {
	audit.AnchorStore
	after   uint64
	entered chan struct{}
	release chan error
	mu      sync.Mutex
	gated   bool
}

func (a *writtenThenHeldAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	a.mu.Lock()
	gate := !a.gated && next.Seq > a.after
	if gate {
		a.gated = true
	}
	a.mu.Unlock()
	if err := a.AnchorStore.Store(old, next); err != nil || !gate {
		return err
	}
	close(a.entered)
	return <-a.release
}

// Ensure that a repeated hold (the same HoldRequest.ID) is not answered
// from an anchor whose write is still under way: the first hold's anchor
// write has reached the anchor store but not returned, and then fails, so
// that the first call gets ErrNotAcknowledged. The repeat may only be
// answered once that write's outcome is known (and then, after a failure,
// only through a commit of its own whose anchor write covers the entries).
// On etcd the next batch now starts while the anchor is written, reads the
// anchor from the store (currentAnchor) and repeatHold takes that read,
// which names the checkpoint being written, as the cover of an idle
// answer: the repeat is acknowledged, with hold acknowledgments signed
// over a checkpoint whose anchor write then fails.
func TestRedteamT_RepeatHoldNotAnsweredFromAnchorWriteInFlight(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		gate := &writtenThenHeldAnchor{AnchorStore: f.anchor, after: f.r.Head().Seq,
			entered: make(chan struct{}), release: make(chan error, 1)}
		f.r.opts.Anchor = gate
		req := HoldRequest{Scopes: []string{fixScope}, Reason: "incident 24", ID: "hold-24"}

		firstErr := make(chan error, 1)
		go func() {
			_, err := f.admin.Hold(f.ctx, req)
			firstErr <- err
		}()
		<-gate.entered // The first hold committed; its anchor write is in the store, not returned.

		type answer struct {
			res HoldResult
			err error
		}
		repeat := make(chan answer, 1)
		go func() {
			res, err := f.admin.Hold(f.ctx, req)
			repeat <- answer{res, err}
		}()
		var early *answer
		select {
		case a := <-repeat:
			early = &a
		case <-time.After(2 * time.Second):
		}
		gate.release <- errors.New("injected: the anchor write failed after it reached the store")
		if err := <-firstErr; !errors.Is(err, ErrNotAcknowledged) {
			t.Errorf("first hold after its anchor write failed = %v, want ErrNotAcknowledged", err)
		}
		if early == nil {
			if a := <-repeat; a.err != nil {
				t.Logf("repeat after the failed anchor write: %v", a.err)
			}
			return
		}
		if early.err == nil {
			t.Fatalf("the repeated hold was acknowledged (checkpoint seq %d, repeated=%v) while the anchor write of that checkpoint was still under way; that write then failed",
				early.res.Checkpoint.Seq, early.res.Repeated)
		}
	})
}
