package client_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that a submit sends exactly its envelope, with its length and
// no other body, and no header the receiver does not read: none asking
// for compression, none naming the client. The request is built on a URL
// parsed once; consecutive submits of different lengths each carry their
// own bytes, and an empty envelope is an empty body, not a chunked one.
func TestClient_SubmitRequest(t *testing.T) {
	type seen struct {
		body          []byte
		length        int64
		chunked       bool
		ctype, ua, ae string
		hasUA         bool
		path, query   string
	}
	var (
		mu  sync.Mutex
		got []seen
	)
	s := serveOn(t, func(path string, opts *kvfence.Options) (*kvfence.Receiver, error) { return kvfence.Open(path, opts) }, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				t.Error(err)
			}
			_, hasUA := r.Header["User-Agent"]
			mu.Lock()
			got = append(got, seen{body: b, length: r.ContentLength, chunked: len(r.TransferEncoding) > 0,
				ctype: r.Header.Get("Content-Type"), ua: r.Header.Get("User-Agent"), hasUA: hasUA,
				ae: r.Header.Get("Accept-Encoding"), path: r.URL.Path, query: r.URL.RawQuery})
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
			h.ServeHTTP(w, r)
		})
	})
	c := s.client(workerA)
	envs := [][]byte{
		bytes.Repeat([]byte{0xa1}, 300),
		[]byte{0x01, 0x02},
		bytes.Repeat([]byte{0xb2}, 5000),
		{},
		[]byte(strings.Repeat("z", 64)),
	}
	for _, env := range envs {
		// Each is denied as malformed, or refused: what matters here is
		// what the receiver was sent.
		c.Submit(context.Background(), env)
	}
	if len(got) != len(envs) {
		t.Fatalf("the receiver saw %d requests, want %d", len(got), len(envs))
	}
	for i, g := range got {
		switch {
		case !bytes.Equal(g.body, envs[i]):
			t.Errorf("submit %d: the receiver got %d bytes %x..., want the %d bytes sent", i, len(g.body), g.body[:min(8, len(g.body))], len(envs[i]))
		case g.length != int64(len(envs[i])) || g.chunked:
			t.Errorf("submit %d: Content-Length %d (chunked %v), want %d", i, g.length, g.chunked, len(envs[i]))
		case g.ctype != api.ContentCBOR:
			t.Errorf("submit %d: Content-Type %q", i, g.ctype)
		case g.hasUA || g.ae != "":
			t.Errorf("submit %d: User-Agent %q (sent %v), Accept-Encoding %q: want neither", i, g.ua, g.hasUA, g.ae)
		case g.path != api.PathSubmit || g.query != "":
			t.Errorf("submit %d: sent to %s?%s", i, g.path, g.query)
		}
	}
}
