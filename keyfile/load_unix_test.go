//go:build unix

package keyfile_test

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kvfence/kvfence/keyfile"
)

// Ensure that a named pipe is refused without being opened (opening one
// would block until a writer appears).
func TestLoad_FIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := keyfile.LoadPrivate(path); !errors.Is(err, keyfile.ErrNotRegularFile) {
		t.Errorf("LoadPrivate: err = %v, want ErrNotRegularFile", err)
	}
	if _, err := keyfile.LoadPublic(path); !errors.Is(err, keyfile.ErrNotRegularFile) {
		t.Errorf("LoadPublic: err = %v, want ErrNotRegularFile", err)
	}
}
