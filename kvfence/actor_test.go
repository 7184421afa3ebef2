package kvfence

import (
	"errors"
	"testing"

	"github.com/kvfence/kvfence/internal/defect"
)

// Ensure that every change made through Admin.As records its actor, that
// decisions and changes made through Admin record none, and that an
// invalid actor changes nothing.
func TestAdminAs_RecordsActor(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	const alice = "spiffe://example.org/ops/alice"
	as := f.r.Admin().As(alice)
	if as.Actor() != alice || f.admin.Actor() != "" {
		t.Fatalf("Actor() = %q and %q", as.Actor(), f.admin.Actor())
	}
	if _, err := as.CreateScope(f.ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	if _, err := as.CreateTarget(f.ctx, "s2", "t2", []byte("v")); err != nil {
		t.Fatal(err)
	}
	g, err := as.Activate(f.ctx, ActivateRequest{Scope: fixScope, Executor: "w", Claim: "c", Request: f.patchRequest("a1")})
	if err != nil {
		t.Fatal(err)
	}
	f.submit("w", f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: g.Epoch, Grant: g.ID, Executor: "w", Claim: "c",
		Request: f.patchRequest("a1")}))
	if _, err := as.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "incident"}); err != nil {
		t.Fatal(err)
	}
	head := f.r.Head().Seq
	for _, bad := range []string{"bad\nactor", string(make([]byte, 600))} {
		bad := f.r.Admin().As(bad)
		if _, err := bad.CreateScope(f.ctx, "s3"); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("CreateScope with an invalid actor: %v", err)
		}
		if _, err := bad.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "x"}); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Hold with an invalid actor: %v", err)
		}
	}
	if f.r.Head().Seq != head {
		t.Fatal("a call with an invalid actor wrote to the chain")
	}
	want := map[string]string{KindInit: "", KindScopeCreated: "", KindTargetCreated: "", KindSubmit: ""}
	seen := map[string]int{}
	if err := f.r.Events(0, func(e Event) bool {
		seen[e.Kind]++
		switch {
		case e.Scope == "s2" || e.Kind == KindActivate || e.Kind == KindHold:
			if e.Actor != alice {
				t.Errorf("entry %d (%s) actor %q, want %q", e.Seq, e.Kind, e.Actor, alice)
			}
		case e.Actor != want[e.Kind]:
			t.Errorf("entry %d (%s) actor %q, want none", e.Seq, e.Kind, e.Actor)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if seen[KindActivate] != 1 || seen[KindHold] != 1 || seen[KindScopeCreated] != 2 || seen[KindSubmit] != 1 {
		t.Fatalf("entries by kind: %v", seen)
	}
}
