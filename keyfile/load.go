package keyfile

import (
	"crypto/ed25519"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// LoadPrivate reads and parses the private key file at path (see
// [ParsePrivate]). Before reading it refuses a symbolic link ([ErrSymlink]),
// anything but a regular file ([ErrNotRegularFile]), a file whose mode grants
// any access to group or others ([ErrKeyPermissions]) and a file larger than
// [MaxPrivateKeySize] ([ErrKeyTooLarge]).
func LoadPrivate(path string) (ed25519.PrivateKey, error) {
	data, err := readKeyFile(path, MaxPrivateKeySize, true)
	if err != nil {
		return nil, fmt.Errorf("keyfile: load private key %s: %w", path, err)
	}
	priv, err := parsePrivate(data)
	if err != nil {
		return nil, fmt.Errorf("keyfile: load private key %s: %w", path, err)
	}
	return priv, nil
}

// LoadPublic reads and parses the public key file at path, which must hold
// exactly one ssh-ed25519 authorized_keys line (see [ParsePublic]). Symbolic
// links are followed; the file itself must be a regular file no larger than
// [MaxPublicKeySize].
func LoadPublic(path string) (ed25519.PublicKey, error) {
	data, err := readKeyFile(path, MaxPublicKeySize, false)
	if err != nil {
		return nil, fmt.Errorf("keyfile: load public key %s: %w", path, err)
	}
	pub, _, err := parsePublic(data)
	if err != nil {
		return nil, fmt.Errorf("keyfile: load public key %s: %w", path, err)
	}
	return pub, nil
}

// readKeyFile checks the path before opening it (so a FIFO or device is never
// opened) and the opened file afterwards (so a path swapped in between is
// caught), then reads at most limit bytes.
func readKeyFile(path string, limit int64, private bool) ([]byte, error) {
	stat := os.Stat
	if private {
		stat = os.Lstat
	}
	before, err := stat(path)
	if err != nil {
		return nil, err
	}
	if err := checkKeyFileInfo(before, limit, private); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	after, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !os.SameFile(before, after) {
		return nil, fmt.Errorf("%w: file was replaced while being opened", ErrNotRegularFile)
	}
	if err := checkKeyFileInfo(after, limit, private); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrKeyTooLarge, limit)
	}
	return data, nil
}

func checkKeyFileInfo(fi fs.FileInfo, limit int64, private bool) error {
	mode := fi.Mode()
	switch {
	case mode&fs.ModeSymlink != 0:
		return ErrSymlink
	case mode.IsDir():
		return fmt.Errorf("%w: is a directory", ErrNotRegularFile)
	case !mode.IsRegular():
		return fmt.Errorf("%w: mode %v", ErrNotRegularFile, mode)
	case private && mode.Perm()&0o077 != 0:
		return fmt.Errorf("%w: mode %#o, want 0600 or stricter (chmod 600)", ErrKeyPermissions, mode.Perm())
	case fi.Size() > limit:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLarge, fi.Size(), limit)
	}
	return nil
}
