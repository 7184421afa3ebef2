package server_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// stallAnchor blocks every Store until release is closed, as an anchor
// volume that stopped answering (a hard NFS mount, a hung disk) would.
type stallAnchor struct {
	audit.AnchorStore
	entered chan struct{}
	release chan struct{}
}

func (a *stallAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	select {
	case a.entered <- struct{}{}:
	default:
	}
	<-a.release
	return a.AnchorStore.Store(old, next)
}

// Ensure that /readyz is not ready while an anchor write has been stuck
// for longer than the probe allows: no write can be acknowledged then, so
// an orchestrator must not keep routing workers here.
func TestRedteam20_ReadyWhileAnchorWriteStalls(t *testing.T) {
	dir := t.TempDir()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	path, file := filepath.Join(dir, "receiver.db"), audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "test-receiver", Key: key, Anchor: file}); err != nil {
		t.Fatal(err)
	}
	anchor := &stallAnchor{AnchorStore: file, entered: make(chan struct{}, 1), release: make(chan struct{})}
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	h, err := server.NewProbes(server.ProbeOptions{Receiver: r, AnchorStall: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	done := make(chan error, 1)
	go func() { _, err := r.Admin().CreateScope(context.Background(), "scope-a"); done <- err }()
	<-anchor.entered
	time.Sleep(200 * time.Millisecond)
	code, body := probeGet(t, srv.URL, "/readyz")
	close(anchor.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if code != http.StatusServiceUnavailable || body != "not ready: anchor write stalled\n" {
		t.Errorf("/readyz during a stalled anchor write = %d %q, want 503", code, body)
	}
	if code, body := probeGet(t, srv.URL, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after the write completed = %d %q", code, body)
	}
	r.Close()
}
