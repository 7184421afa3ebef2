package server_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/server"
)

// Ensure that a client whose CA the source dropped from the bundle is not
// admitted on a new connection that resumes a TLS session from before the
// drop. crypto/tls does not verify a resumed session's client chain
// against the current ClientCAs again; SPIFFECertificate with Roots must,
// over HTTP/1.1 and HTTP/2 alike.
func TestRedteam21_ResumedSessionAfterBundleDrop(t *testing.T) {
	for _, proto := range []string{"http/1.1", "h2"} {
		t.Run(proto, func(t *testing.T) { resumedAfterDrop(t, proto) })
	}
}

func resumedAfterDrop(t *testing.T, proto string) {
	caA, err := pki.NewCA("A", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caB, err := pki.NewCA("B", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := pki.Issue(caB, pki.Options{Name: "receiver", URIs: []string{"spiffe://example.org/receiver"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	sc := srvCert.TLS()
	src := &fakeSource{}
	src.set(&sc, 1, nil, caA.Cert, caB.Cert)
	creds, err := server.NewSourceCredentials(src)
	if err != nil {
		t.Fatal(err)
	}
	auth := server.SPIFFECertificate{Roots: creds, TrustDomain: "example.org"}
	hs := &http.Server{ConnContext: server.ConnContext, ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, err := auth.Authenticate(r)
			if err != nil {
				w.Header().Set("Connection", "close")
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
			_, _ = io.WriteString(w, id)
		})}
	l, err := tls.Listen("tcp", "127.0.0.1:0", creds.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.Serve(l) }()
	defer hs.Close()

	worker, err := pki.Issue(caA, pki.Options{Name: "w", URIs: []string{"spiffe://example.org/agent/w"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caB.Cert)
	cache := tls.NewLRUClientSessionCache(8)
	get := func() (int, bool) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{worker.TLS()},
			MinVersion: tls.VersionTLS13, ClientSessionCache: cache, NextProtos: []string{proto}},
			ForceAttemptHTTP2: proto == "h2", DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + l.Addr().String() + "/")
		if err != nil {
			return 0, false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.ProtoMajor == 2 != (proto == "h2") {
			t.Fatalf("spoke %s, want %s", resp.Proto, proto)
		}
		return resp.StatusCode, resp.TLS != nil && resp.TLS.DidResume
	}
	if st, _ := get(); st != http.StatusOK {
		t.Fatalf("before the drop: HTTP %d, want 200", st)
	}
	// A second connection resumes, which shows the session is cached.
	if st, resumed := get(); st != http.StatusOK || !resumed {
		t.Fatalf("before the drop: HTTP %d, resumed %v; want 200 on a resumed session", st, resumed)
	}
	src.set(&sc, 2, nil, caB.Cert)
	if st, resumed := get(); st == http.StatusOK {
		t.Fatalf("after caA left the bundle: HTTP 200 (resumed %v): a dropped CA's client was admitted", resumed)
	}
}

// Ensure that SourceCredentials refuse handshakes, rather than serving
// without a client CA, when the source gives a certificate with no
// client CA or no certificate, and that open connections stay held to the
// last client CA it gave.
func TestRedteam21_SourceGivesNoClientCA(t *testing.T) {
	ca, err := pki.NewCA("A", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{}
	src.set(issue(t, ca), 1, nil, ca.Cert)
	creds, err := server.NewSourceCredentials(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name string
		cert *tls.Certificate
	}{{"no client CA", issue(t, ca)}, {"no certificate", &tls.Certificate{}}, {"nil certificate", nil}} {
		if step.cert != nil && len(step.cert.Certificate) > 0 {
			src.set(step.cert, 2, nil) // no roots
		} else {
			src.set(step.cert, 2, nil, ca.Cert)
		}
		cfg, err := serverConfig(creds)
		if !errors.Is(err, server.ErrNoCredentials) {
			t.Fatalf("%s: handshake config %v, %v; want ErrNoCredentials", step.name, cfg, err)
		}
		roots, _ := creds.ClientRoots()
		if !roots.Pool().Equal(server.NewRoots([]*x509.Certificate{ca.Cert}).Pool()) {
			t.Fatalf("%s: open connections are no longer held to the last client CA", step.name)
		}
	}
}

// Ensure that a worker cannot forge log lines through the names its
// envelope carries: with the text format serve uses by default, an action
// that holds a quote, spaces and key=value pairs stays one quoted value
// of the one decision line.
func TestRedteam21_DecisionLogInjection(t *testing.T) {
	var buf bytes.Buffer
	e := newObsEnv(t, func(o *server.Options) {
		o.LogDecisions = true
		o.Logger = slog.New(slog.NewTextHandler(&syncWriter{w: &buf}, nil))
	})
	forged := `a1" level=ERROR msg="admin change" change=hold_all actor=` + operator + ` x="`
	_, env := activate(t, e.r, workerA, forged)
	if res := e.submit(e.client(workerA), env); res.status != http.StatusOK {
		t.Fatalf("HTTP %d", res.status)
	}
	if res := e.submit(e.client(workerB), env); res.status != http.StatusForbidden {
		t.Fatalf("HTTP %d", res.status)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log lines, want 2 decisions:\n%s", len(lines), buf.String())
	}
	quoted := regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	for _, l := range lines {
		// What is left once the quoted values are taken out is the
		// line's own keys.
		bare := quoted.ReplaceAllString(l, `""`)
		if !strings.Contains(bare, " msg=decision ") || strings.Count(bare, "level=") != 1 || strings.Count(bare, "msg=") != 1 ||
			strings.Contains(bare, "actor=") {
			t.Errorf("a forged record in the log: %s", l)
		}
	}
}

// Ensure that SPIFFECertificate refuses a client certificate that is a
// CA, or may sign certificates or CRLs, even when it chains to the client
// CA and names an admitted SPIFFE ID: an X.509-SVID leaf is none of these
// (X509-SVID specification, leaf validation), and the holder of a CA's key
// is not the workload its URI names.
func TestRedteam21_CALeafRefused(t *testing.T) {
	root, err := pki.NewCA("root", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const id = "spiffe://example.org/ops/alice"
	for _, tc := range []struct {
		name  string
		isCA  bool
		usage x509.KeyUsage
		ok    bool
	}{
		{"leaf", false, x509.KeyUsageDigitalSignature, true},
		{"CA", true, x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, false},
		{"CA without key usage", true, 0, false},
		{"certificate signer", false, x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, false},
		{"CRL signer", false, x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature, false},
	} {
		cert := issueRaw(t, root, id, tc.isCA, tc.usage)
		r := &http.Request{TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert},
			VerifiedChains: [][]*x509.Certificate{{cert, root.Cert}}}}
		got, err := server.SPIFFECertificate{TrustDomain: "example.org"}.Authenticate(r)
		switch {
		case tc.ok && (err != nil || got != id):
			t.Errorf("%s: %q %v, want admitted", tc.name, got, err)
		case !tc.ok && !errors.Is(err, server.ErrUnauthenticated):
			t.Errorf("%s: admitted as %q (%v), want ErrUnauthenticated", tc.name, got, err)
		}
	}
}

// issueRaw issues a client certificate for id from ca with the given CA
// flag and key usage.
func issueRaw(t *testing.T, ca pki.Pair, id string, isCA bool, usage x509.KeyUsage) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()), NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		BasicConstraintsValid: true, IsCA: isCA, URIs: []*url.URL{u}, KeyUsage: usage,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
