//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package audit

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/testbin"
)

// dieBeforeSyncEnv names the anchor file the child of
// TestRedteamU_LoadAfterWriterDiedBeforeSync writes and dies writing.
const dieBeforeSyncEnv = "KVFENCE_TEST_ANCHOR_DIE_BEFORE_SYNC"

// Ensure that a writer that dies between its slot write and its fdatasync
// (SIGKILL, the OOM killer) leaves no reader a checkpoint that nothing
// made durable. The kernel releases the dead writer's flock, so a shared
// lock no longer waits, and the slot it wrote sits in the page cache:
// Load returned it, and a second receiver on the same store would take it
// as cover, though a host crash before writeback loses it.
func TestRedteamU_LoadAfterWriterDiedBeforeSync(t *testing.T) {
	if path := os.Getenv(dieBeforeSyncEnv); path != "" {
		fa := FileAnchor{Path: path}
		cur, err := fa.Load()
		if err != nil {
			t.Fatal(err)
		}
		anchorSyncFault = func() error {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		t.Fatalf("Store returned: %v", fa.Store(&cur, signedAt(t, cur.Seq+1)))
	}
	a := signedAt(t, 2)
	fa := storeAll(t, a)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRedteamU_LoadAfterWriterDiedBeforeSync$")
	cmd.Env = testbin.ChildEnv(dieBeforeSyncEnv + "=" + fa.Path)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the writer was not killed in its sync: %v: %s", err, out)
	}
	var syncs atomic.Int32
	setSyncFault(t, func() error { syncs.Add(1); return nil })
	got, err := FileAnchor{Path: fa.Path}.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got != a && syncs.Load() == 0 {
		t.Fatalf("Load = seq %d, the checkpoint of a write whose writer died before its fdatasync, and Load did not sync it either; want seq %d", got.Seq, a.Seq)
	}
}

// Ensure that no reader sees the checkpoint of a Store that creates the
// anchor file while that Store is still under way. create links the
// complete file to its path and only then fsyncs the directory; a Load in
// between returned the checkpoint, though the directory entry that makes
// it findable after a crash was not yet durable (and stays in place if the
// directory sync fails).
func TestRedteamU_LoadDuringCreate(t *testing.T) {
	a := signedAt(t, 1)
	early := 0
	const rounds = 20
	for range rounds {
		fa := FileAnchor{Path: filepath.Join(t.TempDir(), "anchor")}
		var stored atomic.Bool
		seen := make(chan bool, 1)
		go func() {
			for !stored.Load() {
				if sc, err := fa.Load(); err == nil {
					// A Load that returned before Store did, since
					// stored is set as soon as Store returns.
					seen <- sc == a && !stored.Load()
					return
				}
			}
			seen <- false
		}()
		err := fa.Store(nil, a)
		stored.Store(true)
		if err != nil {
			t.Fatal(err)
		}
		if <-seen {
			early++
		}
	}
	if early != 0 {
		t.Fatalf("in %d of %d creations a Load returned the new anchor before its Store returned (before its directory was synced)", early, rounds)
	}
}

// Ensure that Load does not wait forever on a lock that another process
// holds. Since readers take a shared flock, any process that can open the
// anchor file for reading (flock needs no write access, and the mode check
// refuses only writes by group or others, so 0644 passes) can take an
// exclusive flock and hold it; every Load and Inspect, so every Open, then
// waits with no deadline. Before, only writers waited.
func TestRedteamU_LoadUnderForeignLock(t *testing.T) {
	fa := storeAll(t, signedAt(t, 2))
	if err := os.Chmod(fa.Path, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(fa.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := FileAnchor{Path: fa.Path, LockTimeout: 200 * time.Millisecond}.Load()
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrAnchorBusy) {
			t.Fatalf("Load under another holder's exclusive lock = %v, want ErrAnchorBusy", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Load still waits after 3 s on an exclusive flock that a reader of the anchor file holds")
	}
	// A writer gives up as a reader does, and the file is unchanged.
	a := signedAt(t, 2)
	if err := (FileAnchor{Path: fa.Path, LockTimeout: 200 * time.Millisecond}).Store(&a, signedAt(t, 3)); !errors.Is(err, ErrAnchorBusy) {
		t.Fatalf("Store under another holder's exclusive lock = %v, want ErrAnchorBusy", err)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if got, err := fa.Load(); err != nil || got != a {
		t.Fatalf("Load after the lock was released = seq %d (%v), want %d", got.Seq, err, a.Seq)
	}
}
