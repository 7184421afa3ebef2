package api

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that kvfence.Result marshals to the wire's submit answer: the
// same keys as Submit, in the same order, with the same values, so that an
// embedding service can answer with a Result as the served receiver does,
// and a client can decode either into either.
func TestResultJSON_MatchesSubmit(t *testing.T) {
	for _, r := range []kvfence.Result{
		{Outcome: kvfence.Applied, Scope: "s", Epoch: 3, Grant: "g", Action: "a", Target: "t", Revision: 2, AuditSeq: 9},
		{Outcome: kvfence.Denied, Reason: kvfence.ReasonActionReuseConflict, Detail: "d", Scope: "s", Epoch: 3,
			Grant: "g", Action: "a", Target: "t", AuditSeq: 10, ReceiptSeq: 9},
		{Outcome: kvfence.Denied, Reason: kvfence.ReasonMalformedEnvelope, AuditSeq: 11},
	} {
		got, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(SubmitOf(r))
		if err != nil {
			t.Fatal(err)
		}
		var gk, wk map[string]any
		if err := json.Unmarshal(got, &gk); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(want, &wk); err != nil {
			t.Fatal(err)
		}
		if g, w := slices.Sorted(maps.Keys(gk)), slices.Sorted(maps.Keys(wk)); !slices.Equal(g, w) {
			t.Fatalf("Result keys %v, Submit keys %v", g, w)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Result marshals to\n%s\nSubmit to\n%s", got, want)
		}
		var back kvfence.Result
		if err := json.Unmarshal(want, &back); err != nil || back != r {
			t.Fatalf("the submit answer decodes into %+v (%v), want %+v", back, err, r)
		}
	}
}
