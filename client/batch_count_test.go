package client_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// canonicalBatchServer answers every single submit applied and each batch
// in the receiver's own canonical form (the AppendBatch functions, which
// the client reads without encoding/json), with delta more results than
// the batch had envelopes.
func canonicalBatchServer(t *testing.T, g *gate, delta int) *client.Client {
	out := api.SubmitOf(kvfence.Result{Outcome: kvfence.Applied, Scope: "s", Epoch: 1, AuditSeq: 1})
	return unixServer(t, g.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == api.PathSubmit {
			w.Write(out.AppendJSON(nil))
			return
		}
		envs, err := api.DecodeBatch(body, api.MaxBatchItems)
		if err != nil {
			t.Errorf("the client sent a batch the server refuses: %v", err)
		}
		b := api.AppendBatchOpen(nil)
		for i := range len(envs) + delta {
			b = api.AppendBatchDecision(b, i, http.StatusOK, &out)
		}
		w.Write(api.AppendBatchClose(b))
	})), false)
}

// checkCountRefused submits two held envelopes and three batched ones to
// a receiver that answers batches with delta results too many, and wants
// ErrProtocol for each of the batched ones.
func checkCountRefused(t *testing.T, delta int) {
	g := newGate()
	c := canonicalBatchServer(t, g, delta)
	_, errs := submitAll(t, c, g, [][]byte{[]byte("x"), []byte("x"), []byte("a"), []byte("b"), []byte("c")})
	if g.batches.Load() == 0 {
		t.Fatal("no batch was sent")
	}
	for i, err := range errs[2:] {
		if !errors.Is(err, client.ErrProtocol) || !strings.Contains(err.Error(), "results answered") {
			t.Errorf("%+d results: submit %d: %v, want ErrProtocol", delta, i+2, err)
		}
	}
}

// Ensure that a batch answer in the receiver's canonical form with more
// results than envelopes is ErrProtocol for all of them, as it is in any
// other form: the results are not matched to the envelopes by position
// when their count already says the answer is not of this batch.
func TestSubmit_BatchCanonicalLongAnswer(t *testing.T) { checkCountRefused(t, 1) }

// Ensure that a batch answer in the receiver's canonical form with fewer
// results than envelopes is ErrProtocol for all of them, and does not
// index past the results.
func TestSubmit_BatchCanonicalShortAnswer(t *testing.T) { checkCountRefused(t, -1) }
