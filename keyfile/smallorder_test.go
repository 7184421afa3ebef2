package keyfile_test

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/kvfence/kvfence/keyfile"
)

// Ensure that a public key of small order is refused by ParsePublic and
// LoadPublic, for every use: under the identity point R = identity, S = 0
// verifies for every message, so a receiver, witness or chain "key" of
// that kind lets anyone sign.
func TestPublicSmallOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  ed25519.PublicKey
	}{
		{"identity", append(ed25519.PublicKey{1}, make([]byte, 31)...)},
		{"order 4", make(ed25519.PublicKey, 32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sshPub, err := ssh.NewPublicKey(tc.key)
			if err != nil {
				t.Fatal(err)
			}
			line := ssh.MarshalAuthorizedKey(sshPub)
			if _, err := keyfile.ParsePublic(line); !errors.Is(err, keyfile.ErrSmallOrderKey) || !errors.Is(err, keyfile.ErrMalformedKey) {
				t.Errorf("ParsePublic: %v, want ErrSmallOrderKey and ErrMalformedKey", err)
			}
			path := filepath.Join(t.TempDir(), "weak.pub")
			if err := os.WriteFile(path, line, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := keyfile.LoadPublic(path); !errors.Is(err, keyfile.ErrSmallOrderKey) {
				t.Errorf("LoadPublic: %v, want ErrSmallOrderKey", err)
			}
		})
	}
}
