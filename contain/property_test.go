package contain_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvfence/kvfence/contain"
	"github.com/kvfence/kvfence/ledger"
)

// wantState is the containment state the test expects from boundaries'
// results, derived here apart from the package's and the ledger's own.
func wantState(bs []ledger.BoundaryContainment) ledger.ContainmentState {
	all, any, alt := true, false, false
	for _, b := range bs {
		switch b.Result {
		case ledger.BoundaryAcknowledged:
			any = true
		case ledger.BoundaryAlternate:
			any, alt = true, true
		default:
			all = false
		}
	}
	switch {
	case len(bs) == 0 || !any:
		return ledger.ContainmentNone
	case all && alt:
		return ledger.ContainmentFullWithAlternate
	case all:
		return ledger.ContainmentFull
	}
	return ledger.ContainmentPartial
}

// Ensure, over random cases of 1 to 5 boundaries with random faults that
// random steps heal and break (contain reruns, alternates, successor
// activations, reconciliation), that after every step: no successor
// grant exists at any receiver unless every boundary acknowledged with a
// signature that verifies under its pinned key (or an alternate was
// recorded) and the superseded claim was reconciled; no scope's epoch
// advanced more than once however many reruns; the record's state is the
// one its boundaries' results make; and no acknowledgment the receiver
// did not give is recorded as acknowledged.
func TestContain_Property(t *testing.T) {
	cases := 200
	if testing.Short() {
		cases = 60
	}
	ctx := context.Background()
	stats := map[string]int{}
	var w *world
	for c := 0; c < cases; c++ {
		// A fresh ledger now and then: reading a receiver's record scans
		// the ledger's chain after its registration, which grows with
		// every case.
		if c%25 == 0 {
			w = newWorld(t, 5)
		}
		rng := rand.New(rand.NewPCG(uint64(c), 20))
		n := 1 + rng.IntN(5)
		sc := w.newScenario(n)
		randomFault := func() fault {
			if rng.IntN(3) == 0 {
				return faultNone
			}
			return fault(1 + rng.IntN(int(numFaults)-1))
		}
		var initial []fault
		for range n {
			initial = append(initial, randomFault())
		}
		fs := w.installFaults(sc, initial...)
		co := w.coordinator(8 * time.Millisecond)
		reconciled := false
		var log []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("case %d (n=%d, faults %v), steps %v: %s", c, n, initial, log, fmt.Sprintf(format, args...))
		}
		check := func() {
			t.Helper()
			rec, err := w.l.Containment(sc.action)
			if errors.Is(err, ledger.ErrNoContainment) {
				rec = ledger.Containment{}
			} else if err != nil {
				fail("containment: %v", err)
			}
			if rec.ID != "" && rec.State != wantState(rec.Boundaries) {
				fail("state %s, boundaries %v make %s", rec.State, results(rec), wantState(rec.Boundaries))
			}
			contained := rec.ID != ""
			for _, b := range rec.Boundaries {
				bd := ledger.Boundary{Receiver: b.Receiver, Scope: b.Scope}
				switch b.Result {
				case ledger.BoundaryAlternate:
				case ledger.BoundaryAcknowledged:
					pinned, err := w.l.Receiver(b.Receiver)
					if err != nil {
						fail("%v", err)
					}
					if _, _, err := b.VerifyAcknowledgment(pinned); err != nil {
						fail("%v recorded acknowledged without a verified acknowledgment: %v", bd, err)
					}
					fs[b.Receiver].mu.Lock()
					real := fs[b.Receiver].realAcks[b.Scope]
					fs[b.Receiver].mu.Unlock()
					if !bytes.Equal(real, b.Ack) || b.InstalledEpoch != sc.before[bd]+1 {
						fail("%v recorded an acknowledgment the receiver did not give (epoch %d, before %d)", bd, b.InstalledEpoch, sc.before[bd])
					}
				default:
					contained = false
				}
			}
			for _, bd := range sc.bounds {
				st := w.status(bd)
				if st.Epoch > sc.before[bd]+1 {
					fail("%v: epoch %d, %d before the containment: more than one generation", bd, st.Epoch, sc.before[bd])
				}
				if st.Grant == nil || st.Grant.Claim != sc.claimB.Ref {
					continue
				}
				if !contained || !reconciled {
					fail("successor grant at %v with containment %s (%v), reconciled %v", bd, rec.State, results(rec), reconciled)
				}
				for _, b := range rec.Boundaries {
					if b.Receiver == bd.Receiver && b.Scope == bd.Scope && b.Result != ledger.BoundaryAcknowledged {
						fail("successor grant at %v, which is %s", bd, b.Result)
					}
				}
			}
		}
		check()
		steps := 3 + rng.IntN(8)
		for s := 0; s < steps; s++ {
			switch op := rng.IntN(6); op {
			case 0, 1:
				log = append(log, "contain")
				if _, err := co.Contain(ctx, contain.ContainRequest{Action: sc.action, Reason: "worker-a paused", Operator: "op"}); err != nil {
					fail("contain: %v", err)
				}
			case 2:
				i := rng.IntN(n)
				f := faultNone // heal as often as break, so that some cases reach full
				if rng.IntN(2) == 0 {
					f = randomFault()
				}
				log = append(log, fmt.Sprintf("%d:%s", i, f))
				fs[sc.bounds[i].Receiver].set(f)
			case 3:
				i := rng.IntN(n)
				log = append(log, fmt.Sprintf("alternate %d", i))
				_, err := co.Alternate(ctx, ledger.AlternateRequest{Action: sc.action, Receiver: sc.bounds[i].Receiver,
					Scope: sc.bounds[i].Scope, Operator: "op", Reason: "cut off by another path"})
				if err != nil && !errors.Is(err, ledger.ErrAlreadyAcknowledged) && !errors.Is(err, ledger.ErrNoContainment) {
					fail("alternate: %v", err)
				}
			case 4:
				log = append(log, "activate")
				res, err := co.Activate(ctx, w.activateReq(sc))
				switch {
				case err == nil:
					stats["activated"]++
				case errors.Is(err, ledger.ErrNotContained), errors.Is(err, ledger.ErrNotReconciled), errors.Is(err, ledger.ErrNoContainment):
					stats["refused"]++
					if len(res.Activated) != 0 {
						fail("refused activation activated %v", res.Activated)
					}
				case errors.Is(err, contain.ErrActivationIncomplete):
					stats["incomplete"]++
				default:
					fail("activate: %v", err)
				}
			case 5:
				if !reconciled {
					log = append(log, "reconcile")
					w.reconcile(sc)
					reconciled = true
				}
			}
			check()
		}
		if rec, err := w.l.Containment(sc.action); err == nil {
			stats[string(rec.State)]++
		}
	}
	t.Logf("%d cases: %v", cases, stats)
}
