package kvfence

import (
	"errors"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/kvfence/kvfence/audit"
)

// Ensure that a fault while the hashing goroutine reads a record's old
// bytes (a damaged page of the database file, read in place) becomes
// ErrBadFormat from finish, and so a transaction that does not commit,
// instead of a crash of the process.
func TestStateHasher_FaultIsAnError(t *testing.T) {
	page, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	// A slice over memory that is gone: reading it faults.
	gone := unsafe.Slice((*byte)(unsafe.Pointer(&page[0])), len(page))
	if err := syscall.Munmap(page); err != nil {
		t.Fatal(err)
	}
	var h stateHasher
	h.reset()
	h.offer(stateChange{bucket: string(bucketTargets), key: []byte("t"), old: gone, raw: []byte("new")})
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the hashing goroutine did not end after the fault")
	}
	var s audit.StateHash
	if err := h.finish(&s); !errors.Is(err, ErrBadFormat) {
		t.Fatalf("finish after a fault: %v, want ErrBadFormat", err)
	}
}
