package keyfile

import (
	"bytes"
	"errors"
	"fmt"
)

// MaxPasswordSize bounds a password file: etcd's own limit on a password
// is far below it, and a larger file is not a password.
const MaxPasswordSize = 1024

// ErrMalformedPassword means a password file is empty or holds a control
// character (a second line, a NUL) besides one trailing newline.
var ErrMalformedPassword = errors.New("malformed password file")

// LoadPassword reads a password from the file at path, for a service that
// authenticates by user name and password (an etcd cluster with auth
// enabled). The file is checked as a private key file is ([ErrSymlink],
// [ErrNotRegularFile], [ErrKeyPermissions]) and may hold at most
// [MaxPasswordSize] bytes ([ErrKeyTooLarge]); one trailing newline is
// dropped. No error quotes the file's content.
func LoadPassword(path string) (string, error) {
	data, err := readKeyFile(path, MaxPasswordSize, true)
	if err != nil {
		return "", fmt.Errorf("keyfile: load password %s: %w", path, err)
	}
	data = bytes.TrimSuffix(data, []byte("\n"))
	data = bytes.TrimSuffix(data, []byte("\r"))
	if len(data) == 0 {
		return "", fmt.Errorf("keyfile: load password %s: %w: empty", path, ErrMalformedPassword)
	}
	for i, c := range data {
		if c < 0x20 || c == 0x7f {
			return "", fmt.Errorf("keyfile: load password %s: %w: control character at byte %d", path, ErrMalformedPassword, i)
		}
	}
	return string(data), nil
}
