package kvfence

import (
	"errors"
	"testing"

	"github.com/kvfence/kvfence/internal/defect"
)

// patchDoc is the value of the "doc" target the patch tests submit against:
// a member named "", an array, a number and a null.
const patchDoc = `{"":1,"arr":[1,2,3],"n":1,"nul":null}`

// Ensure that a patch RFC 6902 or RFC 6901 forbids never changes a target
// through Submit: one that is not a well-formed patch is refused at Activate
// and denied as malformed_request, and one that is well formed but does not
// apply to the value as the RFCs read it is denied as precondition_failed.
// Each case is a way in which a lenient applier would have applied it.
func TestSubmit_PatchDeviationsDenied(t *testing.T) {
	tests := []struct {
		name  string
		patch string
		want  Reason
	}{
		{"add at a negative index", `[{"op":"add","path":"/arr/-1","value":9}]`, ReasonPreconditionFailed},
		{"remove at a negative index", `[{"op":"remove","path":"/arr/-1"}]`, ReasonPreconditionFailed},
		{"test without value on a missing path", `[{"op":"test","path":"/missing"},{"op":"replace","path":"/n","value":2}]`, ReasonMalformedRequest},
		{"test without value on a null", `[{"op":"test","path":"/nul"},{"op":"replace","path":"/n","value":2}]`, ReasonMalformedRequest},
		{"index with a leading zero", `[{"op":"replace","path":"/arr/01","value":9}]`, ReasonPreconditionFailed},
		{"index 00", `[{"op":"replace","path":"/arr/00","value":9}]`, ReasonPreconditionFailed},
		{"index with a sign", `[{"op":"replace","path":"/arr/+1","value":9}]`, ReasonPreconditionFailed},
		{"test / names member \"\", not the document", `[{"op":"test","path":"/","value":` + patchDoc + `},{"op":"replace","path":"/n","value":2}]`, ReasonPreconditionFailed},
		{"duplicate op reads as test, applies as replace", `[{"op":"test","path":"/n","value":2,"op":"replace"}]`, ReasonMalformedRequest},
		{"remove at -", `[{"op":"remove","path":"/arr/-"}]`, ReasonPreconditionFailed},
		{"replace at -", `[{"op":"replace","path":"/arr/-","value":9}]`, ReasonPreconditionFailed},
		{"move into its own child", `[{"op":"move","from":"/arr","path":"/arr/0"}]`, ReasonPreconditionFailed},
		{"unknown member", `[{"op":"replace","path":"/n","value":2,"valeu":3}]`, ReasonMalformedRequest},
		{"bad pointer escape", `[{"op":"replace","path":"/n~2","value":2}]`, ReasonMalformedRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, defect.Variant{})
			if _, err := f.admin.CreateTarget(f.ctx, fixScope, "doc", []byte(patchDoc)); err != nil {
				t.Fatal(err)
			}
			// Encoded without the request's own checks, as an attacker
			// would, so the receiver's checks are the ones under test.
			req, err := wireEnc.Marshal(&Request{V: 1, Action: "act", Target: "doc", Patch: []byte(tt.patch)})
			if err != nil {
				t.Fatal(err)
			}
			env := f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: 1, Grant: "g", Executor: "worker-a", Claim: "claim-1", Request: req})
			g, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: fixScope, Executor: "worker-a", Claim: "claim-1", Request: req})
			switch {
			case err != nil && tt.want != ReasonMalformedRequest:
				t.Fatalf("Activate refused a well-formed patch: %v", err)
			case err != nil && !errors.Is(err, ErrMalformedRequest):
				t.Fatalf("Activate = %v, want ErrMalformedRequest", err)
			case err == nil:
				env = f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: g.Epoch, Grant: g.ID, Executor: "worker-a", Claim: "claim-1", Request: req})
			}
			wantDenied(t, f.submit("worker-a", env), tt.want)
			tg, err := f.r.Target("doc")
			if err != nil {
				t.Fatal(err)
			}
			if tg.Revision != 1 || string(tg.Value) != patchDoc {
				t.Fatalf("target changed to rev %d %s", tg.Revision, tg.Value)
			}
		})
	}
}
