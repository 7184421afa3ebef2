package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that a submit answer whose HTTP status disagrees with its outcome
// is a protocol error, not a decision: the receiver answers a denial with
// 403 and nothing else, so a 403 that says "applied" (or a 200 that says
// "denied") comes from something that is not the receiver's decision.
func TestAttack_SubmitStatusOutcomeMismatch(t *testing.T) {
	for _, tc := range []struct {
		status  int
		outcome kvfence.Outcome
	}{
		{http.StatusForbidden, kvfence.Applied},
		{http.StatusForbidden, kvfence.AlreadyApplied},
		{http.StatusOK, kvfence.Denied},
	} {
		res := kvfence.Result{Outcome: tc.outcome, Scope: "s", Epoch: 1, Grant: "g", Action: "a", Target: "t", Revision: 2, AuditSeq: 7}
		if tc.outcome == kvfence.Denied {
			res.Reason = kvfence.ReasonReceiverHeld
		}
		out := api.SubmitOf(res)
		body := out.AppendJSON(nil)
		c := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			io.WriteString(w, string(body))
		}), false)
		got, err := c.Submit(context.Background(), []byte{0xa0})
		if !errors.Is(err, client.ErrProtocol) {
			t.Errorf("HTTP %d with outcome %s: %+v, %v; want ErrProtocol", tc.status, tc.outcome, got, err)
		}
	}
}

// Ensure that an answer that encoding/json would read one way and another
// reader another way is a protocol error, not a decision or a state: a
// member given twice (encoding/json keeps the last) or in another case
// (encoding/json folds case, the Kelvin sign and the long s included).
// A member the client does not know is let through: a newer receiver may
// add one.
func TestAttack_AmbiguousAnswers(t *testing.T) {
	denied := `"reason":"receiver_held","detail":"","scope":"s","epoch":1,"grant":"g","action":"a","target":"t","revision":0,"audit_seq":7`
	applied := `"reason":"","detail":"","scope":"s","epoch":1,"grant":"g","action":"a","target":"t","revision":2,"audit_seq":7`
	for _, tc := range []struct {
		name, path string
		status     int
		body       string
		ok         bool
	}{
		{"duplicate outcome", api.PathSubmit, 200, `{"outcome":"denied",` + applied + `,"outcome":"applied"}`, false},
		{"case variant of outcome", api.PathSubmit, 200, `{"outcome":"denied",` + applied + `,"Outcome":"applied"}`, false},
		{"denial with a case variant", api.PathSubmit, 403, `{"outcome":"applied",` + denied + `,"OUTCOME":"denied"}`, false},
		{"unknown member", api.PathSubmit, 200, `{"outcome":"applied",` + applied + `,"since":"v2"}`, true},
		{"duplicate mode", api.PathStatus, 200, `{"scopes":[{"scope":"s","epoch":2,"mode":"held","mode":"open"}],"audit_seq":3,"anchor_checked":true}`, false},
		{"long s variant of scopes", api.PathStatus, 200, `{"scopes":[],"ſcopes":[{"scope":"s","epoch":1,"mode":"open"}],"audit_seq":3,"anchor_checked":true}`, false},
		{"duplicate error code", api.PathStatus, 503, `{"error":{"code":"storage_busy","code":"internal","message":"m"}}`, false},
	} {
		c := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			io.WriteString(w, tc.body)
		}), false)
		var err error
		if tc.path == api.PathSubmit {
			var res kvfence.Result
			res, err = c.Submit(context.Background(), []byte{0xa0})
			if err == nil && res.Outcome != kvfence.Applied {
				t.Errorf("%s: %+v", tc.name, res)
			}
		} else {
			_, err = c.Status(context.Background(), "")
		}
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v, want the answer read", tc.name, err)
		case !tc.ok && tc.status < 500 && !errors.Is(err, client.ErrProtocol):
			t.Errorf("%s: %v, want ErrProtocol", tc.name, err)
		case !tc.ok && tc.status >= 500 && (err == nil || errors.Is(err, kvfence.ErrStorageBusy)):
			t.Errorf("%s: %v, want an error that is not read as one of the two codes", tc.name, err)
		}
	}
}
