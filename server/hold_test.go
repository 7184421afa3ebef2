package server_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// holdAnswer decodes a hold answer as the client does and checks its
// signatures under the receiver's key.
func (e *env) holdAnswer(resp response) kvfence.HoldResult {
	e.t.Helper()
	if resp.status != http.StatusOK {
		e.t.Fatalf("hold: %d %s", resp.status, resp.raw)
	}
	var h api.Hold
	if err := api.DecodeAnswer([]byte(resp.raw), &h); err != nil {
		e.t.Fatal(err)
	}
	res, err := h.Result()
	if err != nil {
		e.t.Fatalf("%s: %v", resp.raw, err)
	}
	pub := e.r.PublicKey()
	if err := res.Checkpoint.Verify(pub); err != nil {
		e.t.Fatalf("checkpoint: %v", err)
	}
	for _, s := range res.Scopes {
		if err := s.Ack.Verify(pub); err != nil {
			e.t.Fatalf("scope %s's ack: %v", s.Scope, err)
		}
	}
	return res
}

// Ensure that /v1/hold passes hold_id and expect_epoch on: a repeat of an
// id answers the first hold, repeated, with nothing written even after an
// activation; the id with another reason is 409 hold_id_conflict, an
// expected epoch that is not the scope's 409 epoch_mismatch, both with
// nothing written; and neither goes with "all".
func TestHold_IDAndExpectEpoch(t *testing.T) {
	e := newEnv(t)
	admin := e.client(operator)
	first := e.holdAnswer(e.postJSON(admin, api.PathHold, api.HoldRequest{Scopes: []string{scope}, Reason: "incident",
		HoldID: "inc-1"}))
	if first.Repeated || len(first.Scopes) != 1 || first.Scopes[0].PreviousEpoch != 1 || first.Scopes[0].Epoch != 2 ||
		first.Scopes[0].Ack.HoldID != "inc-1" {
		t.Fatalf("first hold: %+v", first)
	}
	activate(t, e.r, workerA, "a1")
	head := e.r.Head()
	again := e.holdAnswer(e.postJSON(admin, api.PathHold, api.HoldRequest{Scopes: []string{scope}, Reason: "incident",
		HoldID: "inc-1"}))
	// The repeat's acknowledgment names the current checkpoint, which
	// the activation moved; what it acknowledges is the first hold.
	fa, aa := first.Scopes[0].Ack, again.Scopes[0].Ack
	if !again.Repeated || again.Scopes[0].Epoch != 2 || aa.HoldID != fa.HoldID || aa.PreviousEpoch != fa.PreviousEpoch ||
		aa.Epoch != fa.Epoch || aa.AuditSeq != fa.AuditSeq || aa.At != fa.At || aa.CheckpointSeq < fa.CheckpointSeq {
		t.Fatalf("repeat: %+v, want the first hold's, repeated", again)
	}
	if st, _ := e.r.Status(scope); e.r.Head() != head || st.Epoch != 2 || st.Mode != kvfence.ModeOpen {
		t.Fatalf("a repeat wrote: head %+v (was %+v), scope %+v", e.r.Head(), head, st)
	}
	for _, c := range []struct {
		body         string
		status       int
		code         string
		wantsNothing bool
	}{
		{fmt.Sprintf(`{"scopes":[%q],"reason":"another","hold_id":"inc-1"}`, scope), http.StatusConflict, "hold_id_conflict", true},
		{fmt.Sprintf(`{"scopes":[%q],"reason":"r","hold_id":"inc-2","expect_epoch":1}`, scope), http.StatusConflict, "epoch_mismatch", true},
		{fmt.Sprintf(`{"scopes":[%q],"reason":"r","expect_epoch":1}`, scope), http.StatusConflict, "epoch_mismatch", true},
		{`{"scopes":[],"reason":"r","all":true,"hold_id":"x"}`, http.StatusBadRequest, api.CodeBadRequest, true},
		{`{"scopes":[],"reason":"r","all":true,"expect_epoch":2}`, http.StatusBadRequest, api.CodeBadRequest, true},
		{fmt.Sprintf(`{"scopes":[%q],"reason":"r","hold_id":"x","Hold_id":"y"}`, scope), http.StatusBadRequest, api.CodeBadRequest, true},
		{fmt.Sprintf(`{"scopes":[%q],"reason":"r","hold_id":%q}`, scope, strings.Repeat("x", 129)), http.StatusBadRequest, "invalid_argument", true},
	} {
		resp := e.must(admin, http.MethodPost, api.PathHold, api.ContentJSON, []byte(c.body))
		if resp.status != c.status || resp.errorCode() != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.body, resp.status, resp.raw, c.status, c.code)
		}
		if e.r.Head() != head {
			t.Fatalf("%s: refused, and recorded", c.body)
		}
	}
	cas := e.holdAnswer(e.postJSON(admin, api.PathHold, api.HoldRequest{Scopes: []string{scope}, Reason: "r",
		HoldID: "inc-3", ExpectEpoch: 2}))
	if cas.Repeated || cas.Scopes[0].PreviousEpoch != 2 || cas.Scopes[0].Epoch != 3 {
		t.Fatalf("hold at the expected epoch: %+v", cas)
	}
}

// Ensure that GET /v1/receipts is for administrators, wants a scope and a
// claim, and answers the receipts the claim's grant applied, and none for
// another claim.
func TestReceipts_ByClaim(t *testing.T) {
	e := newEnv(t)
	worker, admin := e.client(workerA), e.client(operator)
	g, env := activate(t, e.r, workerA, "a1")
	applied := e.submit(worker, env)
	if applied.status != http.StatusOK || applied.body["outcome"] != "applied" {
		t.Fatalf("submit: %d %s", applied.status, applied.raw)
	}
	q := func(scope, claim string) string {
		return api.PathReceipts + "?scope=" + url.QueryEscape(scope) + "&claim=" + url.QueryEscape(claim)
	}
	head := e.r.Head()
	for _, c := range []struct {
		who    string
		path   string
		status int
		code   string
	}{
		{"worker", q(scope, g.Claim), http.StatusForbidden, api.CodeForbidden},
		{"admin", api.PathReceipts + "?scope=" + url.QueryEscape(scope), http.StatusBadRequest, api.CodeBadRequest},
		{"admin", api.PathReceipts + "?claim=c", http.StatusBadRequest, api.CodeBadRequest},
		{"admin", q(scope, ""), http.StatusBadRequest, api.CodeBadRequest},
		{"admin", q("", g.Claim), http.StatusBadRequest, api.CodeBadRequest},
		{"admin", q(scope, g.Claim) + "&claim=x", http.StatusBadRequest, api.CodeBadRequest},
		{"admin", q(scope, g.Claim) + "&action=a1", http.StatusBadRequest, api.CodeBadRequest},
		{"admin", q("nope", g.Claim), http.StatusNotFound, "unknown_scope"},
	} {
		cl := admin
		if c.who == "worker" {
			cl = worker
		}
		resp := e.must(cl, http.MethodGet, c.path, "", nil)
		if resp.status != c.status || resp.errorCode() != c.code {
			t.Errorf("%s %s: %d %s, want %d %s", c.who, c.path, resp.status, resp.raw, c.status, c.code)
		}
	}
	var got api.Receipts
	resp := e.must(admin, http.MethodGet, q(scope, g.Claim), "", nil)
	if err := api.DecodeStrict([]byte(resp.raw), &got); err != nil || resp.status != http.StatusOK {
		t.Fatalf("%d %s: %v", resp.status, resp.raw, err)
	}
	want, err := e.r.Receipt(scope, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Receipts) != 1 || !reflect.DeepEqual(got.Receipts[0], api.ReceiptOf(want)) {
		t.Fatalf("receipts of %s: %s, want the receipt of a1 %+v", g.Claim, resp.raw, api.ReceiptOf(want))
	}
	resp = e.must(admin, http.MethodGet, q(scope, "claim-other"), "", nil)
	if resp.status != http.StatusOK || !bytes.Contains([]byte(resp.raw), []byte(`{"receipts":[]}`)) {
		t.Fatalf("another claim's receipts: %d %s, want none", resp.status, resp.raw)
	}
	if e.r.Head() != head {
		t.Fatal("a read was recorded")
	}
}

// Ensure that a stale retry of an applied envelope, denied after a hold,
// carries the applied decision's seq as receipt_seq for its executor.
func TestSubmit_StaleRetryCarriesReceiptSeq(t *testing.T) {
	e := newEnv(t)
	worker := e.client(workerA)
	_, env := activate(t, e.r, workerA, "a1")
	applied := e.submit(worker, env)
	if applied.status != http.StatusOK {
		t.Fatalf("submit: %d %s", applied.status, applied.raw)
	}
	seq := applied.body["audit_seq"]
	if _, err := e.r.Admin().Hold(context.Background(), kvfence.HoldRequest{Scopes: []string{scope}, Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	denied := e.submit(worker, env)
	if denied.status != http.StatusForbidden || denied.body["outcome"] != "denied" || denied.body["receipt_seq"] != seq {
		t.Fatalf("stale retry: %d %s, want denied with receipt_seq %v", denied.status, denied.raw, seq)
	}
}
