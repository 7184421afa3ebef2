package kvfence

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// syncFailAnchor is an anchor store whose next Store writes the
// checkpoint and then reports a failure, as a write that took effect and
// whose answer was lost (an etcd Txn that committed): the anchor then
// reads back the checkpoint, but the writer was told it failed.
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
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		fa := &syncFailAnchor{AnchorStore: f.anchor, fail: true}
		f.r.opts.Anchor = fa
		if _, err := f.admin.Hold(f.ctx, holdReq("h", fixScope)); !errors.Is(err, ErrNotAcknowledged) {
			t.Fatalf("Hold with a failing anchor sync = %v, want ErrNotAcknowledged", err)
		}
		f.clock.Add(time.Second) // a checkpoint signed again differs
		res := f.holdOK(holdReq("h", fixScope))
		if !res.Repeated || res.Scopes[0].Epoch != 2 {
			t.Fatalf("repeat = %+v", res)
		}
		if fa.stored == 0 {
			t.Fatalf("repeat acknowledged hold entry %d with checkpoint %d, which no successful anchor write holds",
				res.AuditSeq, res.Checkpoint.Seq)
		}
		if a, err := f.anchor.Load(); err != nil || a != res.Checkpoint {
			t.Fatalf("anchor %d (%v); the repeat names checkpoint %d", a.Seq, err, res.Checkpoint.Seq)
		}
		wantAcks(t, res, "h")
	})
}

// faultyAnchor20 makes two Stores in six fail, one before the write and
// one after the checkpoint reached the anchor, and keeps the checkpoints whose Store
// succeeded.
type faultyAnchor20 struct {
	audit.AnchorStore
	mu     sync.Mutex
	n      int
	stored map[audit.SignedCheckpoint]bool
}

func (a *faultyAnchor20) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	switch a.n % 6 {
	case 2:
		return errors.New("injected failure before the anchor write")
	case 5:
		if err := a.AnchorStore.Store(old, next); err != nil {
			return err
		}
		return errors.New("injected fdatasync failure after the anchor write")
	}
	err := a.AnchorStore.Store(old, next)
	if err == nil {
		a.stored[next] = true
	}
	return err
}

func (a *faultyAnchor20) durable(sc audit.SignedCheckpoint) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stored[sc]
}

// Ensure that, with first holds, repeats and other writes running
// concurrently while anchor writes fail before and after they take
// effect, every hold that is acknowledged names a checkpoint that an
// anchor write stored successfully and that covers it, and no hold id
// ever issues a second generation.
func TestRedteam20_ConcurrentRepeatsUnderAnchorFaults(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	fa := &faultyAnchor20{AnchorStore: f.anchor, stored: map[audit.SignedCheckpoint]bool{}}
	f.r.opts.Anchor = fa
	const ids, workers, rounds = 3, 6, 12
	scopes := make([]string, ids)
	for i := range ids {
		scopes[i] = fmt.Sprintf("s%d", i)
		for {
			_, err := f.admin.CreateScope(f.ctx, scopes[i])
			if err == nil || errors.Is(err, ErrScopeExists) {
				break
			}
			if !errors.Is(err, ErrNotAcknowledged) {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	epochs := map[string]uint64{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				if w == 0 {
					// Real writes beside the holds: their batches carry
					// the repeats that are not idle.
					_, _ = f.admin.CreateScope(f.ctx, fmt.Sprintf("x%d", i))
					continue
				}
				k := (w + i) % ids
				res, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{scopes[k]}, Reason: "contain", ID: fmt.Sprintf("id-%d", k)})
				if errors.Is(err, ErrNotAcknowledged) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if !fa.durable(res.Checkpoint) || res.Checkpoint.Seq < res.AuditSeq {
					t.Errorf("hold %s acknowledged with checkpoint %d (entry %d), which no successful anchor write stored",
						scopes[k], res.Checkpoint.Seq, res.AuditSeq)
				}
				mu.Lock()
				if e, ok := epochs[scopes[k]]; ok && e != res.Scopes[0].Epoch {
					t.Errorf("hold id on %s installed epoch %d and %d", scopes[k], e, res.Scopes[0].Epoch)
				}
				epochs[scopes[k]] = res.Scopes[0].Epoch
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// The last write's anchor write may have failed, leaving the chain one
	// batch ahead of the anchor, as an unacknowledged write does; the
	// fixture's final check wants them equal. Injected failures never come
	// twice in a row, so a write acknowledged within three tries catches
	// the anchor up.
	for i := 0; ; i++ {
		_, err := f.admin.CreateScope(f.ctx, fmt.Sprintf("settle%d", i))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotAcknowledged) || i == 2 {
			t.Fatalf("settling the anchor: %v", err)
		}
	}
	for _, s := range scopes {
		if st, err := f.r.Status(s); err != nil || st.Epoch > 2 {
			t.Fatalf("scope %s at epoch %d (%v) after holds of one id", s, st.Epoch, err)
		}
	}
}
