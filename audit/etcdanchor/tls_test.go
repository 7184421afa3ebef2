package etcdanchor

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/etcdproc"
	"github.com/kvfence/kvfence/internal/pki"
)

// tlsFiles writes a CA and a client certificate with its key into dir and
// returns the CA too, to issue more.
func tlsFiles(t *testing.T, dir string) (caPair pki.Pair, ca, cert, key string) {
	t.Helper()
	var err error
	caPair, err = pki.NewCA("etcdanchor test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	client, err := pki.Issue(caPair, pki.Options{Name: "receiver-1", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := client.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	for _, f := range []struct {
		path string
		data []byte
	}{{ca, caPair.CertPEM()}, {cert, client.CertPEM()}, {key, keyPEM}} {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caPair, ca, cert, key
}

func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	_, ca, cert, key := tlsFiles(t, dir)
	cfg, err := (&Options{CertFile: cert, KeyFile: key, CAFile: ca}).tlsConfig()
	if err != nil || cfg == nil || len(cfg.Certificates) != 1 || cfg.RootCAs == nil {
		t.Fatalf("tlsConfig: %+v, %v", cfg, err)
	}
	if cfg, err := (&Options{CAFile: ca}).tlsConfig(); err != nil || cfg == nil || cfg.RootCAs == nil {
		t.Fatalf("tlsConfig with a CA only: %+v, %v", cfg, err)
	}
	if cfg, err := (&Options{}).tlsConfig(); err != nil || cfg != nil {
		t.Fatalf("tlsConfig without files: %+v, %v", cfg, err)
	}

	readable := filepath.Join(dir, "readable-key.pem")
	data, _ := os.ReadFile(key)
	if err := os.WriteFile(readable, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(readable, 0o644); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"certificate without key", Options{CertFile: cert, CAFile: ca}},
		{"key without certificate", Options{KeyFile: key, CAFile: ca}},
		{"key readable by others", Options{CertFile: cert, KeyFile: readable, CAFile: ca}},
		{"key and certificate swapped", Options{CertFile: key, KeyFile: cert, CAFile: ca}},
		{"CA file without a certificate", Options{CAFile: notPEM}},
		{"missing CA file", Options{CAFile: filepath.Join(dir, "missing.pem")}},
		{"CA file is a directory", Options{CAFile: dir}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.o.tlsConfig(); !errors.Is(err, ErrBadTLS) {
				t.Fatalf("tlsConfig: %v, want ErrBadTLS", err)
			}
			// Open refuses them too, before any connection.
			a := Address{Endpoints: []string{"127.0.0.1:1"}, Key: "/k"}
			if s, err := Open(a, &tc.o); !errors.Is(err, ErrBadTLS) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("Open: %v, want ErrBadTLS", err)
			}
		})
	}
}

// writePair writes p's certificate and key into dir under name.
func writePair(t *testing.T, dir, name string, p pki.Pair) (cert, key string) {
	t.Helper()
	keyPEM, err := p.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(cert, p.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// Ensure that the TLS options reach a real member that serves clients over
// TLS only and requires client certificates: with them the anchor is
// written and read; without a client certificate, without TLS, or against
// another CA, every request fails, and never as a missing anchor.
func TestTLS_RealMember(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs in the full test command (go test without -short)")
	}
	dir := t.TempDir()
	caPair, ca, cert, key := tlsFiles(t, dir)
	server, err := pki.Issue(caPair, pki.Options{Name: "etcd", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	serverCert, serverKey := writePair(t, dir, "server", server)
	_, otherCA, _, _ := tlsFiles(t, t.TempDir())

	c := etcdproc.StartWith(t, &etcdproc.Options{Members: 1,
		ClientTLS: &etcdproc.TLSFiles{CertFile: serverCert, KeyFile: serverKey, CAFile: ca}})
	a := Address{Endpoints: c.Endpoints(), Key: "/kvfence/anchor"}
	open := func(o Options) *Store {
		t.Helper()
		o.Timeout, o.DialTimeout, o.Attempts = time.Second, time.Second, 1
		s, err := Open(a, &o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := open(Options{CertFile: cert, KeyFile: key, CAFile: ca})
	if _, err := s.Load(); !errors.Is(err, audit.ErrAnchorMissing) {
		t.Fatalf("Load over TLS before any write: %v, want ErrAnchorMissing", err)
	}
	if err := s.Store(nil, at(t, 1)); err != nil {
		t.Fatalf("Store over TLS: %v", err)
	}
	if got, err := s.Load(); err != nil || got != at(t, 1) {
		t.Fatalf("Load over TLS = seq %d, %v", got.Seq, err)
	}
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"no client certificate", Options{CAFile: ca}},
		{"plain text", Options{}},
		{"another CA", Options{CertFile: cert, KeyFile: key, CAFile: otherCA}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(tc.o)
			_, err := s.Load()
			if err == nil || errors.Is(err, audit.ErrAnchorMissing) || errors.Is(err, audit.ErrBadAnchor) {
				t.Fatalf("Load: %v, want a connection failure", err)
			}
			err = s.Store(ptr(at(t, 1)), at(t, 2))
			if err == nil || errors.Is(err, audit.ErrWriteConflict) {
				t.Fatalf("Store: %v, want a connection failure", err)
			}
		})
	}
	if got, err := s.Load(); err != nil || got != at(t, 1) {
		t.Fatalf("after the refused clients Load = seq %d, %v; want seq 1", got.Seq, err)
	}
}
