package contain_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/contain"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
)

// Ensure that an effect a receiver reported under the superseded claim
// does not vanish from the record because a later reading leaves it out
// (a receiver restored from before it, or one that lies), nor change
// under the same audit seq, and that a stale rejection once observed is
// not erased by a later reading without one: the record keeps what it
// saw and says the reading disagreed.
func TestRedteam20_OutstandingVanishOnRerun(t *testing.T) {
	w := newWorld(t, 1)
	sc := w.newScenario(1)
	at := time.Unix(1_700_000_000, 0).UTC()
	stale := at.Add(time.Minute)
	var phase atomic.Int32
	receipts := func(scope string) ([]kvfence.Receipt, error) {
		switch phase.Load() {
		case 0:
			return []kvfence.Receipt{{Scope: scope, Action: sc.action, Target: "t-1", AuditSeq: 7, At: at, RevAfter: 3}}, nil
		case 1:
			return nil, nil
		}
		return []kvfence.Receipt{{Scope: scope, Action: sc.action, Target: "t-9", AuditSeq: 7, At: at, RevAfter: 4}}, nil
	}
	co, err := contain.New(contain.Options{Ledger: w.l, Timeout: testTimeout,
		Dial: func(ctx context.Context, r ledger.Receiver) (contain.Boundary, error) {
			return staleStatus{hostileReceipts{contain.Embedded(w.byName[r.Name].r), receipts}, &phase, stale}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	req := contain.ContainRequest{Action: sc.action, Reason: "worker-a paused", Operator: "op"}
	rec, err := co.Contain(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if b := rec.Boundaries[0]; b.Result != ledger.BoundaryAcknowledged || len(b.Outstanding) != 1 || !b.LastStaleRejectionAt.Equal(stale) {
		t.Fatalf("first run: %s, %d effects, stale at %v", b.Result, len(b.Outstanding), b.LastStaleRejectionAt)
	}
	for _, p := range []int32{1, 2} {
		phase.Store(p)
		if rec, err = co.Contain(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		b := rec.Boundaries[0]
		if b.Result != ledger.BoundaryAcknowledged || len(b.Outstanding) != 1 || b.Outstanding[0].Target != "t-1" ||
			b.Outstanding[0].Revision != 3 || b.ObservationError == "" {
			t.Fatalf("phase %d: %s, effects %+v, observation error %q", p, b.Result, b.Outstanding, b.ObservationError)
		}
		if !b.LastStaleRejectionAt.Equal(stale) {
			t.Fatalf("phase %d: last stale rejection %v, first observed %v", p, b.LastStaleRejectionAt, stale)
		}
	}
}

// staleStatus reports a stale rejection at a fixed time in phase 0 and
// none after.
type staleStatus struct {
	hostileReceipts
	phase *atomic.Int32
	at    time.Time
}

func (s staleStatus) Status(ctx context.Context, scope string) (kvfence.ScopeStatus, error) {
	st, err := s.hostileReceipts.Status(ctx, scope)
	if s.phase.Load() == 0 {
		st.LastStaleRejectionAt = s.at
	} else {
		st.LastStaleRejectionAt = time.Time{}
	}
	return st, err
}
