package spiffesource_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/internal/spiffetest"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
	"github.com/kvfence/kvfence/spiffesource"
)

const (
	receiverID = "spiffe://example.org/kvfence/receiver"
	workerA    = "spiffe://example.org/agent/worker-a"
	workerB    = "spiffe://example.org/agent/worker-b"
)

// waitRotated waits until src has a generation after gen, and returns it.
func waitRotated(t *testing.T, src *spiffesource.Source, gen uint64) (*tls.Certificate, []*x509.Certificate, uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cert, roots, g, err := src.Credentials()
		if err != nil {
			t.Fatal(err)
		}
		if g > gen {
			return cert, roots, g
		}
		if time.Now().After(deadline) {
			t.Fatalf("no update from the agent after generation %d", gen)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// spiffeServer is a receiver served with credentials from a Workload API.
type spiffeServer struct {
	agent *spiffetest.WorkloadAPI
	src   *spiffesource.Source
	addr  string
}

// serveFromAgent serves a fresh receiver over TLS with the SVID and bundle
// agent hands out, and SPIFFECertificate over them as a server wires it.
func serveFromAgent(t *testing.T, agent *spiffetest.WorkloadAPI) *spiffeServer {
	t.Helper()
	src, err := spiffesource.Open(context.Background(), spiffesource.Options{Address: agent.Addr, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	creds, err := server.NewSourceCredentials(src)
	if err != nil {
		t.Fatal(err)
	}
	td, err := src.TrustDomain()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	path, anchor := filepath.Join(dir, "receiver.db"), audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "test-receiver", Key: key, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	h, err := server.New(server.Options{Receiver: r, Authenticator: server.SPIFFECertificate{Roots: creds, TrustDomain: td},
		Admins: []string{"spiffe://example.org/ops/alice"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := server.NewListener(inner, server.ListenerOptions{MaxConnections: 64, TLS: creds.TLSConfig()})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ConnContext: server.ConnContext, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return &spiffeServer{agent: agent, src: src, addr: l.Addr().String()}
}

// worker is an HTTP client on its own connection, counting its dials.
type worker struct {
	hc    *http.Client
	tr    *http.Transport
	dials atomic.Int32
}

func newWorker(t *testing.T, cfg *tls.Config) *worker {
	w := &worker{}
	w.tr = &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			w.dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}
	t.Cleanup(w.tr.CloseIdleConnections)
	w.hc = &http.Client{Transport: w.tr, Timeout: 10 * time.Second}
	return w
}

// get calls /healthz and returns the status and the serial of the
// certificate the server presented on the connection.
func (w *worker) get(s *spiffeServer) (int, *big.Int, error) {
	resp, err := w.hc.Get("https://" + s.addr + api.PathHealthz)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber, nil
}

// workerTLS returns the TLS configuration of a worker whose own agent
// hands out an SVID for id from ca, with bundle to check the receiver by.
func workerTLS(t *testing.T, ca pki.Pair, id string, bundle ...*x509.Certificate) (*tls.Config, *spiffetest.WorkloadAPI) {
	t.Helper()
	agent := spiffetest.Start(t)
	agent.Set(t, spiffetest.Issue(t, ca, id), bundle...)
	src, err := spiffesource.Open(context.Background(), spiffesource.Options{Address: agent.Addr, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	cfg, err := src.ClientTLS(receiverID)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, agent
}

func newCA(t *testing.T, name string) pki.Pair {
	t.Helper()
	ca, err := pki.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// Ensure that a receiver served from a Workload API follows the agent's
// rotations without a reload: after the SVID rotates, new handshakes get
// the new certificate while open connections carry on; after the bundle
// drops the CA that issued worker B's SVID, B's open connection is refused
// (401) and closed at its next request and B's new handshakes fail, while
// worker A, whose CA stayed, is not refused on its open connection or on
// new ones.
func TestServe_Rotation(t *testing.T) {
	oldCA, newCA := newCA(t, "old CA"), newCA(t, "new CA")
	agent := spiffetest.Start(t)
	svid1 := spiffetest.Issue(t, newCA, receiverID)
	agent.Set(t, svid1, oldCA.Cert, newCA.Cert)
	s := serveFromAgent(t, agent)

	cfgA, _ := workerTLS(t, newCA, workerA, oldCA.Cert, newCA.Cert)
	cfgB, _ := workerTLS(t, oldCA, workerB, oldCA.Cert, newCA.Cert)
	a, b := newWorker(t, cfgA), newWorker(t, cfgB)
	for name, w := range map[string]*worker{"A": a, "B": b} {
		st, serial, err := w.get(s)
		if err != nil || st != http.StatusOK || serial.Cmp(svid1.Pair.Cert.SerialNumber) != 0 {
			t.Fatalf("worker %s before any rotation: %d %v", name, st, err)
		}
	}

	// The SVID rotates; the bundle stays.
	svid2 := spiffetest.Issue(t, newCA, receiverID)
	_, _, g1, _ := s.src.Credentials()
	agent.Set(t, svid2, oldCA.Cert, newCA.Cert)
	waitRotated(t, s.src, g1)
	for name, w := range map[string]*worker{"A": a, "B": b} {
		st, serial, err := w.get(s)
		if err != nil || st != http.StatusOK || serial.Cmp(svid1.Pair.Cert.SerialNumber) != 0 || w.dials.Load() != 1 {
			t.Fatalf("worker %s on its open connection after the SVID rotated: %d %v, %d dials", name, st, err, w.dials.Load())
		}
	}
	fresh := newWorker(t, cfgA)
	if st, serial, err := fresh.get(s); err != nil || st != http.StatusOK || serial.Cmp(svid2.Pair.Cert.SerialNumber) != 0 {
		t.Fatalf("a new handshake after the SVID rotated: %d, serial %v (want %v), %v", st, serial, svid2.Pair.Cert.SerialNumber, err)
	}

	// The bundle drops the old CA, which issued B's SVID.
	svid3 := spiffetest.Issue(t, newCA, receiverID)
	_, _, g2, _ := s.src.Credentials()
	agent.Set(t, svid3, newCA.Cert)
	waitRotated(t, s.src, g2)
	if st, _, err := b.get(s); err != nil || st != http.StatusUnauthorized {
		t.Fatalf("worker B on its open connection after its CA left the bundle: %d %v, want 401", st, err)
	}
	// An HTTP/2 connection is closed shortly after the refusal is out;
	// until then, every request on it is refused as well.
	for deadline := time.Now().Add(5 * time.Second); ; {
		st, _, err := b.get(s)
		if err != nil {
			break
		}
		if st != http.StatusUnauthorized || time.Now().After(deadline) {
			t.Fatalf("worker B after the refusal: %d; want 401 until its connection is closed", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	n := b.dials.Load()
	if _, _, err := b.get(s); err == nil || b.dials.Load() != n+1 {
		t.Fatalf("worker B: %v, %d dials after %d; want a new handshake, refused", err, b.dials.Load(), n)
	}
	if _, _, err := newWorker(t, cfgB).get(s); err == nil {
		t.Fatal("a new handshake of worker B was admitted after its CA left the bundle")
	}
	if st, _, err := a.get(s); err != nil || st != http.StatusOK || a.dials.Load() != 1 {
		t.Fatalf("worker A on its open connection after the bundle rotated: %d %v, %d dials", st, err, a.dials.Load())
	}
	if st, serial, err := newWorker(t, cfgA).get(s); err != nil || st != http.StatusOK || serial.Cmp(svid3.Pair.Cert.SerialNumber) != 0 {
		t.Fatalf("a new handshake of worker A after the bundle rotated: %d %v", st, err)
	}
}

// Ensure that a client of ClientTLS follows its own agent's rotations and
// refuses a receiver whose SPIFFE ID is not the one expected, and that the
// client package works over it. The worker's SVID moves from the old CA
// to the new one, then the receiver's bundle drops the old CA: a new
// connection is admitted only if the worker presents its new SVID.
func TestClientTLS(t *testing.T) {
	oldCA, newCA := newCA(t, "old CA"), newCA(t, "new CA")
	agent := spiffetest.Start(t)
	agent.Set(t, spiffetest.Issue(t, newCA, receiverID), oldCA.Cert, newCA.Cert)
	s := serveFromAgent(t, agent)
	cfg, wagent := workerTLS(t, oldCA, workerA, oldCA.Cert, newCA.Cert)
	ctx := context.Background()
	dial := func() error {
		cl, err := client.NewWith("https://"+s.addr, client.Options{TLS: cfg})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		return cl.Healthz(ctx)
	}
	if err := dial(); err != nil {
		t.Fatalf("client over ClientTLS: %v", err)
	}

	next := spiffetest.Issue(t, newCA, workerA)
	wagent.Set(t, next, oldCA.Cert, newCA.Cert)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{Version: tls.VersionTLS13})
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(c.Certificate[0], next.Pair.Cert.Raw) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the client kept presenting its old SVID")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, _, g, _ := s.src.Credentials()
	agent.Set(t, spiffetest.Issue(t, newCA, receiverID), newCA.Cert)
	waitRotated(t, s.src, g)
	if err := dial(); err != nil {
		t.Fatalf("a new connection with the rotated SVID: %v", err)
	}

	wrong, err := newSource(t, wagent).ClientTLS("spiffe://example.org/kvfence/other")
	if err != nil {
		t.Fatal(err)
	}
	other, err := client.NewWith("https://"+s.addr, client.Options{TLS: wrong})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Healthz(ctx); err == nil || !strings.Contains(err.Error(), "unexpected ID") {
		t.Fatalf("a receiver with another SPIFFE ID was accepted: %v", err)
	}
}

func newSource(t *testing.T, agent *spiffetest.WorkloadAPI) *spiffesource.Source {
	t.Helper()
	src, err := spiffesource.Open(context.Background(), spiffesource.Options{Address: agent.Addr, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// Ensure that a client certificate that chains to the trust bundle but
// names a SPIFFE ID in another trust domain is refused: the bundle vouches
// only for its own trust domain's IDs.
func TestServe_OtherTrustDomain(t *testing.T) {
	ca := newCA(t, "CA")
	agent := spiffetest.Start(t)
	agent.Set(t, spiffetest.Issue(t, ca, receiverID), ca.Cert)
	s := serveFromAgent(t, agent)
	for _, tc := range []struct {
		id   string
		want int
	}{
		{"spiffe://example.org/agent/worker-c", http.StatusOK},
		{"spiffe://other.org/agent/worker-c", http.StatusUnauthorized},
	} {
		p, err := pki.Issue(ca, pki.Options{Name: "c", URIs: []string{tc.id}, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		// The attacker does not care who the server is.
		w := newWorker(t, &tls.Config{Certificates: []tls.Certificate{p.TLS()}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		if st, _, err := w.get(s); err != nil || st != tc.want {
			t.Errorf("%s: %d %v, want %d", tc.id, st, err, tc.want)
		}
	}
}

// BenchmarkClientRoots measures what every request on a served
// connection pays to learn whether the bundle changed: the Source's
// snapshot check and SourceCredentials' generation check.
func BenchmarkClientRoots(b *testing.B) {
	ca, err := pki.NewCA("CA", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	agent := spiffetest.Start(b)
	agent.Set(b, spiffetest.Issue(b, ca, receiverID), ca.Cert)
	src, err := spiffesource.Open(context.Background(), spiffesource.Options{Address: agent.Addr, Timeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	creds, err := server.NewSourceCredentials(src)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			creds.ClientRoots()
		}
	})
}
