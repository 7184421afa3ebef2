package ledger

import (
	"testing"
	"time"
)

// Ensure that a reading recorded after a newer one (two coordinators
// rerunning a containment at once: the one that read first records last)
// does not replace the newer reading: the effects and the stale rejection
// it saw stay, whether the boundary is acknowledged again or retried.
func TestRedteam20_OlderObservationRecordedLast(t *testing.T) {
	_, l, rs, _, c := containedFixture(t)
	t0 := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	newer := func(b BoundaryContainment) BoundaryContainment {
		b.ObservedAt, b.LastStaleRejectionAt = t0.Add(time.Minute), t0.Add(30*time.Second)
		b.Outstanding = []Effect{{Receiver: b.Receiver, Scope: b.Scope, Action: "act", AuditSeq: 9, AppliedAt: t0, Target: "t", Revision: 2}}
		return b
	}
	older := func(b BoundaryContainment) BoundaryContainment {
		b.ObservedAt, b.LastStaleRejectionAt, b.Outstanding = t0, time.Time{}, nil
		return b
	}
	acked := rs["r1"].ackFor(t, c.Boundaries[0], 0)
	failed := c.Boundaries[2]
	failed.Result, failed.ErrorCode = BoundaryUnknown, "transport"
	if _, err := l.RecordBoundaries(ctx, c.ID, []BoundaryContainment{newer(acked), newer(failed)}); err != nil {
		t.Fatal(err)
	}
	got, err := l.RecordBoundaries(ctx, c.ID, []BoundaryContainment{older(acked), older(failed)})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		b := got.Boundaries[i]
		if len(b.Outstanding) != 1 || !b.ObservedAt.Equal(t0.Add(time.Minute)) || !b.LastStaleRejectionAt.Equal(t0.Add(30*time.Second)) {
			t.Fatalf("%s:%s %s: effects %d, observed at %v, stale at %v", b.Receiver, b.Scope, b.Result, len(b.Outstanding), b.ObservedAt,
				b.LastStaleRejectionAt)
		}
	}
}
