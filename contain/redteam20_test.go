package contain_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/kvfence/kvfence/contain"

	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
)

// Ensure that a hold planted at a boundary with the id the containment
// will derive, and the reason it will give, before worker A's grant was
// activated there, is not taken for the containment's hold: the receiver
// repeats the planted hold's result, whose epoch A's grant was activated
// at, so A is not fenced by it. The boundary must not read acknowledged,
// and the containment must not read full while A's grant is open.
func TestRedteam20_PlantedHoldBeforeGrant(t *testing.T) {
	w := newWorld(t, 2)
	ctx := context.Background()
	w.beforeActivate = func(sc *scenario) {
		b := sc.bounds[0]
		id := ledger.HoldID(ledger.ContainmentID("ledger-1", sc.action, sc.claimA.Ref), b.Receiver, b.Scope)
		if _, err := w.byName[b.Receiver].r.Admin().Hold(ctx, kvfence.HoldRequest{Scopes: []string{b.Scope},
			Reason: "worker-a paused", ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	sc := w.newScenario(2)
	w.beforeActivate = nil
	b := sc.bounds[0]
	if st := w.status(b); st.Grant == nil || st.Grant.Claim != sc.claimA.Ref {
		t.Fatalf("setup: A's grant is not open at %s: %+v", b, st)
	}
	co := w.coordinator(testTimeout)
	rec := mustContain(t, co, sc)
	st := w.status(b)
	open := st.Grant != nil && st.Grant.Claim == sc.claimA.Ref
	if rec.Boundaries[0].Result == ledger.BoundaryAcknowledged || rec.State == ledger.ContainmentFull {
		t.Fatalf("containment %s, boundary %s %s at epoch %d, while A's grant is open there: %v", rec.State, b,
			rec.Boundaries[0].Result, rec.Boundaries[0].InstalledEpoch, open)
	}
	// A rerun neither acknowledges it nor issues a second generation.
	epoch := st.Epoch
	rec = mustContain(t, co, sc)
	if rec.State == ledger.ContainmentFull || w.status(b).Epoch != epoch {
		t.Fatalf("rerun: %s, epoch %d then %d", rec.State, epoch, w.status(b).Epoch)
	}
	w.reconcile(sc)
	if _, err := co.Activate(ctx, w.activateReq(sc)); err == nil {
		t.Fatal("successor activated while A's grant is open")
	}
	if g := w.successorGrants(sc); len(g) != 0 {
		t.Fatalf("successor grants at %v", g)
	}
}

// hostileReceipts is a receiver whose receipts answer is whatever the test
// makes it.
type hostileReceipts struct {
	contain.Boundary
	receipts func(scope string) ([]kvfence.Receipt, error)
}

func (h hostileReceipts) ReceiptsByClaim(ctx context.Context, scope, claim string) ([]kvfence.Receipt, error) {
	return h.receipts(scope)
}

// Ensure that a receiver's receipts answer is recorded only as names that
// print as what they are, and that an answer too large, or none, is not
// recorded as "no outstanding effects": the record says the effects were
// not listed.
func TestRedteam20_HostileReceipts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		receipts func(scope string) ([]kvfence.Receipt, error)
		want     int // effects recorded
	}{
		{"control characters", func(scope string) ([]kvfence.Receipt, error) {
			return []kvfence.Receipt{{Scope: scope, Action: "act\x1b[2J\u202e", Target: "t\n", AuditSeq: 3, At: time.Now()}}, nil
		}, 0},
		{"too many", func(scope string) ([]kvfence.Receipt, error) {
			rs := make([]kvfence.Receipt, ledger.MaxOutstanding+1)
			for i := range rs {
				rs[i] = kvfence.Receipt{Scope: scope, Action: fmt.Sprintf("a%d", i), Target: "t", AuditSeq: uint64(i + 1), At: time.Now()}
			}
			return rs, nil
		}, ledger.MaxOutstanding},
		{"failed", func(scope string) ([]kvfence.Receipt, error) { return nil, errors.New("connection reset") }, 0},
		{"other scope", func(scope string) ([]kvfence.Receipt, error) {
			return []kvfence.Receipt{{Scope: scope + "x", Action: "a", Target: "t", AuditSeq: 1}}, nil
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 1)
			sc := w.newScenario(1)
			co, err := contain.New(contain.Options{Ledger: w.l, Timeout: testTimeout,
				Dial: func(ctx context.Context, r ledger.Receiver) (contain.Boundary, error) {
					return hostileReceipts{contain.Embedded(w.byName[r.Name].r), tc.receipts}, nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			rec, err := co.Contain(context.Background(), contain.ContainRequest{Action: sc.action, Reason: "worker-a paused", Operator: "op"})
			if err != nil {
				t.Fatal(err)
			}
			b := rec.Boundaries[0]
			if b.Result != ledger.BoundaryAcknowledged || len(b.Outstanding) != tc.want {
				t.Fatalf("%s with %d effects", b.Result, len(b.Outstanding))
			}
			for _, e := range b.Outstanding {
				for _, s := range []string{e.Action, e.Target} {
					if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) }) {
						t.Fatalf("recorded effect name %q", s)
					}
				}
			}
			if b.ErrorCode != contain.CodeOutstandingUnlisted || b.Error == "" {
				t.Fatalf("effects not listed, and the record says %q %q", b.ErrorCode, b.Error)
			}
		})
	}
}
