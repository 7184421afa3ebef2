package kvfence

import (
	"context"
	"errors"
	"testing"
)

// Ensure that SubmitAll decides its envelopes as Submits one by one in
// their order would (applied, denied malformed, already applied, denied
// for another executor), and that on an idle receiver they share one
// commit: queued together, no leader takes the first before the others
// are there. Submits made concurrently instead have the first lead a
// commit of its own.
func TestSubmitAll_OneCommit(t *testing.T) {
	f := gcFixture(t, gcSeed)
	a, b := twoWorkers(t, f)
	head := f.r.Head()
	commits := f.r.queue.commits.Load()
	res, errs := f.r.SubmitAll(f.ctx, "worker-a", [][]byte{a.envelope, {0xa0}, a.envelope, b.envelope})
	want := []string{"applied/", "denied/malformed_envelope", "already_applied/", "denied/executor_mismatch"}
	for i, w := range want {
		if errs[i] != nil || string(res[i].Outcome)+"/"+string(res[i].Reason) != w {
			t.Errorf("envelope %d: %s/%s, %v; want %s", i, res[i].Outcome, res[i].Reason, errs[i], w)
		}
	}
	// The decisions are recorded in the envelopes' order.
	if !(head.Seq < res[0].AuditSeq && res[0].AuditSeq < res[1].AuditSeq && res[1].AuditSeq < res[3].AuditSeq) {
		t.Errorf("seqs %d, %d, %d after head %d", res[0].AuditSeq, res[1].AuditSeq, res[3].AuditSeq, head.Seq)
	}
	if got := f.r.queue.commits.Load() - commits; got != 1 {
		t.Errorf("%d commits for one SubmitAll on an idle receiver, want 1", got)
	}
}

// Ensure that SubmitAll refuses every envelope, and records nothing, for
// a caller that is not a name or a context that ended.
func TestSubmitAll_Refused(t *testing.T) {
	f := gcFixture(t, gcSeed)
	a, _ := twoWorkers(t, f)
	head := f.r.Head()
	canceled, cancel := context.WithCancel(f.ctx)
	cancel()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		caller string
		want   error
	}{
		{"no caller", f.ctx, "", ErrInvalidArgument},
		{"canceled", canceled, "worker-a", context.Canceled},
	} {
		res, errs := f.r.SubmitAll(tc.ctx, tc.caller, [][]byte{a.envelope, {0xa0}})
		for i := range errs {
			if !errors.Is(errs[i], tc.want) || res[i] != (Result{}) {
				t.Errorf("%s: envelope %d: %+v, %v; want %v", tc.name, i, res[i], errs[i], tc.want)
			}
		}
	}
	if f.r.Head() != head {
		t.Error("a refused SubmitAll was recorded")
	}
}
