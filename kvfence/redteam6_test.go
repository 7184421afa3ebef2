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
