package client_test

import (
	"crypto/tls"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/pki"
)

// tlsFiles writes a CA, a client certificate and its key under dir and
// returns their paths.
func tlsFiles(t *testing.T, dir string) (cert, key, ca string) {
	t.Helper()
	caPair, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pki.Issue(caPair, pki.Options{Name: "worker", URIs: []string{"spiffe://example.org/agent/w"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := p.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	cert, key, ca = filepath.Join(dir, "w.crt"), filepath.Join(dir, "w.key"), filepath.Join(dir, "ca.crt")
	for path, b := range map[string][]byte{cert: p.CertPEM(), key: keyPEM, ca: caPair.CertPEM()} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cert, key, ca
}

// Ensure that LoadTLS builds a verifying TLS 1.3 configuration from good
// files and refuses, with a precise error, a missing or unparsable file or
// no CA.
func TestLoadTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key, ca := tlsFiles(t, dir)
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	garbage := write("garbage.pem", "not PEM at all\n")
	keyAsCA := key // a PRIVATE KEY block where certificates belong
	badBlock := write("bad.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	caThenKey := filepath.Join(dir, "mixed.pem")
	caPEM, _ := os.ReadFile(ca)
	keyPEM, _ := os.ReadFile(key)
	if err := os.WriteFile(caThenKey, append(caPEM, keyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name          string
		cert, key, ca string
		want          error
	}{
		{"no CA", cert, key, "", client.ErrNoCA},
		{"no certificate", "", key, ca, client.ErrNoCertificate},
		{"no key", cert, "", ca, client.ErrNoCertificate},
		{"missing certificate", missing, key, ca, fs.ErrNotExist},
		{"missing key", cert, missing, ca, fs.ErrNotExist},
		{"missing CA", cert, key, missing, fs.ErrNotExist},
		{"unparsable certificate", garbage, key, ca, client.ErrTLSFile},
		{"key of another certificate", ca, key, ca, client.ErrTLSFile},
		{"unparsable CA", cert, key, garbage, client.ErrTLSFile},
		{"key in the CA file", cert, key, keyAsCA, client.ErrTLSFile},
		{"damaged CA block", cert, key, badBlock, client.ErrTLSFile},
		{"CA bundle with a key in it", cert, key, caThenKey, client.ErrTLSFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := client.LoadTLS(tt.cert, tt.key, tt.ca)
			if !errors.Is(err, tt.want) || cfg != nil {
				t.Fatalf("LoadTLS = %v, %v; want %v", cfg, err, tt.want)
			}
		})
	}
	cfg, err := client.LoadTLS(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS13 || cfg.InsecureSkipVerify || cfg.RootCAs == nil || len(cfg.Certificates) != 1 {
		t.Fatalf("LoadTLS config: min %x, insecure %v, roots %v, %d certificates",
			cfg.MinVersion, cfg.InsecureSkipVerify, cfg.RootCAs, len(cfg.Certificates))
	}
}
