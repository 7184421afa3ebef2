package server_test

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/pki"
)

// Ensure that a request on a connection whose client certificate has
// expired since its handshake is refused with 401, nothing recorded, and
// the connection closed: the handshake verified the certificate, but the
// connection outlived it.
func TestSPIFFECertificate_ExpiredSinceHandshake(t *testing.T) {
	e := newEnv(t)
	_, env := activate(t, e.r, workerA, "a1")
	cert, err := pki.Issue(e.ca, pki.Options{Name: "worker", URIs: []string{workerA}, Client: true, Validity: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := e.clientWith(&cert)
	var dials atomic.Int32
	c.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	if resp := e.must(c, http.MethodGet, api.PathHealthz, "", nil); resp.status != http.StatusOK {
		t.Fatalf("before expiry: %d %s", resp.status, resp.raw)
	}
	head := e.r.Head()
	time.Sleep(time.Until(cert.Cert.NotAfter) + 100*time.Millisecond)
	resp := e.submit(c, env)
	if resp.status != http.StatusUnauthorized || resp.errorCode() != api.CodeUnauthenticated {
		t.Fatalf("after expiry, on the same connection: %d %s, want 401", resp.status, resp.raw)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials: the request after expiry did not reuse the connection", n)
	}
	if e.r.Head() != head {
		t.Fatal("a request with an expired certificate was recorded")
	}
	// The connection was closed: the next request dials again, and the
	// expired certificate is refused at its handshake.
	if _, err := do(c, http.MethodGet, e.srv.URL+api.PathHealthz, "", nil); err == nil || dials.Load() != 2 {
		t.Fatalf("after the refusal: %v, %d dials; want a new, refused handshake", err, dials.Load())
	}
}
