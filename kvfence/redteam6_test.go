package kvfence

import (
	"errors"
	"testing"
	"time"
)

// panicOnce is an Observer that panics on its first report.
type panicOnce struct{ fired bool }

func (p *panicOnce) Committed(CommitStats) {
	if !p.fired {
		p.fired = true
		panic("observer failed")
	}
}

// An Observer that panics after a commit must not wedge the receiver: the
// panic was contained (the calls got ErrNotAcknowledged) while the anchor
// write ran inside run's recover. With the anchor write moved to
// anchorCommits, Observer.Committed runs with amu held and outside any
// recover, so the panic leaves amu locked; the next leader then blocks on
// amu while holding wmu, and every later write hangs.
func TestRedteam6_ObserverPanicDoesNotWedgeWrites(t *testing.T) {
	f := gcFixture(t, gcSeed)
	f.r.opts.Observer = &panicOnce{}

	first := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				first <- errors.New("panic escaped the receiver to the caller")
			}
		}()
		_, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{gcScope}, Reason: "first"})
		first <- err
	}()
	select {
	case err := <-first:
		if !errors.Is(err, ErrNotAcknowledged) {
			t.Errorf("first hold: %v, want ErrNotAcknowledged", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("first hold did not return")
	}

	second := make(chan error, 1)
	go func() {
		_, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{gcScope}, Reason: "second"})
		second <- err
	}()
	select {
	case err := <-second:
		if err != nil {
			t.Fatalf("second hold: %v", err)
		}
	case <-time.After(10 * time.Second):
		// Release the lock the panic left held, so that the blocked
		// write ends and the fixture can close.
		f.r.amu.Unlock()
		<-second
		t.Fatal("a write after the observer's panic hung: the anchor lock was never released")
	}
}

// Guard: the state digest moved by a batch counts every
// change of a committed run exactly once and nothing of a run that rolled
// back. A batch whose third call changes a state record and then fails
// rolls back; its calls run again alone, the failing one failing again.
// The receiver's running digest must then equal the digest recomputed
// from the records, and the signed checkpoint's.
func TestRedteam6_HasherDigestAfterRolledBackBatch(t *testing.T) {
	f := gcFixture(t, gcSeed)
	a, b := twoWorkers(t, f)

	entered, release := make(chan struct{}), make(chan struct{})
	blocked := make(chan error, 1)
	go func() {
		blocked <- f.r.exec(0, func(*wtx) error { close(entered); <-release; return nil })
	}()
	<-entered
	injected := errors.New("injected call failure")
	calls := []func() error{
		func() error { _, err := f.r.Submit(f.ctx, "worker-a", a.envelope); return err },
		func() error {
			return f.r.exec(0, func(w *wtx) error {
				ctl, err := w.control(gcScope)
				if err != nil {
					return err
				}
				ctl.StaleRejections += 7
				if err := w.putControl(gcScope, ctl); err != nil {
					return err
				}
				return injected
			})
		},
		func() error { _, err := f.r.Submit(f.ctx, "worker-b", b.envelope); return err },
	}
	errs := make([]chan error, len(calls))
	for i, c := range calls {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- c() }()
		if !queued(f.r, i+1) {
			t.Fatalf("%d calls did not queue", i+1)
		}
	}
	close(release)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		err := <-errs[i]
		if i == 1 != errors.Is(err, injected) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	computed, err := f.r.computeState(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.r.state.Sum(), computed.Sum(); got != want {
		t.Fatalf("running digest %x, records give %x", got, want)
	}
	f.reopen()
	sc, err := f.r.checkState(nil)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Computed != sc.Signed {
		t.Fatalf("computed %x, signed %x", sc.Computed, sc.Signed)
	}
}
