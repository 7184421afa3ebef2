package client_test

import (
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// Ensure that Submits the client coalesced into a batch over the
// receiver's own batch limit (server.Options.MaxBatchItems, here 2) are
// still decided: the receiver refuses such a batch whole, before deciding
// anything, so each envelope, which it accepts alone, must not fail for
// the way the client grouped it.
func TestSubmit_BatchOverReceiverLimit(t *testing.T) {
	g := newGate()
	var limited http.Handler
	s := serveOn(t, func(path string, opts *kvfence.Options) (*kvfence.Receiver, error) { return kvfence.Open(path, opts) },
		func(h http.Handler) http.Handler {
			return g.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == api.PathSubmitBatch {
					limited.ServeHTTP(w, r)
					return
				}
				h.ServeHTTP(w, r)
			}))
		})
	h, err := server.New(server.Options{Receiver: s.r, Authenticator: server.SPIFFECertificate{}, Admins: []string{operator},
		MaxBatchItems: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	limited = h
	envs := workerEnvelopes(t, s, 5)
	res, errs := submitAll(t, s.client(workerA), g, envs)
	if g.batches.Load() == 0 {
		t.Fatal("no batch was sent")
	}
	for i := range envs {
		if errs[i] != nil || res[i].Outcome != kvfence.Applied {
			t.Errorf("submit %d: %+v, %v; want applied", i, res[i], errs[i])
		}
	}
}
