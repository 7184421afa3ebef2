package client_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that two slow submits (a remote target's dispatch may take up to
// the receiver's dispatch timeout) do not keep every other Submit of the
// Client from being sent: with each Submit in a request of its own, a
// third is answered at once, and coalescing must not turn it into one
// that is never sent.
func TestSubmit_BatchSlowDoesNotBlockOthers(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{}, 2)
	out := api.SubmitOf(kvfence.Result{Outcome: kvfence.Applied, Scope: "s", Epoch: 1, AuditSeq: 1})
	c := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		envs := [][]byte{body}
		if r.URL.Path == api.PathSubmitBatch {
			envs, _ = api.DecodeBatch(body, api.MaxBatchItems)
		}
		for _, e := range envs {
			if bytes.Equal(e, []byte("slow")) {
				started <- struct{}{}
				<-release
			}
		}
		if r.URL.Path == api.PathSubmit {
			w.Write(out.AppendJSON(nil))
			return
		}
		b := api.AppendBatchOpen(nil)
		for i := range envs {
			b = api.AppendBatchDecision(b, i, http.StatusOK, &out)
		}
		w.Write(api.AppendBatchClose(b))
	}), false)
	for range 2 {
		go c.Submit(context.Background(), []byte("slow"))
		<-started
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.Submit(ctx, []byte("fast")); err != nil {
		t.Errorf("a Submit made while two slow ones are in flight: %v, want applied", err)
	}
}
