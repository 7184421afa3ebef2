//go:build !windows

package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// setSyncFault makes every anchor fdatasync call fault first, for the
// rest of the test.
func setSyncFault(t *testing.T, fault func() error) {
	t.Helper()
	anchorSyncFault = fault
	t.Cleanup(func() { anchorSyncFault = nil })
}

// Ensure that a Store whose fdatasync fails leaves the anchor as it was:
// the checkpoint it wrote is not durable, so no Load, by this process or
// by another one sharing the file, may return it. Without putting the
// slot back, Load returned the failed write's checkpoint from the page
// cache, and a second receiver on the same store took it as cover for a
// repeated hold.
func TestFileAnchor_FailedSyncLeavesAnchor(t *testing.T) {
	a, b, c := signedAt(t, 2), signedAt(t, 3), signedAt(t, 4)
	for _, tc := range []struct {
		name string
		// before are stored first, so that the slot the failed write
		// takes is empty (one) or holds an older anchor (two).
		before []SignedCheckpoint
	}{
		{"slot empty", []SignedCheckpoint{a}},
		{"slot holds older anchor", []SignedCheckpoint{a, b}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fa := storeAll(t, tc.before...)
			cur := tc.before[len(tc.before)-1]
			want := readAnchor(t, fa)
			setSyncFault(t, func() error { return syscall.EIO })
			if err := fa.Store(&cur, c); !errors.Is(err, syscall.EIO) {
				t.Fatalf("Store with a failing fdatasync = %v, want EIO", err)
			}
			anchorSyncFault = nil
			for _, reader := range []FileAnchor{fa, {Path: fa.Path}} {
				if got, err := reader.Load(); err != nil || got != cur {
					t.Fatalf("Load after the failed write = seq %d (%v), want seq %d", got.Seq, err, cur.Seq)
				}
			}
			if got := readAnchor(t, fa); string(got) != string(want) {
				t.Fatalf("the anchor file changed after a failed write")
			}
			// The anchor goes on from where it was.
			if err := fa.Store(&cur, c); err != nil {
				t.Fatalf("Store after the failed write: %v", err)
			}
			if got, err := fa.Load(); err != nil || got != c {
				t.Fatalf("Load = seq %d (%v), want %d", got.Seq, err, c.Seq)
			}
		})
	}
}

// Ensure that a reader does not see a slot while its writer has not yet
// made it durable: Load, from another FileAnchor on the file as another
// process has, waits for the writer's fdatasync, and then returns the old
// anchor if that failed and the new one if it succeeded.
func TestFileAnchor_LoadWaitsForWriterSync(t *testing.T) {
	for _, fail := range []bool{true, false} {
		name := map[bool]string{true: "sync fails", false: "sync succeeds"}[fail]
		t.Run(name, func(t *testing.T) {
			a, b := signedAt(t, 2), signedAt(t, 3)
			fa := storeAll(t, a)
			entered, release := make(chan struct{}), make(chan error)
			var first sync.Once
			setSyncFault(t, func() error {
				// The writer's sync waits; the reader's own sync, after
				// it, passes.
				err := error(nil)
				first.Do(func() {
					close(entered)
					err = <-release
				})
				return err
			})
			stored := make(chan error, 1)
			go func() { stored <- fa.Store(&a, b) }()
			<-entered // b is written, its sync not yet done.

			type loaded struct {
				sc  SignedCheckpoint
				err error
			}
			got := make(chan loaded, 1)
			go func() {
				sc, err := FileAnchor{Path: filepath.Clean(fa.Path)}.Load()
				got <- loaded{sc, err}
			}()
			select {
			case l := <-got:
				t.Fatalf("Load returned seq %d (%v) while the write of seq %d was not yet durable", l.sc.Seq, l.err, b.Seq)
			case <-time.After(200 * time.Millisecond):
			}
			var syncErr error
			want := b
			if fail {
				syncErr, want = syscall.EIO, a
			}
			release <- syncErr
			if err := <-stored; !errors.Is(err, syncErr) && (err != nil || syncErr != nil) {
				t.Fatalf("Store = %v, want %v", err, syncErr)
			}
			l := <-got
			if l.err != nil || l.sc != want {
				t.Fatalf("Load after the sync = seq %d (%v), want seq %d", l.sc.Seq, l.err, want.Seq)
			}
		})
	}
}

// Ensure that a reader fdatasyncs only slots it does not know to be
// durable: after this process's own write and sync, and after a reader's
// sync of the same bytes, Load syncs nothing (it runs before every batch
// on a shared store), while bytes it has not seen made durable, such as a
// slot written by another process, are synced once.
func TestFileAnchor_LoadSyncsOnlyWhatItDoesNotKnow(t *testing.T) {
	a, b := signedAt(t, 2), signedAt(t, 3)
	fa := storeAll(t, a, b)
	syncs := 0
	setSyncFault(t, func() error { syncs++; return nil })
	for range 3 {
		if got, err := fa.Load(); err != nil || got != b {
			t.Fatalf("Load = seq %d (%v)", got.Seq, err)
		}
	}
	if syncs != 0 {
		t.Fatalf("%d fdatasyncs for Loads of a slot this process wrote and synced", syncs)
	}
	// The same bytes written into another file by someone else: not
	// known durable there.
	other := FileAnchor{Path: filepath.Join(t.TempDir(), "anchor")}
	if err := os.WriteFile(other.Path, readAnchor(t, fa), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got, err := other.Load(); err != nil || got != b {
			t.Fatalf("Load of the copy = seq %d (%v)", got.Seq, err)
		}
	}
	if syncs != 1 {
		t.Fatalf("%d fdatasyncs for three Loads of a file written by another, want 1", syncs)
	}
}

// Ensure that a Supersede whose copy over the superseded slot fails is
// finished by the same Supersede retried: the first write stands, so the
// retry finds the new anchor current, and without the copy the other slot
// would keep the superseded anchor, which damage to the current slot
// makes current again. The retry used to return at once because the
// anchor already equalled its target.
func TestFileAnchor_SupersedeRetryFinishesCopy(t *testing.T) {
	recs, _ := testChain(t, 10)
	at := func(seq uint64) SignedCheckpoint { return checkpointOf(t, receiverKey, testReceiver, recs, seq) }
	fa := storeAll(t, at(5), at(8))
	before := readAnchor(t, fa)
	syncs := 0
	setSyncFault(t, func() error {
		if syncs++; syncs == 2 {
			return syscall.EIO
		}
		return nil
	})
	if err := fa.Supersede(at(8), at(3)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Supersede with a failing copy = %v, want EIO", err)
	}
	// The copy's sync failed, so the disk may still hold the superseded
	// anchor in slot 1: the slot must read as it did, so that the retry
	// writes and syncs the copy instead of taking the cached one.
	if data := readAnchor(t, fa); !bytes.Equal(data[AnchorSlotSize:], before[AnchorSlotSize:]) {
		t.Fatal("slot 1 after the failed copy is not the superseded slot's bytes")
	}
	if got, err := fa.Load(); err != nil || got != at(3) {
		t.Fatalf("Load after the failed copy = seq %d, %v; want seq 3", got.Seq, err)
	}
	syncs = 0
	setSyncFault(t, func() error { syncs++; return nil })
	if err := fa.Supersede(at(8), at(3)); err != nil {
		t.Fatalf("Supersede retried: %v", err)
	}
	if syncs == 0 {
		t.Fatal("the retried Supersede synced nothing")
	}
	anchorSyncFault = nil
	data := readAnchor(t, fa)
	t3, _ := at(3).MarshalAnchor()
	if !bytes.Equal(data, append(wantSlot(3, t3), wantSlot(4, t3)...)) {
		t.Fatalf("file after the retried Supersede:\n%.300q", data)
	}
	// A retry with both slots written changes nothing.
	if err := fa.Supersede(at(8), at(3)); err != nil {
		t.Fatalf("Supersede repeated: %v", err)
	}
	if again := readAnchor(t, fa); !bytes.Equal(again, data) {
		t.Fatal("a repeated Supersede rewrote the file")
	}
}
