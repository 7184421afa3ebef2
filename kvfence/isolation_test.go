package kvfence

import (
	"errors"
	"github.com/kvfence/kvfence/engine"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/defect"
)

// Ensure that a grant of one scope cannot reach a target of another, in
// Activate or in Submit (where only a forged grant could name it).
func TestScopeIsolation(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	if _, err := f.admin.CreateScope(f.ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.CreateTarget(f.ctx, "other", "other-target", []byte("x")); err != nil {
		t.Fatal(err)
	}
	// Activate refuses a request for the fixture target in scope "other".
	crossing := f.request(&Request{V: 1, Action: "cross", Target: fixTarget, Set: ptr([]byte("pwned"))})
	if _, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: "other", Executor: "w", Claim: "c", Request: crossing}); !errors.Is(err, ErrUnknownTarget) {
		t.Fatalf("Activate across scopes = %v, want ErrUnknownTarget", err)
	}
	// A grant of "other" whose stored record is forged to bind the crossing
	// request still does not reach the fixture target, which stays held.
	legit := f.request(&Request{V: 1, Action: "cross", Target: "other-target", Set: ptr([]byte("y"))})
	g, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: "other", Executor: "w", Claim: "c", Request: legit})
	if err != nil {
		t.Fatal(err)
	}
	digest := RequestDigest(crossing)
	err = f.r.rawUpdate(func(tx engine.Tx) error {
		rec, err := getGrant(tx, g.ID)
		if err != nil {
			return err
		}
		rec.RequestSHA256 = digest[:]
		raw, err := encodeCanonical(rec)
		if err != nil {
			return err
		}
		return tx.Put(bucketGrants, []byte(g.ID), raw)
	})
	if err != nil {
		t.Fatal(err)
	}
	f.r.trustStore(t)
	env := f.envelope(&Envelope{V: 1, Scope: "other", Epoch: g.Epoch, Grant: g.ID, Executor: "w", Claim: "c", Request: crossing})
	wantDenied(t, f.submit("w", env), ReasonUnknownTarget)
	f.wantTarget(1, fixValue)
}

// Ensure that the envelope's executor must equal the grant's even when the
// caller is the grant's executor.
func TestSubmit_EnvelopeExecutorMustMatch(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
	env := f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: 1, Grant: a.grant.ID, Executor: "worker-z", Claim: "claim-1", Request: f.patchRequest("act")})
	wantDenied(t, f.submit("worker-a", env), ReasonExecutorMismatch)
	// And an already_applied decision is itself recorded.
	if res := f.submit("worker-a", a.envelope); res.Outcome != Applied {
		t.Fatal(res)
	}
	head := f.r.Head()
	if res := f.submit("worker-a", a.envelope); res.Outcome != AlreadyApplied || res.AuditSeq != head.Seq+1 {
		t.Fatalf("already_applied %+v not recorded after seq %d", res, head.Seq)
	}
}

// Ensure that administrative calls never re-create, overwrite or reach
// outside what exists.
func TestAdmin_Refusals(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.hold("x") // epoch 2
	if _, err := f.admin.CreateScope(f.ctx, fixScope); !errors.Is(err, ErrScopeExists) {
		t.Fatalf("CreateScope(existing) = %v", err)
	}
	if st, _ := f.r.Status(fixScope); st.Epoch != 2 {
		t.Fatalf("re-creating a scope reset its epoch to %d", st.Epoch)
	}
	if _, err := f.admin.CreateTarget(f.ctx, fixScope, fixTarget, []byte("other")); !errors.Is(err, ErrTargetExists) {
		t.Fatalf("CreateTarget(existing) = %v", err)
	}
	f.wantTarget(1, fixValue)
	if _, err := f.admin.CreateTarget(f.ctx, "nope", "t2", []byte("v")); !errors.Is(err, ErrUnknownScope) {
		t.Fatalf("CreateTarget(unknown scope) = %v", err)
	}
	if _, err := f.admin.CreateTarget(f.ctx, fixScope, "big", make([]byte, MaxTargetValueSize+1)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("CreateTarget(oversize) = %v", err)
	}
	for name, req := range map[string]ActivateRequest{
		"not before in 2611": {NotBefore: time.Date(2611, 6, 23, 0, 0, 0, 0, time.UTC)},
		"ttl of centuries":   {TTL: time.Duration(1<<63 - 1)},
		"C1 control in name": {Executor: "w\u009b31m"},
		"bidi override":      {Executor: "w\u202e"},
	} {
		req.Scope, req.Claim, req.Request = fixScope, "c", f.patchRequest("act")
		if req.Executor == "" {
			req.Executor = "w"
		}
		if _, err := f.admin.Activate(f.ctx, req); err == nil {
			t.Errorf("%s: Activate accepted %+v", name, req)
		}
	}
	for name, r := range map[string]*Request{
		"null patch": {V: 1, Action: "a", Target: "t", Patch: []byte("null")},
		"version 2":  {V: 2, Action: "a", Target: "t", Set: ptr([]byte("v"))},
	} {
		if _, err := EncodeRequest(r); !errors.Is(err, ErrMalformedRequest) {
			t.Errorf("%s: EncodeRequest = %v, want ErrMalformedRequest", name, err)
		}
	}
}

// Ensure that an empty file is refused, not laid out as a new database.
func TestOpen_EmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, nil); !errors.Is(err, ErrBadFormat) {
		t.Fatalf("Open(empty) = %v, want ErrBadFormat", err)
	}
	if fi, _ := os.Stat(path); fi.Size() != 0 {
		t.Fatalf("Open wrote %d bytes into an empty file", fi.Size())
	}
}
