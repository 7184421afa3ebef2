package server_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/server"
)

// fakeSource is a CredentialSource a test sets by hand.
type fakeSource struct {
	mu    sync.Mutex
	cert  *tls.Certificate
	roots []*x509.Certificate
	gen   uint64
	err   error
}

func (f *fakeSource) Credentials() (*tls.Certificate, []*x509.Certificate, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cert, f.roots, f.gen, f.err
}

func (f *fakeSource) set(cert *tls.Certificate, gen uint64, err error, roots ...*x509.Certificate) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cert, f.roots, f.gen, f.err = cert, roots, gen, err
}

func issue(t *testing.T, ca pki.Pair) *tls.Certificate {
	t.Helper()
	p, err := pki.Issue(ca, pki.Options{Name: "receiver", URIs: []string{"spiffe://example.org/receiver"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	c := p.TLS()
	return &c
}

// serverConfig returns the configuration the server's handshake would use.
func serverConfig(c *server.SourceCredentials) (*tls.Config, error) {
	return c.TLSConfig().GetConfigForClient(&tls.ClientHelloInfo{})
}

// Ensure that SourceCredentials follow the source: a new certificate is
// served from the next handshake on without changing the roots'
// generation (open connections are not checked again for it); new roots
// change it; an older generation read late never replaces a newer one;
// and a source that fails refuses handshakes while open connections stay
// held to the last roots it gave.
func TestSourceCredentials_FollowSource(t *testing.T) {
	caA, err := pki.NewCA("A", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caB, err := pki.NewCA("B", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{}
	src.set(nil, 0, errors.New("agent not there"))
	if _, err := server.NewSourceCredentials(src); !errors.Is(err, server.ErrNoCredentials) {
		t.Fatalf("a failing source: %v, want ErrNoCredentials", err)
	}
	src.set(issue(t, caA), 1, nil)
	if _, err := server.NewSourceCredentials(src); !errors.Is(err, server.ErrNoCredentials) {
		t.Fatalf("a source with no client CA: %v, want ErrNoCredentials", err)
	}
	first := issue(t, caA)
	src.set(first, 1, nil, caA.Cert)
	creds, err := server.NewSourceCredentials(src)
	if err != nil {
		t.Fatal(err)
	}
	_, g0 := creds.ClientRoots()

	for _, step := range []struct {
		name      string
		cert      *tls.Certificate
		gen       uint64
		err       error
		roots     []*x509.Certificate
		wantCert  *tls.Certificate // served at the next handshake; nil: refused
		wantRoots uint64           // the roots' generation after g0
		wantPool  []*x509.Certificate
	}{
		{"certificate rotates", issue(t, caA), 2, nil, []*x509.Certificate{caA.Cert}, nil, 0, []*x509.Certificate{caA.Cert}},
		{"roots change", issue(t, caA), 3, nil, []*x509.Certificate{caA.Cert, caB.Cert}, nil, 1, []*x509.Certificate{caA.Cert, caB.Cert}},
		{"an older generation", first, 1, nil, []*x509.Certificate{caA.Cert}, nil, 1, []*x509.Certificate{caA.Cert, caB.Cert}},
		{"roots drop A", issue(t, caB), 4, nil, []*x509.Certificate{caB.Cert}, nil, 2, []*x509.Certificate{caB.Cert}},
		{"source fails", nil, 5, errors.New("agent gone"), nil, nil, 2, []*x509.Certificate{caB.Cert}},
	} {
		t.Run(step.name, func(t *testing.T) {
			before, _ := serverConfig(creds)
			src.set(step.cert, step.gen, step.err, step.roots...)
			cfg, err := serverConfig(creds)
			roots, g := creds.ClientRoots()
			if g-g0 != step.wantRoots {
				t.Errorf("roots generation %d after %d, want +%d", g, g0, step.wantRoots)
			}
			want := server.NewRoots(step.wantPool).Pool()
			if !roots.Pool().Equal(want) {
				t.Errorf("roots are not the expected ones")
			}
			switch {
			case step.err != nil:
				if err == nil {
					t.Fatal("a handshake was served while the source failed")
				}
			case err != nil:
				t.Fatal(err)
			case step.gen == 1:
				// The older generation: the newer certificate stays.
				if string(cfg.Certificates[0].Certificate[0]) != string(before.Certificates[0].Certificate[0]) {
					t.Fatal("an older generation replaced a newer one")
				}
			default:
				if string(cfg.Certificates[0].Certificate[0]) != string(step.cert.Certificate[0]) {
					t.Fatal("the handshake does not serve the source's current certificate")
				}
				if !cfg.ClientCAs.Equal(want) || cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.MinVersion != tls.VersionTLS13 {
					t.Fatal("the handshake's client CA or settings are not the expected ones")
				}
			}
		})
	}
}

// Ensure that SPIFFECertificate.TrustDomain refuses a verified
// certificate whose SPIFFE ID is in another trust domain, and admits one
// in it.
func TestSPIFFECertificate_TrustDomain(t *testing.T) {
	ca, err := pki.NewCA("CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		td, id string
		ok     bool
	}{
		{"example.org", "spiffe://example.org/agent/w", true},
		{"example.org", "spiffe://other.org/agent/w", false},
		{"example.org", "spiffe://example.org.evil/agent/w", false},
		{"example.org", "spiffe://sub.example.org/agent/w", false},
		{"", "spiffe://other.org/agent/w", true},
	} {
		p, err := pki.Issue(ca, pki.Options{Name: "w", URIs: []string{tc.id}, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		r := &http.Request{TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{p.Cert},
			VerifiedChains: [][]*x509.Certificate{{p.Cert, ca.Cert}}}}
		id, err := server.SPIFFECertificate{TrustDomain: tc.td}.Authenticate(r)
		switch {
		case tc.ok && (err != nil || id != tc.id):
			t.Errorf("trust domain %q, %s: %q %v, want admitted", tc.td, tc.id, id, err)
		case !tc.ok && !errors.Is(err, server.ErrUnauthenticated):
			t.Errorf("trust domain %q, %s: %q %v, want ErrUnauthenticated", tc.td, tc.id, id, err)
		}
	}
}

// Ensure that SourceCredentials.NotAfter follows a rotated certificate and
// keeps the last one while the source fails, so that the expiry metric
// shows the certificate handshakes are served with.
func TestSourceCredentials_NotAfter(t *testing.T) {
	ca, err := pki.NewCA("A", 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	withValidity := func(d time.Duration) *tls.Certificate {
		p, err := pki.Issue(ca, pki.Options{Name: "receiver", URIs: []string{"spiffe://example.org/receiver"}, Server: true, Validity: d})
		if err != nil {
			t.Fatal(err)
		}
		c := p.TLS()
		return &c
	}
	leafNotAfter := func(c *tls.Certificate) time.Time {
		l, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return l.NotAfter
	}
	src := &fakeSource{}
	short, long := withValidity(time.Hour), withValidity(10*time.Hour)
	src.set(short, 1, nil, ca.Cert)
	creds, err := server.NewSourceCredentials(src)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := creds.NotAfter(), leafNotAfter(short); !got.Equal(want) {
		t.Fatalf("NotAfter = %v, want the first certificate's %v", got, want)
	}
	src.set(long, 2, nil, ca.Cert)
	if got, want := creds.NotAfter(), leafNotAfter(long); !got.Equal(want) {
		t.Fatalf("after a rotation NotAfter = %v, want the new certificate's %v", got, want)
	}
	src.set(nil, 3, errors.New("agent gone"))
	if got, want := creds.NotAfter(), leafNotAfter(long); !got.Equal(want) {
		t.Fatalf("while the source fails NotAfter = %v, want the last certificate's %v", got, want)
	}
}
