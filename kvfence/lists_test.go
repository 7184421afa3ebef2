package kvfence

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/internal/defect"
)

// Ensure that Targets lists a scope's targets, or all of them, by name.
func TestTargets(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	for _, s := range []string{"other", "empty"} {
		if _, err := f.admin.CreateScope(f.ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"z-other", "a-other"} {
		if _, err := f.admin.CreateTarget(f.ctx, "other", n, []byte(n)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		scope   string
		want    []string
		wantErr error
	}{
		{"", []string{"a-other", fixTarget, "z-other"}, nil},
		{"other", []string{"a-other", "z-other"}, nil},
		{fixScope, []string{fixTarget}, nil},
		{"empty", []string{}, nil},
		{"missing", nil, ErrUnknownScope},
	} {
		got, err := f.r.Targets(tc.scope)
		if !errors.Is(err, tc.wantErr) {
			t.Fatalf("Targets(%q) error %v, want %v", tc.scope, err, tc.wantErr)
		}
		if tc.wantErr != nil {
			continue
		}
		var names []string
		for _, tg := range got {
			names = append(names, tg.Name)
			want, err := f.r.Target(tg.Name)
			if err != nil || want.Scope != tg.Scope || want.Revision != tg.Revision || string(want.Value) != string(tg.Value) {
				t.Fatalf("Targets(%q) lists %+v, Target says %+v (%v)", tc.scope, tg, want, err)
			}
			if tc.scope != "" && tg.Scope != tc.scope {
				t.Fatalf("Targets(%q) lists %s of scope %s", tc.scope, tg.Name, tg.Scope)
			}
		}
		if strings.Join(names, ",") != strings.Join(tc.want, ",") || got == nil {
			t.Fatalf("Targets(%q) = %q, want %q", tc.scope, names, tc.want)
		}
	}
}

// Ensure that target names are one namespace across the receiver, and
// that a name taken in another scope says which.
func TestCreateTarget_NameTakenInAnotherScope(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	if _, err := f.admin.CreateScope(f.ctx, "second"); err != nil {
		t.Fatal(err)
	}
	head := f.r.Head()
	_, err := f.admin.CreateTarget(f.ctx, "second", fixTarget, []byte("x"))
	if !errors.Is(err, ErrTargetExists) || !strings.Contains(err.Error(), "scope "+fixScope) ||
		!strings.Contains(err.Error(), "unique across the receiver") {
		t.Fatalf("CreateTarget = %v, want ErrTargetExists naming scope %s", err, fixScope)
	}
	if f.r.Head() != head {
		t.Fatal("a refused target creation wrote to the chain")
	}
}

// Ensure that an executor mismatch's detail names each identity once.
func TestExecutorDetail(t *testing.T) {
	for _, tc := range []struct{ caller, envelope, grant string }{
		{"a", "a", "b"},
		{"a", "b", "b"},
		{"a", "b", "a"},
		{"a", "b", "c"},
	} {
		d := executorDetail(tc.caller, tc.envelope, tc.grant)
		for _, id := range []string{tc.caller, tc.envelope, tc.grant} {
			if n := strings.Count(d, `"`+id+`"`); n != 1 {
				t.Errorf("executorDetail(%q, %q, %q) = %s: names %q %d times", tc.caller, tc.envelope, tc.grant, d, id, n)
			}
		}
		for _, role := range []string{"caller", "envelope", "grant"} {
			if !strings.Contains(d, role) {
				t.Errorf("executorDetail(%q, %q, %q) = %s: no %s", tc.caller, tc.envelope, tc.grant, d, role)
			}
		}
	}
}

// Ensure that a stale retry of an applied request is told the receipt's
// seq, and that a different request for the same action is told nothing
// more than any stale envelope.
func TestStaleDenial_ReceiptOfTheSameRequest(t *testing.T) {
	other := func(f *fixture) []byte {
		return f.request(&Request{V: 1, Action: "act-1", Target: fixTarget, Set: ptr([]byte(`{"data":{}}`))})
	}
	for _, tc := range []struct {
		name     string
		reason   Reason
		retry    func(f *fixture, a worker) []byte
		wantSeq  bool
		activate bool // a successor was activated after the hold
	}{
		{"same request, stale epoch", ReasonStaleEpoch, func(f *fixture, a worker) []byte { return a.envelope }, true, true},
		{"same request, held", ReasonReceiverHeld, func(f *fixture, a worker) []byte { return a.envelope }, true, false},
		{"other request for the action, stale epoch", ReasonStaleEpoch, func(f *fixture, a worker) []byte {
			return f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: a.grant.Epoch, Grant: a.grant.ID,
				Executor: "worker-a", Claim: "claim-1", Request: other(f)})
		}, false, true},
		{"other request for the action, held", ReasonReceiverHeld, func(f *fixture, a worker) []byte {
			return f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: a.grant.Epoch, Grant: a.grant.ID,
				Executor: "worker-a", Claim: "claim-1", Request: other(f)})
		}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, defect.Variant{})
			a := f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
			applied := f.submit("worker-a", a.envelope)
			if applied.Outcome != Applied {
				t.Fatalf("first submit %+v", applied)
			}
			f.hold("lease expired")
			if tc.activate {
				f.activate("worker-b", "claim-2", f.patchRequest("act-2"))
			}
			res := f.submit("worker-a", tc.retry(f, a))
			wantDenied(t, res, tc.reason)
			mention := "receipt is at audit seq "
			if got := strings.Contains(res.Detail, mention); got != tc.wantSeq {
				t.Fatalf("detail %q: mentions the receipt %v, want %v", res.Detail, got, tc.wantSeq)
			}
			if tc.wantSeq && !strings.HasSuffix(res.Detail, mention+strconv.FormatUint(applied.AuditSeq, 10)) {
				t.Fatalf("detail %q does not give the receipt's seq %d", res.Detail, applied.AuditSeq)
			}
			if !tc.wantSeq && (strings.Contains(res.Detail, "applied") || strings.Contains(res.Detail, "receipt")) {
				t.Fatalf("detail %q tells a different request about the action's receipt", res.Detail)
			}
			// The audit entry's note stays the bounded one.
			f.r.Events(res.AuditSeq, func(e Event) bool {
				if strings.Contains(e.Note, "receipt") {
					t.Errorf("audit note %q carries the answer's receipt sentence", e.Note)
				}
				return false
			})
		})
	}
}
