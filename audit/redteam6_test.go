//go:build linux

package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Guard: a Store that opened the anchor file and then waited for its lock
// while an operator replaced the file by rename (an old copy put back,
// a new inode) must not write into the file it opened, which the path no
// longer names, nor into the new one; and the next Store that names the
// anchor this process last wrote must see the old copy and conflict,
// whatever the per-path slot memo remembers.
func TestRedteam6_StoreRefusesFileReplacedWhileWaitingForLock(t *testing.T) {
	a, b, d := signedAt(t, 2), signedAt(t, 3), signedAt(t, 9)
	dir := t.TempDir()
	fa := FileAnchor{Path: filepath.Join(dir, "anchor")}
	if err := fa.Store(nil, a); err != nil {
		t.Fatal(err)
	}
	afterA := readAnchor(t, fa)
	if err := fa.Store(&a, b); err != nil {
		t.Fatal(err)
	}

	// Hold the lock on the current file, as another writer would.
	held, err := os.OpenFile(fa.Path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fa.Store(&b, d) }()
	// Let the Store open the file and block on the lock.
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Store did not wait for the lock: %v", err)
	default:
	}
	if err := replaceFile(dir, fa.Path, afterA); err != nil {
		t.Fatal(err)
	}
	oldInode := readAll(t, held)
	syscall.Flock(int(held.Fd()), syscall.LOCK_UN)
	err = <-done
	if err == nil {
		t.Fatal("Store wrote after the file was replaced while it waited for the lock")
	}
	if !bytes.Equal(readAnchor(t, fa), afterA) {
		t.Fatal("the refused Store changed the file now at the path")
	}
	if !bytes.Equal(readAll(t, held), oldInode) {
		t.Fatal("the refused Store wrote into the replaced file")
	}
	// The path holds the old copy: a Store from b conflicts, one from a
	// succeeds, and Load reads what the file holds.
	if err := fa.Store(&b, d); !errors.Is(err, ErrWriteConflict) {
		t.Fatalf("Store from b over the put-back copy: %v, want ErrWriteConflict", err)
	}
	if got, err := fa.Load(); err != nil || got != a {
		t.Fatalf("Load = seq %d, %v; want seq %d", got.Seq, err, a.Seq)
	}
	if err := fa.Store(&a, d); err != nil {
		t.Fatalf("Store from the put-back anchor: %v", err)
	}
}

func readAll(t *testing.T, f *os.File) []byte {
	t.Helper()
	buf := make([]byte, AnchorFileSize+1)
	n, err := f.ReadAt(buf, 0)
	if err != nil && n != AnchorFileSize {
		t.Fatal(err)
	}
	return buf[:n]
}
