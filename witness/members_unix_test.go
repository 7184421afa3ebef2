//go:build unix

package witness_test

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfence/kvfence/witness"
)

// Ensure that a CA file that is a FIFO is refused without being opened:
// opening a FIFO with no writer would block the command for ever.
func TestLoadMembersCAFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "ca.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	pub := writePub(t, dir, "w1", key(1))
	done := make(chan error, 1)
	go func() {
		_, err := witness.LoadMembers(witness.MemberSpec{URLs: map[string]string{"w1.test": "https://127.0.0.1:1"},
			PubFiles: map[string]string{"w1.test": pub}, CAFile: fifo})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, witness.ErrBadMemberSpec) || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("LoadMembers with a FIFO CA: %v, want not a regular file", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("LoadMembers blocked opening a FIFO CA file")
	}
}
