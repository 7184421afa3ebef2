package server_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// switchAnchor fails every Store while fail is set, as a full or broken
// anchor volume would.
type switchAnchor struct {
	audit.AnchorStore
	fail atomic.Bool
}

func (a *switchAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	if a.fail.Load() {
		return errors.New("injected anchor write failure")
	}
	return a.AnchorStore.Store(old, next)
}

// probeGet fetches path over plain HTTP, with no client certificate.
func probeGet(t *testing.T, base, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// Ensure that /healthz and /readyz answer without a client certificate,
// that /readyz turns 503 when an anchor write fails and 200 again after one
// succeeds, and 503 once the receiver is closed.
func TestProbes_ReadyFollowsAnchorWrites(t *testing.T) {
	dir := t.TempDir()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	path, file := filepath.Join(dir, "receiver.db"), audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "test-receiver", Key: key, Anchor: file}); err != nil {
		t.Fatal(err)
	}
	anchor := &switchAnchor{AnchorStore: file}
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			r.Close()
		}
	})
	h, err := server.NewProbes(server.ProbeOptions{Receiver: r})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx := context.Background()

	steps := []struct {
		name       string
		act        func() error
		wantErr    bool
		wantReady  int
		wantReason string
	}{
		{"fresh", nil, false, http.StatusOK, "ok\n"},
		{"anchor write fails", func() error {
			anchor.fail.Store(true)
			_, err := r.Admin().CreateScope(ctx, "scope-a")
			return err
		}, true, http.StatusServiceUnavailable, "not ready: last anchor write failed\n"},
		{"anchor write succeeds", func() error {
			anchor.fail.Store(false)
			_, err := r.Admin().CreateScope(ctx, "scope-b")
			return err
		}, false, http.StatusOK, "ok\n"},
		{"closed", func() error {
			closed = true
			return r.Close()
		}, false, http.StatusServiceUnavailable, "not ready: receiver closed\n"},
	}
	for _, s := range steps {
		if s.act != nil {
			if err := s.act(); (err != nil) != s.wantErr {
				t.Fatalf("%s: err = %v, want an error: %v", s.name, err, s.wantErr)
			}
		}
		if code, body := probeGet(t, srv.URL, "/healthz"); code != http.StatusOK || body != "ok\n" {
			t.Errorf("%s: /healthz = %d %q", s.name, code, body)
		}
		code, body := probeGet(t, srv.URL, "/readyz")
		if code != s.wantReady || body != s.wantReason {
			t.Errorf("%s: /readyz = %d %q, want %d %q", s.name, code, body, s.wantReady, s.wantReason)
		}
		if strings.Contains(body, "injected") || strings.Contains(body, "scope") {
			t.Errorf("%s: /readyz leaks receiver detail: %q", s.name, body)
		}
	}
}

// Ensure that a receiver whose anchor was not checked at open is not
// ready, and that the probes serve only GET on their two paths.
func TestProbes_AnchorUncheckedAndRoutes(t *testing.T) {
	dir := t.TempDir()
	rw := openReceiver(t, dir, false)
	path := filepath.Join(dir, "receiver.db")
	rw.Close()
	r, err := kvfence.Open(path, &kvfence.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h, err := server.NewProbes(server.ProbeOptions{Receiver: r})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	if code, body := probeGet(t, srv.URL, "/readyz"); code != http.StatusServiceUnavailable || body != "not ready: anchor not checked at open\n" {
		t.Errorf("/readyz = %d %q", code, body)
	}
	for _, p := range []string{"/", "/metrics", "/v1/status", "/readyz/x"} {
		if code, _ := probeGet(t, srv.URL, p); code != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", p, code)
		}
	}
	resp, err := http.Post(srv.URL+"/readyz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /readyz = %d, want 405", resp.StatusCode)
	}
	if _, err := server.NewProbes(server.ProbeOptions{}); !errors.Is(err, server.ErrNoReceiver) {
		t.Errorf("NewProbes without a receiver: %v", err)
	}
}
