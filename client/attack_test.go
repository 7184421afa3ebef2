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
