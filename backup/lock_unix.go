//go:build unix

package backup

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// refuseInUse refuses to replace path while a process holds its bbolt lock
// (a running receiver, or a command reading it): the process would go on
// with the file that the rename unlinks, and its later writes would be
// lost with it.
func refuseInUse(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return fmt.Errorf("%w: %s is open in another process (a running receiver?): stop it first", ErrInUse, path)
	}
	if err != nil {
		return fmt.Errorf("backup: locking %s: %w", path, err)
	}
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
