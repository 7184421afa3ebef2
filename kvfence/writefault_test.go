//go:build linux

package kvfence

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/testbin"
)

// These tests make the disk refuse a write in the middle of a fenced
// operation, without root and without mounting anything, so that they run
// the same everywhere:
//
//   - a full file system: RLIMIT_FSIZE, in a child process (the limit
//     applies to the whole process). The kernel then refuses every write
//     at or past the limit with EFBIG, as it refuses a write on a full
//     file system with ENOSPC, at the very call that would store data;
//   - a file system gone read-only under an open receiver: the database's
//     open descriptor is replaced (dup2) with a read-only descriptor of the
//     same file, on which the kernel refuses every write (EBADF), while the
//     original stays open elsewhere so that bbolt's lock is kept.
//
// In every case the call must return an error and leave the state exactly
// as it was; the receiver must accept the same request once the disk
// recovers, and its chain must verify.

// snapshot is the observable state a failed write must not change.
type snapshot struct {
	head   audit.Head
	target Target
	status ScopeStatus
}

func takeSnapshot(t *testing.T, r *Receiver) snapshot {
	t.Helper()
	tg, err := r.Target(fixTarget)
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.Status(fixScope)
	if err != nil {
		t.Fatal(err)
	}
	var head audit.Head
	if err := r.Events(0, func(e Event) bool { head = audit.Head{Seq: e.Seq, Hash: e.Hash}; return true }); err != nil {
		t.Fatal(err)
	}
	return snapshot{head: head, target: tg, status: st}
}

func (s snapshot) equal(o snapshot) bool {
	return s.head == o.head && s.target.Revision == o.target.Revision && string(s.target.Value) == string(o.target.Value) &&
		s.status.Epoch == o.status.Epoch && s.status.Mode == o.status.Mode && s.status.ActiveGrant == o.status.ActiveGrant &&
		s.status.StaleRejections == o.status.StaleRejections
}

// dbFD finds the descriptor bbolt holds for path: the only one open on it.
func dbFD(t *testing.T, path string) int {
	t.Helper()
	want, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	found := -1
	for _, e := range entries {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == want {
			if found >= 0 {
				t.Fatalf("%s is open twice", path)
			}
			found, _ = strconv.Atoi(e.Name())
		}
	}
	if found < 0 {
		t.Fatalf("%s is not open", path)
	}
	return found
}

// swapFD points the database's descriptor at a read-only descriptor of
// the same file and returns a function that puts the original back. The
// original stays open meanwhile, so bbolt's lock is kept.
func swapFD(t *testing.T, r *Receiver) (restore func()) {
	t.Helper()
	fd := dbFD(t, r.Path())
	saved, err := syscall.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := os.Open(r.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := dup2(int(ro.Fd()), fd); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := dup2(saved, fd); err != nil {
			t.Fatal(err)
		}
		syscall.Close(saved)
	}
}

// Ensure that a write refused by the disk, as by a file system remounted
// read-only, fails the call and changes nothing, for every kind of write,
// and that the receiver works again once the disk does.
func TestWriteFault_DiskRefusesWrites(t *testing.T) {
	for _, op := range []string{"submit", "hold", "activate", "denial"} {
		t.Run(op, func(t *testing.T) {
			f := newFixture(t, defect.Variant{})
			a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
			if op == "activate" {
				f.hold("held before the fault")
			}
			call := func() error {
				var err error
				switch op {
				case "submit":
					_, err = f.r.Submit(f.ctx, "worker-a", a.envelope)
				case "denial":
					_, err = f.r.Submit(f.ctx, "intruder", a.envelope)
				case "hold":
					_, err = f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "r"})
				case "activate":
					_, err = f.admin.Activate(f.ctx, ActivateRequest{Scope: fixScope, Executor: "w", Claim: "c",
						Request: f.patchRequest("act2")})
				}
				return err
			}
			before := takeSnapshot(t, f.r)
			anchorBefore, err := f.anchor.Load()
			if err != nil {
				t.Fatal(err)
			}
			restore := swapFD(t, f.r)
			err = call()
			restore()
			// bbolt formats some I/O errors with %s, so the errno is not
			// always wrapped; the message names it.
			if err == nil || !strings.Contains(err.Error(), syscall.EBADF.Error()) && !strings.Contains(err.Error(), syscall.EINVAL.Error()) {
				t.Fatalf("%s on a disk that refuses writes: %v, want a write error (EBADF, or EINVAL from a resize)", op, err)
			}
			if after := takeSnapshot(t, f.r); !after.equal(before) {
				t.Fatalf("a failed %s changed the state:\nbefore %+v\nafter  %+v", op, before, after)
			}
			if a, err := f.anchor.Load(); err != nil || a != anchorBefore {
				t.Fatalf("a failed %s moved the anchor: %v", op, err)
			}
			// The disk is back: the same call succeeds.
			if err := call(); err != nil {
				t.Fatalf("%s after the disk recovered: %v", op, err)
			}
			f.reopen()
			m := replayChain(t, f.r)
			checkState(t, f.r, m)
		})
	}
}

// TestHelperFileSizeLimit is not a test: run as a child by
// TestWriteFault_FullFileSystem, it lowers RLIMIT_FSIZE to the size its
// parent names and submits; it prints the error or the outcome.
func TestHelperFileSizeLimit(t *testing.T) {
	path := os.Getenv("KVFENCE_FSIZE_DB")
	if path == "" {
		return
	}
	out := bufio.NewWriter(os.Stdout)
	defer func() { out.Flush(); os.Exit(0) }()
	// Without this the kernel's SIGXFSZ would kill the process instead of
	// failing the write.
	signal.Ignore(syscall.SIGXFSZ)
	limit, _ := strconv.ParseUint(os.Getenv("KVFENCE_FSIZE_LIMIT"), 10, 64)
	env, err := os.ReadFile(os.Getenv("KVFENCE_FSIZE_ENVELOPE"))
	if err != nil {
		out.WriteString("setup: " + err.Error() + "\n")
		return
	}
	now, _ := strconv.ParseInt(os.Getenv("KVFENCE_FSIZE_NOW"), 10, 64)
	// The reserve is off: this child shows what the disk's own refusal
	// does (TestReserve_* shows the reserve).
	r, err := Open(path, &Options{Key: testKey, Anchor: audit.FileAnchor{Path: os.Getenv("KVFENCE_FSIZE_ANCHOR")},
		Now: func() time.Time { return time.Unix(0, now) }, Reserve: -1})
	if err != nil {
		out.WriteString("setup: " + err.Error() + "\n")
		return
	}
	defer r.Close()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &rl); err != nil {
		out.WriteString("setup: " + err.Error() + "\n")
		return
	}
	rl.Cur = limit
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &rl); err != nil {
		out.WriteString("setup: " + err.Error() + "\n")
		return
	}
	res, err := r.Submit(t.Context(), os.Getenv("KVFENCE_FSIZE_AS"), env)
	switch {
	case errors.Is(err, syscall.EFBIG), err != nil && strings.Contains(err.Error(), syscall.EFBIG.Error()):
		// bbolt formats a failed resize with %s: the errno is in the text.
		out.WriteString("EFBIG " + err.Error() + "\n")
	case err != nil:
		out.WriteString("error " + err.Error() + "\n")
	default:
		out.WriteString("result " + string(res.Outcome) + " " + string(res.Reason) + " " + res.Detail + "\n")
	}
}

// Ensure that when the file system has no room for a write (RLIMIT_FSIZE
// in a child process: every page write fails, or only the database's
// growth does, with EFBIG), the submit fails, the database and the anchor
// are as they were, and the same envelope applies once there is room.
func TestWriteFault_FullFileSystem(t *testing.T) {
	for _, tc := range []struct {
		name string
		// limit returns the RLIMIT_FSIZE for the child, from the database
		// file's size.
		limit func(dbSize int64) uint64
		// big makes the request's value large enough to need new pages.
		big bool
	}{
		{"no room at all", func(int64) uint64 { return 0 }, false},
		{"no room to grow the database", func(n int64) uint64 { return uint64(n) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, defect.Variant{})
			req := f.patchRequest("act")
			if tc.big {
				req = f.request(&Request{V: 1, Action: "act", Target: fixTarget, Set: ptr([]byte(strings.Repeat("x", 60<<10)))})
			}
			w := f.activate("worker-a", "claim-1", req)
			envPath := filepath.Join(t.TempDir(), "env")
			if err := os.WriteFile(envPath, w.envelope, 0o600); err != nil {
				t.Fatal(err)
			}
			before := takeSnapshot(t, f.r)
			anchorBefore, err := f.anchor.Load()
			if err != nil {
				t.Fatal(err)
			}
			f.r.Close()
			fi, err := os.Stat(f.path)
			if err != nil {
				t.Fatal(err)
			}
			limit := tc.limit(fi.Size())
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFileSizeLimit$")
			cmd.Env = testbin.ChildEnv("KVFENCE_FSIZE_DB="+f.path, "KVFENCE_FSIZE_ANCHOR="+f.anchor.Path,
				"KVFENCE_FSIZE_LIMIT="+strconv.FormatUint(limit, 10), "KVFENCE_FSIZE_ENVELOPE="+envPath,
				"KVFENCE_FSIZE_AS=worker-a", "KVFENCE_FSIZE_NOW="+strconv.FormatInt(f.clock.Now().UnixNano(), 10))
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			got := strings.TrimSpace(string(out))
			r, err := Open(f.path, f.opts())
			if err != nil {
				t.Fatalf("open after the full file system (%s): %v", got, err)
			}
			f.r, f.admin = r, r.Admin()
			if !strings.HasPrefix(got, "EFBIG ") {
				t.Fatalf("child: %q, want a submit error wrapping EFBIG", got)
			}
			if after := takeSnapshot(t, f.r); !after.equal(before) {
				t.Fatalf("a submit on a full file system changed the state (%s):\nbefore %+v\nafter  %+v", got, before, after)
			}
			if a, err := f.anchor.Load(); err != nil || a != anchorBefore {
				t.Fatalf("a submit on a full file system moved the anchor: %v", err)
			}
			if res := f.submit("worker-a", w.envelope); res.Outcome != Applied {
				t.Fatalf("submit once there is room: %+v", res)
			}
		})
	}
}

// faultyAnchor is an AnchorStore whose Store fails: before writing (a
// read-only or full anchor directory), or after the new anchor took effect
// (a directory fsync that failed after the rename).
type faultyAnchor struct {
	audit.AnchorStore
	after bool
	fails int // how many Stores fail
}

func (a *faultyAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	if a.fails == 0 {
		return a.AnchorStore.Store(old, next)
	}
	a.fails--
	if a.after {
		if err := a.AnchorStore.Store(old, next); err != nil {
			return err
		}
	}
	return &os.PathError{Op: "sync", Path: "anchor", Err: syscall.EROFS}
}

// Ensure that a decision whose anchor write fails is reported as
// ErrNotAcknowledged and is in the database (ahead of its anchor, which
// Open accepts), that retrying the same envelope answers already_applied
// and moves the anchor, and that the receiver keeps working whether the
// failed write took effect or not.
func TestWriteFault_AnchorWriteFails(t *testing.T) {
	for _, after := range []bool{false, true} {
		t.Run(map[bool]string{false: "before writing", true: "after the rename"}[after], func(t *testing.T) {
			f := newFixture(t, defect.Variant{})
			w := f.activate("worker-a", "claim-1", f.patchRequest("act"))
			fa := &faultyAnchor{AnchorStore: f.anchor, after: after, fails: 1}
			f.r.Close()
			r, err := Open(f.path, &Options{Now: f.clock.Now, Key: testKey, Anchor: fa})
			if err != nil {
				t.Fatal(err)
			}
			f.r, f.admin = r, r.Admin()
			anchorBefore, _ := f.anchor.Load()
			_, err = f.r.Submit(f.ctx, "worker-a", w.envelope)
			if !errors.Is(err, ErrNotAcknowledged) || !errors.Is(err, syscall.EROFS) {
				t.Fatalf("submit with a failing anchor write: %v, want ErrNotAcknowledged wrapping EROFS", err)
			}
			// The decision committed: the change and its receipt are there.
			f.wantTarget(2, fixAfter)
			if _, err := f.r.Receipt(fixScope, "act"); err != nil {
				t.Fatalf("receipt of the unacknowledged write: %v", err)
			}
			if a, _ := f.anchor.Load(); !after && a != anchorBefore {
				t.Fatal("the anchor moved although its write failed before writing")
			}
			// The retry is answered from the receipt and acknowledged.
			res, err := f.r.Submit(f.ctx, "worker-a", w.envelope)
			if err != nil || res.Outcome != AlreadyApplied {
				t.Fatalf("retry: %+v, %v, want already_applied", res, err)
			}
			f.hold("after the retry")
			f.reopen()
			m := replayChain(t, f.r)
			checkState(t, f.r, m)
		})
	}
}
