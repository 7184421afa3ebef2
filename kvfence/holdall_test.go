package kvfence

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvfence/kvfence/internal/defect"
)

// openScope creates scope with one target and activates a grant for one
// request in it, returning the envelope of that grant.
func (f *fixture) openScope(scope string) []byte {
	f.t.Helper()
	if _, err := f.admin.CreateScope(f.ctx, scope); err != nil {
		f.t.Fatal(err)
	}
	target := scope + "/t"
	if _, err := f.admin.CreateTarget(f.ctx, scope, target, []byte("v0")); err != nil {
		f.t.Fatal(err)
	}
	req := f.request(SetRequest("act", target, []byte("v1")))
	g, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: scope, Executor: "worker-" + scope, Claim: "c", Request: req})
	if err != nil {
		f.t.Fatal(err)
	}
	return f.envelope(&Envelope{V: 1, Scope: scope, Epoch: g.Epoch, Grant: g.ID, Executor: "worker-" + scope, Claim: "c", Request: req})
}

// Ensure that HoldAll holds every open scope in one transaction, one audit
// entry per scope, anchored once, and reports the scopes already held.
func TestAdmin_HoldAll(t *testing.T) {
	f := newFixture(t, defect.Variant{}) // fixScope stays held
	envB := f.openScope("b")
	envA := f.openScope("a")
	if _, err := f.admin.CreateScope(f.ctx, "c-held"); err != nil {
		t.Fatal(err)
	}
	before, err := f.r.Scopes()
	if err != nil {
		t.Fatal(err)
	}
	head, commits := f.r.Head(), f.r.queue.commits.Load()
	res, err := f.admin.HoldAll(f.ctx, "incident 7")
	if err != nil {
		t.Fatal(err)
	}
	if n := f.r.queue.commits.Load() - commits; n != 1 {
		t.Fatalf("HoldAll committed %d transactions, want 1", n)
	}
	var held []string
	for _, s := range res.Scopes {
		held = append(held, s.Scope)
	}
	if !slices.Equal(held, []string{"a", "b"}) || !slices.Equal(res.AlreadyHeld, []string{"c-held", fixScope}) {
		t.Fatalf("held %q, already held %q", held, res.AlreadyHeld)
	}
	if res.AuditSeq != head.Seq+2 {
		t.Fatalf("HoldAll's last entry is %d, want %d", res.AuditSeq, head.Seq+2)
	}
	i := 0
	f.r.Events(head.Seq+1, func(e Event) bool {
		if e.Kind != KindHold || e.Scope != held[i] || e.Epoch != res.Scopes[i].Epoch {
			t.Errorf("entry %d = %s %s epoch %d, want the hold of %s", e.Seq, e.Kind, e.Scope, e.Epoch, held[i])
		}
		i++
		return true
	})
	if i != 2 {
		t.Fatalf("%d entries after HoldAll's first, want 2", i)
	}
	after, err := f.r.Scopes()
	if err != nil {
		t.Fatal(err)
	}
	for k, st := range after {
		wantEpoch := before[k].Epoch
		if slices.Contains(held, st.Scope) {
			wantEpoch++
		}
		if st.Mode != ModeHeld || st.Epoch != wantEpoch || st.ActiveGrant != "" || st.Grant != nil {
			t.Fatalf("after HoldAll %s is %s at epoch %d with grant %q, want held at %d", st.Scope, st.Mode, st.Epoch, st.ActiveGrant, wantEpoch)
		}
	}
	wantDenied(t, f.submit("worker-a", envA), ReasonReceiverHeld)
	wantDenied(t, f.submit("worker-b", envB), ReasonReceiverHeld)

	// Pressed again, it finds nothing open and commits nothing.
	head = f.r.Head()
	again, err := f.admin.HoldAll(f.ctx, "incident 7")
	if err != nil || len(again.Scopes) != 0 || len(again.AlreadyHeld) != 4 || again.AuditSeq != head.Seq || f.r.Head() != head {
		t.Fatalf("second HoldAll = %+v, %v; head %v -> %v", again, err, head, f.r.Head())
	}
	if _, err := f.admin.HoldAll(f.ctx, ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("HoldAll without a reason = %v, want ErrInvalidArgument", err)
	}
}

// Ensure that submits running during HoldAll never see a partial hold: in
// the chain, the hold entries of one HoldAll are contiguous, and no submit
// in any scope is accepted (applied or already applied) after the first of
// them. Workers retry their applied envelope in a loop, so a HoldAll that
// held scope by scope, in separate transactions, would let one scope's
// retry be accepted after another scope's hold.
func TestAdmin_HoldAllConcurrentSubmits(t *testing.T) {
	const scopes = 12
	f := newFixture(t, defect.Variant{})
	envs := make([]string, scopes)
	for i := range envs {
		envs[i] = string(f.openScope(fmt.Sprintf("s%02d", i)))
	}
	var stop atomic.Bool
	var started, wg sync.WaitGroup
	var retries atomic.Int64
	for i, env := range envs {
		started.Add(1)
		wg.Go(func() {
			caller := fmt.Sprintf("worker-s%02d", i)
			first := true
			for !stop.Load() {
				res, err := f.r.Submit(f.ctx, caller, []byte(env))
				if err != nil {
					t.Error(err)
					break
				}
				if first {
					if res.Outcome != Applied {
						t.Errorf("first submit in s%02d: %+v", i, res)
					}
					first = false
					started.Done()
				}
				retries.Add(1)
			}
			if first {
				started.Done()
			}
		})
	}
	started.Wait()
	// Let every worker be well into its retries.
	waitFor(t, &retries, 4*scopes)
	res, err := f.admin.HoldAll(f.ctx, "incident")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, &retries, retries.Load()+4*scopes)
	stop.Store(true)
	wg.Wait()
	if len(res.Scopes) != scopes {
		t.Fatalf("HoldAll held %d scopes, want %d", len(res.Scopes), scopes)
	}
	first := res.AuditSeq - scopes + 1
	var acceptedBefore, deniedAfter int
	f.r.Events(0, func(e Event) bool {
		switch {
		case e.Seq >= first && e.Seq <= res.AuditSeq:
			if e.Kind != KindHold || e.Scope != res.Scopes[e.Seq-first].Scope {
				t.Errorf("entry %d inside HoldAll's run is %s %s %s", e.Seq, e.Kind, e.Scope, e.Outcome)
			}
		case e.Kind != KindSubmit:
		case e.Seq < first:
			if e.Outcome != string(Denied) {
				acceptedBefore++
			}
		case e.Outcome != string(Denied):
			t.Errorf("entry %d: submit in %s %s after HoldAll's first hold (seq %d)", e.Seq, e.Scope, e.Outcome, first)
		default:
			deniedAfter++
		}
		return true
	})
	if acceptedBefore < 2*scopes || deniedAfter < scopes {
		t.Fatalf("%d accepted submits before the holds and %d denied after: the workers did not overlap HoldAll", acceptedBefore, deniedAfter)
	}
}

// waitFor yields until n reaches at least want, or the test failed.
func waitFor(t *testing.T, n *atomic.Int64, want int64) {
	for n.Load() < want && !t.Failed() {
		runtime.Gosched()
	}
}
