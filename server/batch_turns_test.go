package server_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/server"
)

// Ensure that batch requests beyond Options.MaxBatchesInFlight wait for a
// turn before they are decided: however many connections and streams send
// batches, the decisions they hold at once are bounded. With the only turn
// taken, a batch is kept waiting (its client gives up and nothing of it is
// decided); once the turn is given back, a batch is served.
func TestSubmitBatch_TurnsBounded(t *testing.T) {
	r := openReceiver(t, t.TempDir(), false)
	defer r.Close()
	_, env := activate(t, r, workerA, "a1")
	h, err := server.New(server.Options{Receiver: r, Authenticator: fixed(workerA), MaxBatchesInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := api.AppendBatch(nil, [][]byte{env, {0xa0}})

	release := h.TakeBatchTurn()
	head := r.Head()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+api.PathSubmitBatch, bytes.NewReader(body))
	req.Header.Set("Content-Type", api.ContentCBOR)
	if resp, err := srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a batch while the only turn is taken: %s, want it kept waiting", resp.Status)
	}
	if r.Head() != head {
		t.Fatal("the batch kept waiting was decided")
	}
	release()
	got, err := do(srv.Client(), http.MethodPost, srv.URL+api.PathSubmitBatch, api.ContentCBOR, body)
	if err != nil || got.status != http.StatusOK {
		t.Fatalf("a batch after the turn was given back: %v %d %s", err, got.status, got.raw)
	}
}

// Ensure that a batch whose body is still arriving holds no turn: a
// caller that trickles its bodies cannot keep other callers' batches
// waiting. With one turn, a batch sent in full is answered while another
// request's body is only begun.
func TestSubmitBatch_TrickledBodyHoldsNoTurn(t *testing.T) {
	r := openReceiver(t, t.TempDir(), false)
	defer r.Close()
	_, env := activate(t, r, workerA, "a1")
	h, err := server.New(server.Options{Receiver: r, Authenticator: fixed(workerA), MaxBatchesInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := api.AppendBatch(nil, [][]byte{env, {0xa0}})

	pr, pw := io.Pipe()
	defer pw.Close() // before the server closes, on any path
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+api.PathSubmitBatch, pr)
		req.Header.Set("Content-Type", api.ContentCBOR)
		if resp, err := srv.Client().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	if _, err := pw.Write(body[:1]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+api.PathSubmitBatch, bytes.NewReader(body))
	req.Header.Set("Content-Type", api.ContentCBOR)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("a batch while another's body trickles: %v, want it answered", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a batch while another's body trickles: %s", resp.Status)
	}
}
