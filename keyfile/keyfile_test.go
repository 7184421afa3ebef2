package keyfile_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/kvfence/kvfence/keyfile"
)

// seedReader returns a reader that yields a fixed seed, for a fixed key.
func seedReader(b byte) *bytes.Reader {
	return bytes.NewReader(bytes.Repeat([]byte{b}, ed25519.SeedSize))
}

func mustGenerate(t testing.TB, b byte) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := keyfile.Generate(seedReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// writeFile writes data with exactly mode, whatever the umask.
func writeFile(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func mustMarshalPrivate(t testing.TB, priv ed25519.PrivateKey, comment string) []byte {
	t.Helper()
	b, err := keyfile.MarshalPrivate(priv, comment)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustMarshalPublic(t testing.TB, pub ed25519.PublicKey, comment string) []byte {
	t.Helper()
	b, err := keyfile.MarshalPublic(pub, comment)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Foreign keys are slow to generate (RSA), so they are made once.
var foreign = sync.OnceValues(func() (map[string][]byte, error) {
	out := map[string][]byte{}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024) // the type matters, not the strength
	if err != nil {
		return nil, err
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	for name, k := range map[string]any{"rsa": rsaKey, "ecdsa": ecKey} {
		block, err := ssh.MarshalPrivateKey(k, "foreign")
		if err != nil {
			return nil, err
		}
		out[name+"-openssh"] = pem.EncodeToMemory(block)
		signer, err := ssh.NewSignerFromKey(k)
		if err != nil {
			return nil, err
		}
		out[name+"-pub"] = ssh.MarshalAuthorizedKey(signer.PublicKey())
	}
	// Encryption runs bcrypt's KDF, which is slow under -race; one foreign
	// encrypted key is enough.
	block, err := ssh.MarshalPrivateKeyWithPassphrase(rsaKey, "foreign", []byte("secret"))
	if err != nil {
		return nil, err
	}
	out["rsa-openssh-encrypted"] = pem.EncodeToMemory(block)
	out["rsa-pkcs1"] = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)})
	pkcs8, err := x509.MarshalPKCS8PrivateKey(edKey)
	if err != nil {
		return nil, err
	}
	out["ed25519-pkcs8"] = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
	block, err = ssh.MarshalPrivateKeyWithPassphrase(edKey, "encrypted", []byte("secret"))
	if err != nil {
		return nil, err
	}
	out["ed25519-openssh-encrypted"] = pem.EncodeToMemory(block)
	return out, nil
})

func foreignKey(t testing.TB, name string) []byte {
	t.Helper()
	m, err := foreign()
	if err != nil {
		t.Fatal(err)
	}
	b, ok := m[name]
	if !ok {
		t.Fatalf("no foreign key %q", name)
	}
	return b
}

// Ensure that a written key loads back as the same key pair, with the
// documented modes and public key line.
func TestWrite_Roundtrip(t *testing.T) {
	pub, priv := mustGenerate(t, 7)
	path := filepath.Join(t.TempDir(), "receiver.key")
	if err := keyfile.Write(path, priv, "receiver@test"); err != nil {
		t.Fatal(err)
	}

	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{path, 0o600}, {path + ".pub", 0o644}} {
		fi, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != f.mode {
			t.Errorf("%s: mode %#o, want %#o", f.path, got, f.mode)
		}
	}

	gotPriv, err := keyfile.LoadPrivate(path)
	if err != nil {
		t.Fatal(err)
	}
	if !priv.Equal(gotPriv) {
		t.Error("LoadPrivate returned a different key")
	}
	gotPub, err := keyfile.LoadPublic(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(gotPub) {
		t.Error("LoadPublic returned a different key")
	}

	line, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if want := mustMarshalPublic(t, pub, "receiver@test"); !bytes.Equal(line, want) {
		t.Errorf(".pub = %q, want %q", line, want)
	}
	if !bytes.HasPrefix(line, []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI")) || !bytes.HasSuffix(line, []byte(" receiver@test\n")) {
		t.Errorf(".pub is not an authorized_keys line: %q", line)
	}
}

// Ensure that Generate is deterministic in its randomness and fails when the
// randomness does.
func TestGenerate(t *testing.T) {
	pub1, priv1 := mustGenerate(t, 1)
	pub2, priv2 := mustGenerate(t, 1)
	if !pub1.Equal(pub2) || !priv1.Equal(priv2) {
		t.Error("same seed gave different keys")
	}
	pub3, _ := mustGenerate(t, 2)
	if pub1.Equal(pub3) {
		t.Error("different seeds gave the same key")
	}
	if _, _, err := keyfile.Generate(bytes.NewReader(make([]byte, 5))); err == nil {
		t.Error("Generate with short randomness succeeded")
	}
	if _, _, err := keyfile.Generate(nil); err != nil {
		t.Errorf("Generate(nil): %v", err)
	}
}

// Ensure that Write never replaces an existing file and leaves nothing behind
// when it fails.
func TestWrite_Refusals(t *testing.T) {
	_, priv := mustGenerate(t, 3)
	inconsistent := append(ed25519.PrivateKey(nil), priv...)
	inconsistent[40] ^= 1

	tests := []struct {
		name    string
		setup   func(t *testing.T, path string) // creates pre-existing files
		priv    ed25519.PrivateKey
		comment string
		wantErr error
	}{
		{name: "private exists", setup: func(t *testing.T, p string) { writeFile(t, p, []byte("old"), 0o600) }, priv: priv, wantErr: fs.ErrExist},
		{name: "public exists", setup: func(t *testing.T, p string) { writeFile(t, p+".pub", []byte("old"), 0o644) }, priv: priv, wantErr: fs.ErrExist},
		{name: "private is a directory", setup: func(t *testing.T, p string) { os.Mkdir(p, 0o700) }, priv: priv, wantErr: fs.ErrExist},
		{name: "missing directory", setup: func(t *testing.T, p string) { os.Remove(filepath.Dir(p)) }, priv: priv, wantErr: fs.ErrNotExist},
		{name: "newline in comment", priv: priv, comment: "a\nb", wantErr: keyfile.ErrInvalidComment},
		{name: "trailing space in comment", priv: priv, comment: "a ", wantErr: keyfile.ErrInvalidComment},
		{name: "invalid UTF-8 comment", priv: priv, comment: "a\xffb", wantErr: keyfile.ErrInvalidComment},
		{name: "short private key", priv: priv[:32], wantErr: keyfile.ErrInvalidPrivateKey},
		{name: "nil private key", priv: nil, wantErr: keyfile.ErrInvalidPrivateKey},
		{name: "public half does not match seed", priv: inconsistent, wantErr: keyfile.ErrInvalidPrivateKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "keys")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "k")
			if tt.setup != nil {
				tt.setup(t, path)
			}
			before := snapshot(t, filepath.Dir(dir))

			err := keyfile.Write(path, tt.priv, tt.comment)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Write: err = %v, want %v", err, tt.wantErr)
			}
			if after := snapshot(t, filepath.Dir(dir)); after != before {
				t.Errorf("failed Write changed the directory:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// snapshot describes every file under dir with its mode and contents.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b.WriteString(p + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.WriteString(" " + string(data))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Ensure that LoadPrivate accepts only a private, regular, well-formed,
// unencrypted Ed25519 key file.
func TestLoadPrivate(t *testing.T) {
	_, priv := mustGenerate(t, 4)
	pub2, priv2 := mustGenerate(t, 5)
	good := mustMarshalPrivate(t, priv, "test")

	tests := []struct {
		name    string
		setup   func(t *testing.T, path string)
		wantErr error // nil: expect priv
	}{
		{"mode 0600", func(t *testing.T, p string) { writeFile(t, p, good, 0o600) }, nil},
		{"mode 0400", func(t *testing.T, p string) { writeFile(t, p, good, 0o400) }, nil},
		{"mode 0700", func(t *testing.T, p string) { writeFile(t, p, good, 0o700) }, nil},
		{"CRLF line endings", func(t *testing.T, p string) {
			writeFile(t, p, bytes.ReplaceAll(good, []byte("\n"), []byte("\r\n")), 0o600)
		}, nil},
		{"mode 0640", func(t *testing.T, p string) { writeFile(t, p, good, 0o640) }, keyfile.ErrKeyPermissions},
		{"mode 0604", func(t *testing.T, p string) { writeFile(t, p, good, 0o604) }, keyfile.ErrKeyPermissions},
		{"mode 0644", func(t *testing.T, p string) { writeFile(t, p, good, 0o644) }, keyfile.ErrKeyPermissions},
		{"mode 0620", func(t *testing.T, p string) { writeFile(t, p, good, 0o620) }, keyfile.ErrKeyPermissions},
		{"mode 0602", func(t *testing.T, p string) { writeFile(t, p, good, 0o602) }, keyfile.ErrKeyPermissions},
		{"mode 0610", func(t *testing.T, p string) { writeFile(t, p, good, 0o610) }, keyfile.ErrKeyPermissions},
		{"mode 0601", func(t *testing.T, p string) { writeFile(t, p, good, 0o601) }, keyfile.ErrKeyPermissions},
		{"symlink to a good key", func(t *testing.T, p string) {
			writeFile(t, p+".real", good, 0o600)
			if err := os.Symlink(p+".real", p); err != nil {
				t.Fatal(err)
			}
		}, keyfile.ErrSymlink},
		{"directory", func(t *testing.T, p string) { os.Mkdir(p, 0o700) }, keyfile.ErrNotRegularFile},
		{"missing", func(t *testing.T, p string) {}, fs.ErrNotExist},
		{"empty", func(t *testing.T, p string) { writeFile(t, p, nil, 0o600) }, keyfile.ErrMalformedKey},
		{"truncated", func(t *testing.T, p string) { writeFile(t, p, good[:len(good)/2], 0o600) }, keyfile.ErrMalformedKey},
		{"line missing", func(t *testing.T, p string) {
			lines := bytes.SplitAfter(good, []byte("\n"))
			writeFile(t, p, bytes.Join(append(lines[:2:2], lines[3:]...), nil), 0o600)
		}, keyfile.ErrMalformedKey},
		{"garbage", func(t *testing.T, p string) { writeFile(t, p, []byte("not a key\n"), 0o600) }, keyfile.ErrMalformedKey},
		{"text before the key", func(t *testing.T, p string) { writeFile(t, p, append([]byte("hello\n"), good...), 0o600) }, keyfile.ErrMalformedKey},
		{"two keys", func(t *testing.T, p string) {
			writeFile(t, p, append(append([]byte(nil), good...), mustMarshalPrivate(t, priv2, "")...), 0o600)
		}, keyfile.ErrMalformedKey},
		{"public key line", func(t *testing.T, p string) { writeFile(t, p, mustMarshalPublic(t, pub2, ""), 0o600) }, keyfile.ErrMalformedKey},
		{"too large", func(t *testing.T, p string) {
			writeFile(t, p, append(append([]byte(nil), good...), bytes.Repeat([]byte("\n"), keyfile.MaxPrivateKeySize)...), 0o600)
		}, keyfile.ErrKeyTooLarge},
		{"encrypted ed25519", func(t *testing.T, p string) { writeFile(t, p, foreignKey(t, "ed25519-openssh-encrypted"), 0o600) }, keyfile.ErrPassphraseProtected},
		{"rsa openssh", func(t *testing.T, p string) { writeFile(t, p, foreignKey(t, "rsa-openssh"), 0o600) }, keyfile.ErrUnsupportedKeyType},
		{"ecdsa openssh", func(t *testing.T, p string) { writeFile(t, p, foreignKey(t, "ecdsa-openssh"), 0o600) }, keyfile.ErrUnsupportedKeyType},
		{"encrypted rsa openssh", func(t *testing.T, p string) { writeFile(t, p, foreignKey(t, "rsa-openssh-encrypted"), 0o600) }, keyfile.ErrUnsupportedKeyType},
		{"rsa pkcs1", func(t *testing.T, p string) { writeFile(t, p, foreignKey(t, "rsa-pkcs1"), 0o600) }, keyfile.ErrUnsupportedKeyType},
		{"ed25519 pkcs8", func(t *testing.T, p string) { writeFile(t, p, foreignKey(t, "ed25519-pkcs8"), 0o600) }, keyfile.ErrUnsupportedKeyType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "key")
			tt.setup(t, path)
			got, err := keyfile.LoadPrivate(path)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("LoadPrivate: %v", err)
				}
				if !priv.Equal(got) {
					t.Fatal("LoadPrivate returned a different key")
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("LoadPrivate: err = %v, want %v", err, tt.wantErr)
			}
			if got != nil {
				t.Error("LoadPrivate returned a key with an error")
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

// Ensure that the permission error says what is wrong and how to fix it.
func TestLoadPrivate_PermissionMessage(t *testing.T) {
	_, priv := mustGenerate(t, 4)
	path := filepath.Join(t.TempDir(), "key")
	writeFile(t, path, mustMarshalPrivate(t, priv, ""), 0o640)
	_, err := keyfile.LoadPrivate(path)
	for _, want := range []string{path, "group or others", "0640", "0600"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not contain %q", err, want)
		}
	}
}

// Ensure that LoadPublic accepts exactly one ssh-ed25519 line in a regular
// file.
func TestLoadPublic(t *testing.T) {
	pub, _ := mustGenerate(t, 6)
	pub2, _ := mustGenerate(t, 7)
	good := mustMarshalPublic(t, pub, "receiver")

	tests := []struct {
		name    string
		setup   func(t *testing.T, path string)
		wantErr error
	}{
		{"ok", func(t *testing.T, p string) { writeFile(t, p, good, 0o644) }, nil},
		{"symlink followed", func(t *testing.T, p string) {
			writeFile(t, p+".real", good, 0o644)
			if err := os.Symlink(p+".real", p); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"directory", func(t *testing.T, p string) { os.Mkdir(p, 0o755) }, keyfile.ErrNotRegularFile},
		{"missing", func(t *testing.T, p string) {}, fs.ErrNotExist},
		{"empty", func(t *testing.T, p string) { writeFile(t, p, nil, 0o644) }, keyfile.ErrMalformedKey},
		{"two keys", func(t *testing.T, p string) {
			writeFile(t, p, append(append([]byte(nil), good...), mustMarshalPublic(t, pub2, "")...), 0o644)
		}, keyfile.ErrMalformedKey},
		{"rsa", func(t *testing.T, p string) { writeFile(t, p, foreignKey(t, "rsa-pub"), 0o644) }, keyfile.ErrUnsupportedKeyType},
		{"private key", func(t *testing.T, p string) {
			_, priv := mustGenerate(t, 6)
			writeFile(t, p, mustMarshalPrivate(t, priv, ""), 0o600)
		}, keyfile.ErrMalformedKey},
		{"too large", func(t *testing.T, p string) {
			writeFile(t, p, append(bytes.TrimSuffix(good, []byte("\n")), bytes.Repeat([]byte("x"), keyfile.MaxPublicKeySize)...), 0o644)
		}, keyfile.ErrKeyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "key.pub")
			tt.setup(t, path)
			got, err := keyfile.LoadPublic(path)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("LoadPublic: %v", err)
				}
				if !pub.Equal(got) {
					t.Fatal("LoadPublic returned a different key")
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("LoadPublic: err = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// Ensure that keys made by ssh-keygen load, and that ssh-keygen reads keys
// made by Write.
func TestSSHKeygenInterop(t *testing.T) {
	keygen, err := exec.LookPath("ssh-keygen")
	if err != nil {
		t.Skip("ssh-keygen not installed")
	}
	dir := t.TempDir()

	path := filepath.Join(dir, "from-ssh-keygen")
	if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", "user@host", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	priv, err := keyfile.LoadPrivate(path)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := keyfile.LoadPublic(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(priv.Public()) {
		t.Error("ssh-keygen's public key does not match its private key")
	}

	encrypted := filepath.Join(dir, "encrypted")
	if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "secret", "-f", encrypted).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	if _, err := keyfile.LoadPrivate(encrypted); !errors.Is(err, keyfile.ErrPassphraseProtected) {
		t.Errorf("encrypted ssh-keygen key: err = %v, want ErrPassphraseProtected", err)
	}

	rsaPath := filepath.Join(dir, "rsa")
	if out, err := exec.Command(keygen, "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", rsaPath).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	if _, err := keyfile.LoadPrivate(rsaPath); !errors.Is(err, keyfile.ErrUnsupportedKeyType) {
		t.Errorf("rsa private key: err = %v, want ErrUnsupportedKeyType", err)
	}
	if _, err := keyfile.LoadPublic(rsaPath + ".pub"); !errors.Is(err, keyfile.ErrUnsupportedKeyType) {
		t.Errorf("rsa public key: err = %v, want ErrUnsupportedKeyType", err)
	}

	ours := filepath.Join(dir, "ours")
	_, ourPriv := mustGenerate(t, 9)
	if err := keyfile.Write(ours, ourPriv, "kvfence"); err != nil {
		t.Fatal(err)
	}
	derived, err := exec.Command(keygen, "-y", "-f", ours).Output()
	if err != nil {
		t.Fatalf("ssh-keygen -y: %v", err)
	}
	written, err := os.ReadFile(ours + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(derived, written) {
		t.Errorf("ssh-keygen -y = %q, .pub = %q", derived, written)
	}
}
