package client_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/pki"
)

// Ensure that a CA bundle with a damaged certificate block is refused,
// not loaded with the certificates around it: pem.Decode skips a block
// whose END line is damaged, so that counting the blocks it returns is
// not enough.
func TestRedteam20_CABundleDamagedBlock(t *testing.T) {
	dir := t.TempDir()
	cert, key, ca := tlsFiles(t, dir)
	good, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("other CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Replace(other.CertPEM(), []byte("-----END CERTIFICATE-----"), []byte("-----END CERTIFICAT-----"), 1)
	for name, bundle := range map[string][]byte{
		"damaged last":  append(append([]byte{}, good...), damaged...),
		"damaged first": append(append([]byte{}, damaged...), good...),
		"header only":   append(append([]byte{}, good...), []byte("-----BEGIN CERTIFICATE-----\n")...),
	} {
		path := filepath.Join(dir, "bundle.crt")
		if err := os.WriteFile(path, bundle, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := client.LoadTLS(cert, key, path); !errors.Is(err, client.ErrTLSFile) {
			t.Errorf("%s: LoadTLS = %v, want ErrTLSFile", name, err)
		}
	}
	// Text between certificates, as some bundles carry, is still read.
	commented := append(append([]byte("# test CA\n"), good...), []byte("# end\n")...)
	path := filepath.Join(dir, "commented.crt")
	if err := os.WriteFile(path, commented, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client.LoadTLS(cert, key, path); err != nil {
		t.Errorf("commented bundle: %v", err)
	}
}
