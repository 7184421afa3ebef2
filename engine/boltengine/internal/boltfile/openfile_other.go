//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package boltfile

import (
	"io"
	"os"
	"time"
)

// CheckedOpenFile returns bbolt's Options.OpenFile for the database file.
// It never creates the file. On this platform the pages are not checked
// before bbolt reads them: without flock, the check cannot be made while
// holding the lock that bbolt takes next, and a check without it could
// race a writer and refuse a healthy file.
func CheckedOpenFile(time.Duration, func(io.ReaderAt, int64) error, error) func(string, int, os.FileMode) (*os.File, error) {
	return func(name string, flag int, perm os.FileMode) (*os.File, error) {
		return os.OpenFile(name, flag&^os.O_CREATE, perm)
	}
}

// ReleaseFile closes a database file that bbolt opened but did not return,
// as when it panicked inside Open.
func ReleaseFile(f *os.File) { f.Close() }
