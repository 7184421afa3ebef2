package client_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that Hold sends the hold id and the expected epoch, that its
// result carries a checkpoint and acknowledgments that verify under the
// receiver's key, that a repeat is the first result marked repeated, and
// that a conflicting id and a lost compare-and-swap come back as
// kvfence's sentinels.
func TestClient_HoldIdempotent(t *testing.T) {
	s := serve(t)
	ctx := context.Background()
	op := s.client(operator)
	if _, err := s.r.Admin().CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	req := kvfence.HoldRequest{Scopes: []string{scope}, Reason: "incident", ID: "inc-1", ExpectEpoch: 1}
	first, err := op.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	pub := s.r.PublicKey()
	if err := first.Checkpoint.Verify(pub); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if a := first.Scopes[0].Ack; a.Verify(pub) != nil || a.HoldID != "inc-1" || a.Epoch != 2 || a.CoveredBy(first.Checkpoint.Checkpoint) != nil {
		t.Fatalf("ack %+v does not verify, or is not of this hold", a)
	}
	again, err := op.Hold(ctx, req)
	if err != nil || !again.Repeated || again.Scopes[0].Ack != first.Scopes[0].Ack {
		t.Fatalf("repeat: %+v, %v; want the first result, repeated", again, err)
	}
	if st, _ := s.r.Status(scope); st.Epoch != 2 {
		t.Fatalf("epoch %d after a repeated hold, want 2", st.Epoch)
	}
	if _, err := op.Hold(ctx, kvfence.HoldRequest{Scopes: []string{scope}, Reason: "other", ID: "inc-1", ExpectEpoch: 1}); !errors.Is(err, kvfence.ErrHoldIDConflict) {
		t.Fatalf("conflicting id: %v, want ErrHoldIDConflict", err)
	}
	if _, err := op.Hold(ctx, kvfence.HoldRequest{Scopes: []string{scope}, Reason: "r", ID: "inc-2", ExpectEpoch: 1}); !errors.Is(err, kvfence.ErrEpochMismatch) {
		t.Fatalf("stale expected epoch: %v, want ErrEpochMismatch", err)
	}
}

// signedHold is a hold of scope by hold id "inc-1" from epoch 1 to 2,
// signed by a receiver key of its own, as a receiver would answer it.
func signedHold(t *testing.T) (kvfence.HoldResult, ed25519.PrivateKey) {
	t.Helper()
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	at := time.Date(2026, 12, 3, 17, 0, 0, 5, time.UTC)
	cp := audit.Checkpoint{Receiver: "r", Seq: 4, Root: audit.Hash{0x7e}, EpochHighWater: 2, At: at.UnixNano()}
	cp.Head[0] = 9
	sc, err := audit.Sign(key, cp)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := audit.SignHoldAck(key, audit.HoldAck{Receiver: "r", Scope: scope, HoldID: "inc-1", PreviousEpoch: 1, Epoch: 2,
		AuditSeq: 4, RequestedAt: at.UnixNano(), At: at.UnixNano(), CheckpointSeq: 4, CheckpointHead: cp.Head})
	if err != nil {
		t.Fatal(err)
	}
	return kvfence.HoldResult{Scopes: []kvfence.HeldScope{{Scope: scope, PreviousEpoch: 1, Epoch: 2, Ack: sa}},
		HoldRequestedAt: at, HoldCommittedAt: at, AuditSeq: 4, Checkpoint: sc}, key
}

// answering returns a client of a server that answers every call with
// status and body.
func answering(t *testing.T, status int, body []byte) *client.Client {
	return unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		w.Write(body)
	}), false)
}

// Ensure that a hold answer that is not the evidence of the hold asked
// for is ErrProtocol, never a result: no checkpoint, a scope without an
// acknowledgment, a scope not asked for or one missing, another hold id,
// another starting epoch than the expected one, and a field that says
// otherwise than the signed bytes. An answer that is the hold's is read.
func TestAttack_HoldAnswers(t *testing.T) {
	good, key := signedHold(t)
	req := kvfence.HoldRequest{Scopes: []string{scope}, Reason: "r", ID: "inc-1"}
	otherScope := good
	otherScope.Scopes = []kvfence.HeldScope{good.Scopes[0]}
	a := good.Scopes[0].Ack.HoldAck
	a.Scope = "other"
	sa, err := audit.SignHoldAck(key, a)
	if err != nil {
		t.Fatal(err)
	}
	otherScope.Scopes[0].Scope, otherScope.Scopes[0].Ack = "other", sa
	encode := func(res kvfence.HoldResult) []byte {
		b, err := json.Marshal(api.HoldOf(res))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	noAck := good
	noAck.Scopes = []kvfence.HeldScope{{Scope: scope, PreviousEpoch: 1, Epoch: 2}}
	noCheckpoint := noAck
	noCheckpoint.Checkpoint = audit.SignedCheckpoint{}
	twoScopes := good
	twoScopes.Scopes = append([]kvfence.HeldScope{good.Scopes[0]}, otherScope.Scopes[0])
	for _, c := range []struct {
		name string
		req  kvfence.HoldRequest
		body []byte
		ok   bool
	}{
		{"the hold's answer", req, encode(good), true},
		{"the hold's answer, expected epoch", kvfence.HoldRequest{Scopes: req.Scopes, Reason: "r", ID: "inc-1", ExpectEpoch: 1}, encode(good), true},
		{"no checkpoint", req, encode(noCheckpoint), false},
		{"no checkpoint for no scope", kvfence.HoldRequest{Reason: "r", ID: "inc-1"}, encode(kvfence.HoldResult{AuditSeq: 4}), false},
		{"no acknowledgment", req, encode(noAck), false},
		{"no acknowledgment of a hold without id", kvfence.HoldRequest{Scopes: req.Scopes, Reason: "r"}, encode(noAck), false},
		{"another scope's hold", req, encode(otherScope), false},
		{"a scope not asked for", req, encode(twoScopes), false},
		{"a scope missing", kvfence.HoldRequest{Scopes: []string{scope, "other", "third"}, Reason: "r", ID: "inc-1"}, encode(twoScopes), false},
		{"another hold id", kvfence.HoldRequest{Scopes: req.Scopes, Reason: "r", ID: "inc-2"}, encode(good), false},
		{"another starting epoch", kvfence.HoldRequest{Scopes: req.Scopes, Reason: "r", ID: "inc-1", ExpectEpoch: 5}, encode(good), false},
		{"a field not the signed one", req, bytes.Replace(encode(good), []byte(`"hold_id":"inc-1"`), []byte(`"hold_id":"inc-2"`), 1), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := answering(t, http.StatusOK, c.body).Hold(context.Background(), c.req)
			switch {
			case c.ok && err != nil:
				t.Fatalf("%v, want the answer read", err)
			case !c.ok && !errors.Is(err, client.ErrProtocol):
				t.Fatalf("%+v, %v; want ErrProtocol", res, err)
			}
		})
	}
}

// Ensure that the hold_id_conflict code is kvfence.ErrHoldIDConflict on
// the client's side.
func TestClient_HoldIDConflictCode(t *testing.T) {
	c := answering(t, http.StatusConflict, []byte(`{"error":{"code":"hold_id_conflict","message":"m"}}`))
	_, err := c.Hold(context.Background(), kvfence.HoldRequest{Scopes: []string{scope}, Reason: "r", ID: "x"})
	if !errors.Is(err, kvfence.ErrHoldIDConflict) {
		t.Fatalf("%v, want ErrHoldIDConflict", err)
	}
}

// Ensure that ReceiptsByClaim returns what the claim's grant applied, and
// nothing for another claim.
func TestClient_ReceiptsByClaim(t *testing.T) {
	s := serve(t)
	ctx := context.Background()
	op, a := s.client(operator), s.client(workerA)
	adm := s.r.Admin()
	if _, err := adm.CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTarget(ctx, scope, scope, []byte(`{"data":{"retention_days":"30"}}`)); err != nil {
		t.Fatal(err)
	}
	req := request(t, "raise")
	g, err := adm.Activate(ctx, kvfence.ActivateRequest{Scope: scope, Executor: workerA, Claim: "claim-a", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: scope, Epoch: g.Epoch, Grant: g.ID,
		Executor: workerA, Claim: g.Claim, Request: req})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := a.Submit(ctx, env); err != nil || res.Outcome != kvfence.Applied {
		t.Fatalf("submit: %+v %v", res, err)
	}
	want, err := s.r.Receipt(scope, "raise")
	if err != nil {
		t.Fatal(err)
	}
	got, err := op.ReceiptsByClaim(ctx, scope, "claim-a")
	if err != nil || len(got) != 1 || got[0] != want {
		t.Fatalf("ReceiptsByClaim: %+v, %v; want [%+v]", got, err, want)
	}
	if got, err := op.ReceiptsByClaim(ctx, scope, "claim-b"); err != nil || len(got) != 0 {
		t.Fatalf("another claim: %+v, %v; want none", got, err)
	}
	if _, err := a.ReceiptsByClaim(ctx, scope, "claim-a"); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("a worker: %v, want ErrForbidden", err)
	}
	// The worker's stale retry, after a hold, is denied and names the
	// receipt of its own applied request.
	if _, err := op.Hold(ctx, kvfence.HoldRequest{Scopes: []string{scope}, Reason: "r", ID: "h"}); err != nil {
		t.Fatal(err)
	}
	if res, err := a.Submit(ctx, env); err != nil || res.Outcome != kvfence.Denied || res.ReceiptSeq != want.AuditSeq {
		t.Fatalf("stale retry: %+v, %v; want denied with receipt_seq %d", res, err, want.AuditSeq)
	}
}

// Ensure that a receipts answer with a receipt of another scope, out of
// audit order, or with a malformed digest is ErrProtocol.
func TestAttack_ReceiptsAnswers(t *testing.T) {
	rc := func(scope string, seq uint64) string {
		return `{"scope":"` + scope + `","action":"a","grant":"g","request_sha256":"` + strings.Repeat("ab", 32) +
			`","target":"t","rev_before":1,"rev_after":2,"audit_seq":` + string(rune('0'+seq)) + `,"at":"2026-12-03T17:00:00Z"}`
	}
	for _, c := range []struct {
		name, body string
		ok         bool
	}{
		{"the scope's receipts", `{"receipts":[` + rc(scope, 3) + `,` + rc(scope, 5) + `]}`, true},
		{"another scope's receipt", `{"receipts":[` + rc(scope, 3) + `,` + rc("other", 5) + `]}`, false},
		{"out of order", `{"receipts":[` + rc(scope, 5) + `,` + rc(scope, 3) + `]}`, false},
		{"the same receipt twice", `{"receipts":[` + rc(scope, 5) + `,` + rc(scope, 5) + `]}`, false},
		{"a bad digest", `{"receipts":[` + strings.Replace(rc(scope, 3), "abab", "xyxy", 1) + `]}`, false},
		{"a case variant", `{"receipts":[],"Receipts":[` + rc(scope, 3) + `]}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := answering(t, http.StatusOK, []byte(c.body)).ReceiptsByClaim(context.Background(), scope, "claim-a")
			switch {
			case c.ok && (err != nil || len(got) != 2):
				t.Fatalf("%+v, %v; want two receipts", got, err)
			case !c.ok && !errors.Is(err, client.ErrProtocol):
				t.Fatalf("%+v, %v; want ErrProtocol", got, err)
			}
		})
	}
}

// Ensure that a hold of every open scope carries the same evidence: a
// checkpoint and an acknowledgment per held scope, both signed by the
// receiver's key.
func TestClient_HoldAllCarriesEvidence(t *testing.T) {
	s := serve(t)
	ctx := context.Background()
	adm := s.r.Admin()
	if _, err := adm.CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTarget(ctx, scope, scope, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Activate(ctx, kvfence.ActivateRequest{Scope: scope, Executor: workerA, Claim: "c",
		Request: request(t, "raise")}); err != nil {
		t.Fatal(err)
	}
	res, err := s.client(operator).HoldAll(ctx, "incident")
	if err != nil || len(res.Scopes) != 1 {
		t.Fatalf("HoldAll: %+v, %v", res, err)
	}
	pub := s.r.PublicKey()
	if err := res.Checkpoint.Verify(pub); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if a := res.Scopes[0].Ack; a.Verify(pub) != nil || a.Scope != scope || a.Epoch != 2 {
		t.Fatalf("ack %+v", a)
	}
}
