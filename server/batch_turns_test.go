package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/server"
)

// Ensure that batch requests beyond Options.MaxBatchesInFlight wait for a
// turn before their bodies are read: however many connections and streams
// send batches, what they hold at once is bounded. With one turn, a batch
// whose body is still arriving keeps a second waiting (its client gives up
// and nothing of it is decided), and once the first is answered a third
// is served.
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

	pr, pw := io.Pipe()
	defer pw.Close() // before the server closes, on any path
	first := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+api.PathSubmitBatch, pr)
		req.Header.Set("Content-Type", api.ContentCBOR)
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = errors.New(resp.Status)
			}
		}
		first <- err
	}()
	// The first batch's head is sent: it holds the turn while it reads.
	if _, err := pw.Write(body[:1]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	head := r.Head()

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+api.PathSubmitBatch, nil)
	req.Header.Set("Content-Type", api.ContentCBOR)
	req.Body = io.NopCloser(bytes.NewReader(body))
	if resp, err := srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a second batch while the only turn is taken: %s, want it kept waiting", resp.Status)
	}
	if r.Head() != head {
		t.Fatal("the batch kept waiting was decided")
	}

	if _, err := pw.Write(body[1:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-first; err != nil {
		t.Fatalf("the first batch: %v", err)
	}
	got, err := do(srv.Client(), http.MethodPost, srv.URL+api.PathSubmitBatch, api.ContentCBOR, body)
	if err != nil || got.status != http.StatusOK {
		t.Fatalf("a batch after the turn was given back: %v %d %s", err, got.status, got.raw)
	}
}
