package keyfile

import (
	"bytes"
	"crypto/ed25519"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kvfence/kvfence/internal/dirsync"
	"golang.org/x/crypto/ssh"
)

const (
	// MaxPrivateKeySize bounds a private key file; an OpenSSH Ed25519 key is
	// about 400 bytes, so anything near this limit is not one.
	MaxPrivateKeySize = 16 << 10

	// MaxPublicKeySize bounds a public key file or line; an ssh-ed25519 line
	// is about 80 bytes plus its comment.
	MaxPublicKeySize = 4 << 10
)

// Generate returns a new Ed25519 key pair whose seed is read from rand.
// A nil rand means crypto/rand; tests pass a fixed reader for a fixed key.
func Generate(rand io.Reader) (ed25519.PublicKey, ed25519.PrivateKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return nil, nil, fmt.Errorf("keyfile: generate Ed25519 key: %w", err)
	}
	return pub, priv, nil
}

// MarshalPublic returns pub as one authorized_keys line,
// "ssh-ed25519 BASE64 COMMENT\n" (without " COMMENT" when comment is empty),
// which [ParsePublic] accepts.
func MarshalPublic(pub ed25519.PublicKey, comment string) ([]byte, error) {
	line, err := marshalPublic(pub, comment)
	if err != nil {
		return nil, fmt.Errorf("keyfile: marshal public key: %w", err)
	}
	return line, nil
}

func marshalPublic(pub ed25519.PublicKey, comment string) ([]byte, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: public key is %d bytes, want %d", ErrMalformedKey, len(pub), ed25519.PublicKeySize)
	}
	if err := checkComment(comment); err != nil {
		return nil, err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, err
	}
	line := bytes.TrimSuffix(ssh.MarshalAuthorizedKey(sshPub), []byte("\n"))
	if comment != "" {
		line = append(line, ' ')
		line = append(line, comment...)
	}
	return append(line, '\n'), nil
}

// MarshalPrivate returns priv as an unencrypted OpenSSH private key
// ("-----BEGIN OPENSSH PRIVATE KEY-----"), which [ParsePrivate] and ssh-keygen
// accept. The encoding contains random check words, so two calls differ.
func MarshalPrivate(priv ed25519.PrivateKey, comment string) ([]byte, error) {
	if err := checkPrivate(priv); err != nil {
		return nil, fmt.Errorf("keyfile: marshal private key: %w", err)
	}
	if err := checkComment(comment); err != nil {
		return nil, fmt.Errorf("keyfile: marshal private key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, fmt.Errorf("keyfile: marshal private key: %w", err)
	}
	return pem.EncodeToMemory(block), nil
}

// Write stores priv at path (mode 0600) and its public key at path+".pub"
// (mode 0644), both carrying comment. It refuses to replace an existing file
// (the error wraps [io/fs.ErrExist]), syncs both files and their directory before
// returning, and removes the files it created if any step fails, so on error
// neither file it was asked to create is left behind.
func Write(path string, priv ed25519.PrivateKey, comment string) error {
	privPEM, err := MarshalPrivate(priv, comment)
	if err != nil {
		return err
	}
	pubLine, err := MarshalPublic(priv.Public().(ed25519.PublicKey), comment)
	if err != nil {
		return err
	}
	if err := writeFiles([]fileSpec{
		{path: path, mode: 0o600, data: privPEM},
		{path: path + ".pub", mode: 0o644, data: pubLine},
	}); err != nil {
		return fmt.Errorf("keyfile: write key %s: %w", path, err)
	}
	return nil
}

type fileSpec struct {
	path string
	mode os.FileMode
	data []byte
}

// writeFiles creates every file exclusively before writing any of them, so a
// name collision is found before a single key byte reaches the disk.
func writeFiles(specs []fileSpec) (err error) {
	var created []string
	var open []*os.File
	defer func() {
		for _, f := range open {
			if f != nil {
				f.Close()
			}
		}
		if err != nil {
			for _, p := range created {
				os.Remove(p)
			}
		}
	}()
	for _, s := range specs {
		f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, s.mode)
		if err != nil {
			return err
		}
		created = append(created, s.path)
		open = append(open, f)
	}
	for i, s := range specs {
		f := open[i]
		// The umask may have narrowed the mode; set it exactly.
		if err := f.Chmod(s.mode); err != nil {
			return err
		}
		if _, err := f.Write(s.data); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
	}
	for i := range open {
		f := open[i]
		open[i] = nil
		if err := f.Close(); err != nil {
			return err
		}
	}
	open = nil
	dirs := map[string]bool{}
	for _, s := range specs {
		dirs[filepath.Dir(s.path)] = true
	}
	for d := range dirs {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// syncDir makes the new directory entries durable; without it a crash can
// lose a file whose contents were synced.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // directories cannot be opened for sync there
	}
	return dirsync.Sync(dir)
}

func checkPrivate(priv ed25519.PrivateKey) error {
	if len(priv) != ed25519.PrivateKeySize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrInvalidPrivateKey, len(priv), ed25519.PrivateKeySize)
	}
	if !bytes.Equal(ed25519.NewKeyFromSeed(priv.Seed()), priv) {
		return fmt.Errorf("%w: public half does not match the seed", ErrInvalidPrivateKey)
	}
	return nil
}

// checkComment keeps a comment on one line and round-trippable through
// ParsePublic: printable characters only, and no spaces at either end.
func checkComment(c string) error {
	if c == "" {
		return nil
	}
	if !utf8.ValidString(c) {
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidComment)
	}
	for i, r := range c {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%w: non-printable character %U at byte %d", ErrInvalidComment, r, i)
		}
	}
	if strings.TrimSpace(c) != c {
		return fmt.Errorf("%w: leading or trailing space", ErrInvalidComment)
	}
	return nil
}
