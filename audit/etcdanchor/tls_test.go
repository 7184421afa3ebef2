package etcdanchor

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
)

// tlsFiles writes a CA and a client certificate with its key into dir.
func tlsFiles(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caPair, err := pki.NewCA("etcdanchor test CA", time.Hour)
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
	return ca, cert, key
}

func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := tlsFiles(t, dir)
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
