package keyfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Ensure that a password file is read without its trailing newline, and
// that every file that is not a private, single-line, bounded password is
// refused with an error that does not quote it.
func TestLoadPassword(t *testing.T) {
	const secret = "s3cret-Pa55"
	tests := []struct {
		name    string
		content string
		mode    os.FileMode
		want    string
		wantErr error
	}{
		{"plain", secret, 0o600, secret, nil},
		{"trailing newline", secret + "\n", 0o600, secret, nil},
		{"trailing CRLF", secret + "\r\n", 0o400, secret, nil},
		{"spaces kept", " " + secret + " ", 0o600, " " + secret + " ", nil},
		{"group readable", secret, 0o640, "", ErrKeyPermissions},
		{"world readable", secret, 0o604, "", ErrKeyPermissions},
		{"empty", "", 0o600, "", ErrMalformedPassword},
		{"newline only", "\n", 0o600, "", ErrMalformedPassword},
		{"two lines", secret + "\n" + secret + "\n", 0o600, "", ErrMalformedPassword},
		{"NUL", secret + "\x00", 0o600, "", ErrMalformedPassword},
		{"oversized", strings.Repeat("p", MaxPasswordSize+1), 0o600, "", ErrKeyTooLarge},
		{"at the limit", strings.Repeat("p", MaxPasswordSize), 0o600, strings.Repeat("p", MaxPasswordSize), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "password")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			got, err := LoadPassword(path)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("LoadPassword: error %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("LoadPassword = %q, want %q", got, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Fatalf("the error quotes the password: %v", err)
			}
		})
	}
}

// Ensure that a symbolic link, a directory and a missing file are refused.
func TestLoadPassword_NotAFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "password")
	if err := os.WriteFile(target, []byte("pw"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		want error
	}{{link, ErrSymlink}, {dir, ErrNotRegularFile}, {filepath.Join(dir, "missing"), os.ErrNotExist}} {
		if _, err := LoadPassword(tt.path); !errors.Is(err, tt.want) {
			t.Errorf("LoadPassword(%s): %v, want %v", tt.path, err, tt.want)
		}
	}
}
