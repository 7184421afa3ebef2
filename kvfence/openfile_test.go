//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package kvfence

import (
	"bytes"
	"errors"
	"github.com/kvfence/kvfence/engine/boltengine"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Ensure that when bbolt panics inside Open (here on a freelist page of
// the wrong type, which the page check would have refused first), the
// panic is an ErrBadFormat error and the file's lock is released, not held
// until the process exits.
func TestOpenBolt_PanicReleasesLock(t *testing.T) {
	b := newCorruptBase(t)
	c := &pageChecker{r: bytes.NewReader(b.data), size: int64(len(b.data))}
	if err := c.meta(); err != nil {
		t.Fatal(err)
	}
	data := append([]byte(nil), b.data...)
	ne.PutUint16(data[int64(c.m.freelist)*c.pageSize+8:], boltLeafPage)
	path := filepath.Join(t.TempDir(), "panics.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkPages(bytes.NewReader(data), int64(len(data))); err == nil {
		t.Fatal("the page check accepts a freelist page of the wrong type")
	}
	unchecked := func(name string, flag int, perm os.FileMode) (*os.File, error) {
		return os.OpenFile(name, flag&^os.O_CREATE, perm)
	}
	_, err := boltengine.OpenFile(path, boltengine.FileOptions{Errors: fileErrors, Timeout: time.Second, OpenFile: unchecked})
	if !errors.Is(err, ErrBadFormat) {
		t.Fatalf("opening a file bbolt panics on: %v, want ErrBadFormat", err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("the file is still locked after bbolt panicked in Open: %v", err)
	}
}

// Ensure that the page check runs under the lock: while another handle
// holds the database, Open waits for the lock and reports ErrStorageBusy,
// without reading (and so without judging) pages that a writer may be
// changing.
func TestOpen_PageCheckWaitsForLock(t *testing.T) {
	b := newCorruptBase(t)
	path := filepath.Join(t.TempDir(), "locked.db")
	if err := os.WriteFile(path, b.data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// A file the check would refuse: the error must still be busy.
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, 4096), 2*4096); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		start := time.Now()
		_, err := Open(path, &Options{ReadOnly: ro, Key: testKey, LockTimeout: 120 * time.Millisecond})
		if !errors.Is(err, ErrStorageBusy) {
			t.Fatalf("Open(read-only %v) of a locked file: %v, want ErrStorageBusy", ro, err)
		}
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Fatalf("Open(read-only %v) gave up after %v without waiting", ro, d)
		}
	}
}
