package kvfence

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
)

// laneQueue is a commit queue with submits calls waiting in the submit
// lane and admins in the admin lane, each call's size its bytes.
func laneQueue(submits, admins []int) *commitQueue {
	q := &commitQueue{}
	for _, size := range submits {
		q.pending = append(q.pending, &call{size: size, worker: true})
	}
	for _, size := range admins {
		q.admin = append(q.admin, &call{size: size, admin: true})
	}
	return q
}

// Ensure that the next batch takes the waiting admin calls first, ahead of
// every queued submit, with at most adminCompanions submits (or as many
// as its admin calls) behind them, that the leader next chose is always
// in its batch, and that a batch without admin calls is the submit
// lane's prefix, as before the lane.
func TestAdminLane_Take(t *testing.T) {
	const mib = 1 << 20
	many := make([]int, 2000)
	tests := []struct {
		name             string
		submits, admins  []int
		maxCalls         int
		wantAdmin, wantS int
	}{
		{"one hold behind a flood", many, []int{10}, maxBatchCalls, 1, adminCompanions},
		{"many admin calls bring as many submits", many, make([]int, 20), maxBatchCalls, 20, 20},
		{"admin calls up to the call limit leave room for a submit", many, make([]int, 2000), maxBatchCalls, maxBatchCalls - 1, 1},
		{"admin calls up to the call limit without submits", nil, make([]int, 2000), maxBatchCalls, maxBatchCalls, 0},
		{"admin calls alone", nil, make([]int, 3), maxBatchCalls, 3, 0},
		{"submits alone", many, nil, maxBatchCalls, 0, maxBatchCalls},
		{"few submits", make([]int, 3), []int{1}, maxBatchCalls, 1, 3},
		{"admin bytes up to the limit still bring a submit", []int{5 * mib, 1}, []int{4 * mib, 4 * mib, 1}, maxBatchCalls, 2, 1},
		{"a one-call batch takes the admin call", many, []int{1}, 1, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := laneQueue(tt.submits, tt.admins)
			self := q.next()
			wantSelf := len(tt.admins) > 0
			if self == nil || self.admin != wantSelf {
				t.Fatalf("next = %+v, want an admin call: %v", self, wantSelf)
			}
			batch := q.take(nil, self, tt.maxCalls, maxBatchBytes)
			admins, submits := 0, 0
			for i, c := range batch {
				if c.admin {
					admins++
					if submits > 0 {
						t.Fatalf("admin call at %d after a submit", i)
					}
				} else {
					submits++
				}
			}
			if admins != tt.wantAdmin || submits != tt.wantS {
				t.Errorf("batch of %d admin calls and %d submits, want %d and %d", admins, submits, tt.wantAdmin, tt.wantS)
			}
			found := false
			for _, c := range batch {
				found = found || c == self
			}
			if !found {
				t.Errorf("the leader's own call is not in its batch")
			}
		})
	}
}

// Ensure that submits cannot starve behind admin calls: with a new admin
// call arriving before every batch, a submit is taken at least every
// maxAdminBatches+1 batches, even when a batch holds one call, and every
// batch that has room for two calls takes one; and that a submit that
// leads (its lane's head, chosen by next) is in its batch even when admin
// calls arrived after it was chosen.
func TestAdminLane_NoStarvation(t *testing.T) {
	for _, maxCalls := range []int{1, 2, 16, maxBatchCalls} {
		t.Run(fmt.Sprint(maxCalls), func(t *testing.T) {
			q := laneQueue(make([]int, 50), []int{1})
			sinceSubmit, worst := 0, 0
			for range 200 {
				self := q.next()
				// Admin calls that arrive after the lead was handed on.
				q.admin = append(q.admin, &call{size: 1, admin: true}, &call{size: 1, admin: true})
				batch := q.take(nil, self, maxCalls, maxBatchBytes)
				found, submit := false, false
				for _, c := range batch {
					found = found || c == self
					submit = submit || !c.admin
				}
				if !found {
					t.Fatalf("the leader (admin %v) is not in its batch", self.admin)
				}
				if len(batch) > maxCalls {
					t.Fatalf("a batch of %d calls, over the limit of %d", len(batch), maxCalls)
				}
				if submit {
					sinceSubmit = 0
				} else {
					sinceSubmit++
				}
				worst = max(worst, sinceSubmit)
				if len(q.pending) == 0 {
					q.pending = append(q.pending, &call{size: 1, worker: true})
				}
			}
			limit := 0
			if maxCalls == 1 {
				limit = maxAdminBatches
			}
			if worst > limit {
				t.Errorf("%d batches in a row took no submit while submits waited, want at most %d", worst, limit)
			}
		})
	}
}

// Ensure that a hold queued behind a flood of submits commits in the first
// batch after the one running, ahead of every submit queued before it, in
// a batch of adminCompanions submits besides (the oldest), the rest in the
// next batch: it does not wait for the flood. Without the admin lane the
// hold is the flood's last call, in one batch with all of it.
func TestAdminLane_HoldAheadOfFlood(t *testing.T) {
	f := gcFixture(t, gcSeed)
	a, _ := twoWorkers(t, f)
	// Worker A's grant is superseded: each of its submits is now denied
	// and recorded, one audit entry per call.
	f.hold("supersede worker A")
	head := f.r.Head()
	const flood = 200
	calls := make([]*gcCall, 0, flood+1)
	for range flood {
		calls = append(calls, &gcCall{caller: "worker-a", envelope: a.envelope})
	}
	calls = append(calls, &gcCall{hold: &HoldRequest{Scopes: []string{gcScope}, Reason: "during the flood"}})
	commits := inOneBatch(t, f, calls)
	hold := calls[flood]
	if hold.err != nil {
		t.Fatal(hold.err)
	}
	if hold.seq() != head.Seq+1 {
		t.Errorf("the hold is at seq %d, want %d: it waited behind %d queued submits", hold.seq(), head.Seq+1, hold.seq()-head.Seq-1)
	}
	for i, c := range calls[:flood] {
		if c.err != nil || c.res.Reason != ReasonReceiverHeld || c.res.Outcome != Denied {
			t.Fatalf("submit %d: %s %v, want denied %s", i, outcome(c), c.err, ReasonReceiverHeld)
		}
		// The submits keep their queue order behind the hold.
		if want := head.Seq + 2 + uint64(i); c.seq() != want {
			t.Fatalf("submit %d at seq %d, want %d", i, c.seq(), want)
		}
	}
	if commits != 2 {
		t.Errorf("the hold and the flood took %d commits, want 2: the hold with the %d oldest submits, then the rest",
			commits, adminCompanions)
	}
}

// Ensure that a hold and a submit of its scope are fenced as the design
// says whatever lane order the batch gives them: a submit that was queued
// before the hold is either applied before the hold's entry or refused,
// never applied after it, and a submit made after the hold's
// acknowledgment is refused. The submits are queued first, the hold
// behind them, with stale workers' denials around them.
func TestAdminLane_FenceOrder(t *testing.T) {
	f := gcFixture(t, gcSeed)
	for round := range 20 {
		scope := fmt.Sprintf("lane/%d", round)
		tg := fmt.Sprintf("lane-target/%d", round)
		if _, err := f.admin.CreateScope(f.ctx, scope); err != nil {
			t.Fatal(err)
		}
		if _, err := f.admin.CreateTarget(f.ctx, scope, tg, []byte("v0")); err != nil {
			t.Fatal(err)
		}
		req := f.request(&Request{V: 1, Action: "write", Target: tg, Set: ptr([]byte("v1"))})
		g, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: scope, Executor: "w", Claim: "c", Request: req})
		if err != nil {
			t.Fatal(err)
		}
		env := f.envelope(&Envelope{V: 1, Scope: scope, Epoch: g.Epoch, Grant: g.ID, Executor: "w", Claim: "c", Request: req})
		submit := &gcCall{caller: "w", envelope: env}
		hold := &gcCall{hold: &HoldRequest{Scopes: []string{scope}, Reason: "fence"}}
		var calls []*gcCall
		if round%2 == 0 {
			// Queued in one batch behind a blocking write: the hold goes
			// ahead of the submit queued before it.
			calls = []*gcCall{submit, hold}
			inOneBatch(t, f, calls)
		} else {
			// Concurrent: either order may win.
			var wg sync.WaitGroup
			wg.Go(func() { submit.run(f.ctx, f.r) })
			wg.Go(func() { hold.run(f.ctx, f.r) })
			wg.Wait()
		}
		if submit.err != nil || hold.err != nil {
			t.Fatalf("round %d: submit %v, hold %v", round, submit.err, hold.err)
		}
		switch {
		case submit.res.Outcome == Applied && submit.seq() < hold.seq():
		case submit.res.Outcome == Denied && submit.res.Reason == ReasonReceiverHeld && submit.seq() > hold.seq():
		default:
			t.Fatalf("round %d: submit %s at seq %d, hold at seq %d", round, outcome(submit), submit.seq(), hold.seq())
		}
		if round%2 == 0 && submit.res.Outcome != Denied {
			t.Fatalf("round %d: the submit queued before the hold in one batch was %s; the hold did not go ahead", round, outcome(submit))
		}
		after, err := f.r.Submit(f.ctx, "w", env)
		if err != nil || after.Outcome != Denied {
			t.Fatalf("round %d: a submit after the hold's acknowledgment: %+v, %v", round, after, err)
		}
		if rc, err := f.r.Receipt(scope, "write"); err == nil && rc.AuditSeq > hold.seq() {
			t.Fatalf("round %d: receipt at seq %d, after the hold at %d", round, rc.AuditSeq, hold.seq())
		}
	}
}

// Ensure that a hold that arrives while a batch of submits is being
// decided waits for the submits decided so far, not for the whole batch:
// the batch ends at the call being decided, and its other submits go back
// to the head of the queue, in their order, behind the hold. Without the
// cut, the hold commits after every submit of the batch.
func TestAdminLane_HoldCutsBatchShort(t *testing.T) {
	f := gcFixture(t, gcSeed)
	a, _ := twoWorkers(t, f)
	// Worker A's grant is superseded: each of its submits is denied and
	// recorded, one audit entry per call.
	f.hold("supersede worker A")
	third := thirdScope(t, f)
	head := f.r.Head()
	const flood, arriveAt = 40, 5
	calls := make([]*gcCall, flood)
	for i := range calls {
		calls[i] = &gcCall{caller: "worker-a", envelope: a.envelope}
	}
	hold := &gcCall{hold: &HoldRequest{Scopes: []string{third}, Reason: "while a batch is decided"}}
	var decided int
	var wg sync.WaitGroup
	// The hook runs in the batch's leader, as it writes each entry: the
	// hold arrives during the arriveAt-th submit's decision.
	f.r.faults.beforeAudit = func(e *audit.Entry) error {
		if e.Kind != KindSubmit {
			return nil
		}
		if decided++; decided == arriveAt {
			wg.Go(func() { hold.run(f.ctx, f.r) })
			if !queued(f.r, 1) {
				t.Error("the hold did not queue")
			}
		}
		return nil
	}
	inOneBatch(t, f, calls)
	wg.Wait()
	f.r.faults = faultHooks{}
	if hold.err != nil {
		t.Fatal(hold.err)
	}
	if want := head.Seq + arriveAt + 1; hold.seq() != want {
		t.Errorf("the hold is at seq %d, want %d: it waited for %d submits of the batch, not %d",
			hold.seq(), want, hold.seq()-head.Seq-1, arriveAt)
	}
	last := head.Seq
	for i, c := range calls {
		if c.err != nil || c.res.Outcome != Denied || c.res.Reason != ReasonReceiverHeld {
			t.Fatalf("submit %d: %s %v, want denied %s", i, outcome(c), c.err, ReasonReceiverHeld)
		}
		// The submits keep their queue order, the hold between them.
		want := last + 1
		if c.seq() == hold.seq()+1 {
			want = hold.seq() + 1
		}
		if c.seq() != want {
			t.Fatalf("submit %d at seq %d, want %d (the hold at %d)", i, c.seq(), want, hold.seq())
		}
		last = c.seq()
	}
}

// Ensure that when a batch with admin calls fails and its calls run again
// one by one, the admin calls are acknowledged once they and the first
// submit after them have committed again: the submits behind go back to
// the queue and commit after the holds' acknowledgment, not before it.
// Without the cut, the holds' anchor is written once, after every submit
// of the batch.
func TestAdminLane_RerunAcknowledgesAdminCallsFirst(t *testing.T) {
	f := gcFixture(t, gcSeed)
	a, b := twoWorkers(t, f)
	third := thirdScope(t, f)
	f.r.faults.beforeAudit = func(e *audit.Entry) error {
		if e.Action == "act-b" && e.Kind == KindSubmit {
			return errors.New("injected fault")
		}
		return nil
	}
	calls := []*gcCall{
		{caller: "worker-b", envelope: b.envelope},
		{caller: "worker-a", envelope: a.envelope},
		{caller: "worker-a", envelope: a.envelope},
	}
	holds := make([]*gcCall, 3)
	for i := range holds {
		holds[i] = &gcCall{hold: &HoldRequest{Scopes: []string{third}, Reason: fmt.Sprintf("hold %d", i)}}
	}
	inOneBatch(t, f, append(slices.Clone(calls), holds...))
	f.r.faults = faultHooks{}
	if calls[0].err == nil {
		t.Fatalf("the faulted submit: %s, want an error", outcome(calls[0]))
	}
	if outcome(calls[1]) != "applied/" || outcome(calls[2]) != "already_applied/" {
		t.Fatalf("worker A's submits: %s %v, %s %v", outcome(calls[1]), calls[1].err, outcome(calls[2]), calls[2].err)
	}
	for i, h := range holds {
		if h.err != nil {
			t.Fatalf("hold %d: %v", i, h.err)
		}
		if h.seq() > calls[1].seq() {
			t.Errorf("hold %d at seq %d, after the submit at %d", i, h.seq(), calls[1].seq())
		}
		if h.anchored >= calls[1].seq() {
			t.Errorf("hold %d acknowledged by the checkpoint at seq %d, which covers the submits run again (seq %d, %d)",
				i, h.anchored, calls[1].seq(), calls[2].seq())
		}
	}
}

// Ensure that a batch with a hold passes the lead only once its anchor is
// written, on a file too: while the hold's anchor write is under way, a
// submit waits in the queue and no other batch commits. Without it, the
// submit leads a batch of its own at once, which decides and commits
// beside the hold's anchor write.
func TestAdminLane_HoldAnchoredBeforeNextBatch(t *testing.T) {
	f := gcFixture(t, gcSeed)
	a, _ := twoWorkers(t, f)
	third := thirdScope(t, f)
	head := f.r.Head()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.r.opts.Anchor = &refusingAnchor{AnchorStore: f.anchor, fail: func(next audit.SignedCheckpoint) error {
		if next.Seq > head.Seq {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
		return nil
	}}
	hold := &gcCall{hold: &HoldRequest{Scopes: []string{third}, Reason: "anchored first"}}
	submit := &gcCall{caller: "worker-a", envelope: a.envelope}
	var wg sync.WaitGroup
	wg.Go(func() { hold.run(f.ctx, f.r) })
	<-entered
	commits := f.r.queue.commits.Load()
	wg.Go(func() { submit.run(f.ctx, f.r) })
	waiting := queued(f.r, 1)
	// A batch the submit led would commit within this time; none may.
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if f.r.queue.commits.Load() != commits {
			break
		}
	}
	if got := f.r.queue.commits.Load(); got != commits || !waiting {
		t.Errorf("while the hold's anchor was written, %d batches committed and the submit waited in the queue: %v; want none and true",
			got-commits, waiting)
	}
	close(release)
	wg.Wait()
	if hold.err != nil || outcome(submit) != "applied/" || submit.seq() <= hold.seq() {
		t.Fatalf("hold at %d (%v), submit %s at %d (%v)", hold.seq(), hold.err, outcome(submit), submit.seq(), submit.err)
	}
}
