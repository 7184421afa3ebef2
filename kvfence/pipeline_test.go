package kvfence

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
)

// gatedAnchor records the seq of every Store and holds the first write
// past a given seq until it is released, answering it with err.
type gatedAnchor struct {
	audit.AnchorStore
	after   uint64
	entered chan struct{}
	release chan error
	mu      sync.Mutex
	stored  []uint64
	gated   bool
}

func (a *gatedAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	a.mu.Lock()
	a.stored = append(a.stored, next.Seq)
	gate := !a.gated && next.Seq > a.after
	if gate {
		a.gated = true
	}
	a.mu.Unlock()
	if gate {
		close(a.entered)
		if err := <-a.release; err != nil {
			return err
		}
	}
	return a.AnchorStore.Store(old, next)
}

func (a *gatedAnchor) seqs() []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]uint64(nil), a.stored...)
}

// waitCommits waits until r has committed n transactions, and reports
// whether it did.
func waitCommits(r *Receiver, n uint64) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Microsecond) {
		if r.queue.commits.Load() >= n {
			return true
		}
	}
	return false
}

// Ensure that on a database file the next batch commits while the anchor
// write of the one before it is still running, that no caller, the
// leader's or another, is answered before the anchor covers its commit, and
// that the anchor is written in commit order. When the held write fails,
// its calls are not acknowledged, and the next commit's anchor, which
// covers both, acknowledges its own.
func TestGroupCommit_AnchorWriteOverlapsNextCommit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		failA bool
	}{
		{"anchor written", false},
		{"anchor write fails", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := gcFixture(t, gcSeed)
			a, b := twoWorkers(t, f)
			head := f.r.Head()
			gate := &gatedAnchor{AnchorStore: f.anchor, after: head.Seq, entered: make(chan struct{}), release: make(chan error, 1)}
			f.r.opts.Anchor = gate

			// A and B queue behind a write that waits in its transaction,
			// so that they share the next batch, A leading it.
			entered, release := make(chan struct{}), make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				// No entry of its own: it re-signs the head, which the
				// gate lets through.
				if err := f.r.exec(0, func(*wtx) error { close(entered); <-release; return nil }); err != nil {
					t.Errorf("blocking write: %v", err)
				}
			})
			<-entered
			calls := []*gcCall{{caller: "worker-a", envelope: a.envelope}, {caller: "worker-b", envelope: b.envelope}}
			done := make([]chan struct{}, 3)
			for i, c := range calls {
				done[i] = make(chan struct{})
				go func() { defer close(done[i]); c.run(f.ctx, f.r) }()
				if !queued(f.r, i+1) {
					t.Fatalf("%d calls did not queue", i+1)
				}
			}
			close(release)
			wg.Wait()
			<-gate.entered // A and B committed; their anchor write is held.
			base := f.r.queue.commits.Load()

			hold := &gcCall{hold: &HoldRequest{Scopes: []string{gcScope}, Reason: "after the held anchor write"}}
			calls = append(calls, hold)
			done[2] = make(chan struct{})
			go func() { defer close(done[2]); hold.run(f.ctx, f.r) }()
			// A failure lets the held write go first, so that no call is
			// left waiting.
			fail := func(format string, args ...any) {
				t.Helper()
				gate.release <- nil
				for _, d := range done {
					<-d
				}
				t.Fatalf(format, args...)
			}
			if !waitCommits(f.r, base+1) {
				fail("the next batch did not commit while the anchor write before it was held")
			}
			for i, d := range done {
				select {
				case <-d:
					fail("call %d (%v) was answered before the anchor covered its commit", i, calls[i])
				case <-time.After(10 * time.Millisecond):
				}
			}
			var injected error
			if tc.failA {
				injected = errors.New("injected anchor failure")
			}
			gate.release <- injected
			for _, d := range done {
				<-d
			}

			for _, c := range calls[:2] {
				switch {
				case tc.failA && !errors.Is(c.err, ErrNotAcknowledged):
					t.Errorf("%v: %s %v, want ErrNotAcknowledged", c, outcome(c), c.err)
				case !tc.failA && (c.err != nil || c.res.Outcome != Applied):
					t.Errorf("%v: %s %v, want applied", c, outcome(c), c.err)
				}
			}
			if hold.err != nil {
				t.Fatalf("hold: %v", hold.err)
			}
			seqs := gate.seqs()
			for i := 1; i < len(seqs); i++ {
				if seqs[i] <= seqs[i-1] {
					t.Fatalf("anchor writes out of commit order: seqs %v", seqs)
				}
			}
			anc, err := f.anchor.Load()
			if err != nil {
				t.Fatal(err)
			}
			if anc.Seq != f.r.Head().Seq {
				t.Fatalf("anchor at seq %d, want the head's %d", anc.Seq, f.r.Head().Seq)
			}
		})
	}
}
