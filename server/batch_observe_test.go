package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// codeRecorder is a RequestObserver that keeps each request's route and
// error code.
type codeRecorder struct {
	mu    sync.Mutex
	codes []string
}

func (c *codeRecorder) ObserveRequest(route string, _ int, code string, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.codes = append(c.codes, route+" "+code)
}

// Ensure that a submit refused because storage is below the
// administrators' reserve is seen by the RequestObserver with its code
// whether it came alone or in a batch: the shipped alert on a reached
// reserve (docs/monitoring/kvfence-alerts.yml) counts
// kvfence_http_requests_total{error="storage_reserve"}, and the Go client
// now sends concurrent Submits in batches.
func TestSubmitBatch_ItemErrorsObserved(t *testing.T) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, anchor := filepath.Join(dir, "receiver.db"), audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "reserve", Key: key, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	// A reserve no volume has: every submit is refused, nothing written.
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor, Reserve: 1 << 60})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if _, err := r.Admin().CreateScope(context.Background(), scope); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admin().CreateTarget(context.Background(), scope, scope, []byte(initValue)); err != nil {
		t.Fatal(err)
	}
	env := activateFor(t, r, request(t, "a1"))
	for _, tc := range []struct {
		path string
		body []byte
	}{
		{api.PathSubmit, env},
		{api.PathSubmitBatch, api.AppendBatch(nil, [][]byte{env, env})},
	} {
		rec := &codeRecorder{}
		h := mustNew(t, server.Options{Receiver: r, Authenticator: fixedCaller(workerA), Requests: rec})
		rq := httptest.NewRequest(http.MethodPost, tc.path, bytes.NewReader(tc.body))
		rq.Header.Set("Content-Type", api.ContentCBOR)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, rq)
		if !bytes.Contains(w.Body.Bytes(), []byte(`"storage_reserve"`)) {
			t.Fatalf("%s: %d %s, want storage_reserve", tc.path, w.Code, w.Body)
		}
		if !slices.Contains(rec.codes, tc.path+" storage_reserve") {
			t.Errorf("%s: observed %q, want the code storage_reserve", tc.path, rec.codes)
		}
	}
}
