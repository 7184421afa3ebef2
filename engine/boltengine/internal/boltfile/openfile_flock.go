//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package boltfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	bolterrors "go.etcd.io/bbolt/errors"
)

// flockRetry is how often a busy lock is tried again, as bbolt does.
const flockRetry = 50 * time.Millisecond

// CheckedOpenFile returns bbolt's Options.OpenFile for the database file.
// It never creates the file. It takes the lock bbolt is about to take (an
// exclusive one unless the file is opened read-only) on the new
// descriptor, and with the lock held, so that no writer is changing the
// file, checks its pages (check) before bbolt reads any of them; a file
// check refuses is badFormat. bbolt's own lock call on the same descriptor
// then succeeds at once. A lock not obtained within timeout is bbolt's
// ErrTimeout, as from bbolt.
func CheckedOpenFile(timeout time.Duration, check func(r io.ReaderAt, size int64) error, badFormat error) func(string, int, os.FileMode) (*os.File, error) {
	return func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag&^os.O_CREATE, perm)
		if err != nil {
			return nil, err
		}
		how := syscall.LOCK_SH
		if flag&(os.O_WRONLY|os.O_RDWR) != 0 {
			how = syscall.LOCK_EX
		}
		if err := flock(f, how, timeout); err != nil {
			f.Close()
			return nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close() // releases the lock
			return nil, err
		}
		if err := check(f, fi.Size()); err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: %s: %w", badFormat, name, err)
		}
		return f, nil
	}
}

// flock is bbolt's lock loop (bolt_unix.go), so that waiting for the lock
// behaves exactly as it would inside bbolt.Open.
func flock(f *os.File, how int, timeout time.Duration) error {
	start := time.Now()
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case !errors.Is(err, syscall.EWOULDBLOCK):
			return err
		case timeout != 0 && time.Since(start) > timeout-flockRetry:
			return bolterrors.ErrTimeout
		}
		time.Sleep(flockRetry)
	}
}

// ReleaseFile unlocks and closes a database file that bbolt opened but did
// not return, as when it panicked inside Open. Closing alone would not
// release the lock: bbolt's memory map keeps the open file alive.
func ReleaseFile(f *os.File) {
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	f.Close()
}
