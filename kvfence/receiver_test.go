package kvfence

import (
	"bufio"
	"context"
	"errors"
	"github.com/kvfence/kvfence/engine"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/testbin"
	bolt "go.etcd.io/bbolt"
)

// Ensure that Open never creates state and that Init refuses to overwrite.
func TestOpen_Errors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	if _, err := Open(missing, nil); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("Open(missing) = %v, want ErrNotInitialized", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open created %s", missing)
	}

	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte("not a database, not at all, but long enough to look like one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(garbage, nil); !errors.Is(err, ErrBadFormat) {
		t.Fatalf("Open(garbage) = %v, want ErrBadFormat", err)
	}
	if _, err := Open(dir, nil); !errors.Is(err, ErrBadFormat) {
		t.Fatalf("Open(directory) = %v, want ErrBadFormat", err)
	}

	// A bbolt file that is not a receiver: no buckets.
	plain := filepath.Join(dir, "plain.db")
	db, err := bolt.Open(plain, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(plain, nil); !errors.Is(err, ErrBadFormat) {
		t.Fatalf("Open(plain bbolt) = %v, want ErrBadFormat", err)
	}

	good := filepath.Join(dir, "good.db")
	if err := Init(good, &InitOptions{ReceiverID: "r1", Key: testKey, Anchor: &audit.MemAnchor{}}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(good)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("receiver file mode %v, want 0600", fi.Mode().Perm())
	}
	if err := Init(good, &InitOptions{ReceiverID: "r1", Key: testKey, Anchor: &audit.MemAnchor{}}); !errors.Is(err, ErrAlreadyInitialized) {
		t.Fatalf("Init(existing) = %v, want ErrAlreadyInitialized", err)
	}
	if err := Init(filepath.Join(dir, "nokey.db"), &InitOptions{ReceiverID: "r1", Anchor: &audit.MemAnchor{}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Init without key = %v, want ErrInvalidArgument", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "nokey.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("failed Init left a file behind")
	}

	// Unknown format version.
	db, err = bolt.Open(good, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaFormat, []byte("99")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(good, nil); !errors.Is(err, ErrBadFormat) {
		t.Fatalf("Open(format 99) = %v, want ErrBadFormat", err)
	}
}

// Ensure that a missing bucket is a clear error, not a silent re-creation.
func TestOpen_MissingBucket(t *testing.T) {
	for _, name := range allBuckets {
		t.Run(string(name), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.db")
			if err := Init(path, &InitOptions{ReceiverID: "r1", Key: testKey, Anchor: &audit.MemAnchor{}}); err != nil {
				t.Fatal(err)
			}
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(name) }); err != nil {
				t.Fatal(err)
			}
			db.Close()
			if _, err := Open(path, nil); !errors.Is(err, ErrBadFormat) {
				t.Fatalf("Open without bucket %s = %v, want ErrBadFormat", name, err)
			}
		})
	}
}

// TestHelperLockHolder is not a test: run as a child process by
// TestOpen_StorageBusyAcrossProcesses, it opens the receiver, says
// "locked", and holds the lock until its stdin closes.
func TestHelperLockHolder(t *testing.T) {
	path := os.Getenv("KVFENCE_TEST_LOCK_HOLDER")
	if path == "" {
		return
	}
	r, err := Open(path, &Options{Key: testKey, Anchor: audit.FileAnchor{Path: os.Getenv("KVFENCE_TEST_ANCHOR")}})
	if err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString("locked\n")
	bufio.NewReader(os.Stdin).ReadString('\n')
	r.Close()
	os.Exit(0)
}

// Ensure that a second process holding the lock makes Open fail with
// ErrStorageBusy within the timeout, and that the receiver opens again once
// the lock is released. Contention is an error, never a skipped check.
func TestOpen_StorageBusyAcrossProcesses(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.r.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLockHolder$")
	cmd.Env = testbin.ChildEnv("KVFENCE_TEST_LOCK_HOLDER="+f.path, "KVFENCE_TEST_ANCHOR="+f.anchor.Path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("lock holder said %q, %v", line, err)
	}
	start := time.Now()
	o := f.opts()
	o.LockTimeout = 100 * time.Millisecond
	_, err = Open(f.path, o)
	if !errors.Is(err, ErrStorageBusy) {
		t.Fatalf("Open while locked = %v, want ErrStorageBusy", err)
	}
	// bbolt polls the lock every 50ms and gives up one poll early.
	if waited := time.Since(start); waited < 40*time.Millisecond {
		t.Fatalf("gave up after %v without waiting for the lock", waited)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("lock holder: %v", err)
	}
	r, err := Open(f.path, f.opts())
	if err != nil {
		t.Fatalf("Open after release: %v", err)
	}
	f.r = r // the fixture's cleanup checks and closes it
}

// Ensure that a hold at the largest epoch is refused and changes nothing,
// not even in the other scopes named by the same hold.
func TestHold_EpochExhausted(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	if _, err := f.admin.CreateScope(f.ctx, "other"); err != nil {
		t.Fatal(err)
	}
	err := f.r.rawUpdate(func(tx engine.Tx) error {
		c, err := getControl(tx, fixScope)
		if err != nil {
			return err
		}
		c.Epoch = math.MaxUint64
		raw, err := encodeCanonical(c)
		if err != nil {
			return err
		}
		return tx.Put(bucketControl, []byte(fixScope), raw)
	})
	if err != nil {
		t.Fatal(err)
	}
	f.r.trustStore(t)
	head := f.r.Head()
	_, err = f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{"other", fixScope}, Reason: "test"})
	if !errors.Is(err, ErrEpochExhausted) {
		t.Fatalf("Hold at max epoch = %v, want ErrEpochExhausted", err)
	}
	for scope, want := range map[string]uint64{"other": 1, fixScope: math.MaxUint64} {
		st, err := f.r.Status(scope)
		if err != nil {
			t.Fatal(err)
		}
		if st.Epoch != want || !st.HoldCommittedAt.IsZero() {
			t.Fatalf("%s after refused hold: epoch %d committed %v, want epoch %d untouched", scope, st.Epoch, st.HoldCommittedAt, want)
		}
	}
	if f.r.Head() != head {
		t.Fatal("a refused hold appended to the audit chain")
	}
}

// Ensure that a hold over several scopes advances each and reports both
// epochs, and that an unknown scope fails the whole hold.
func TestHold_SeveralScopes(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	if _, err := f.admin.CreateScope(f.ctx, "other"); err != nil {
		t.Fatal(err)
	}
	f.activate("worker-a", "claim-1", f.patchRequest("act"))
	if _, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope, "nope"}, Reason: "x"}); !errors.Is(err, ErrUnknownScope) {
		t.Fatalf("Hold with an unknown scope = %v", err)
	}
	if st, _ := f.r.Status(fixScope); st.Mode != ModeOpen || st.Epoch != 1 {
		t.Fatalf("failed hold changed %s: %+v", fixScope, st)
	}
	f.clock.Add(time.Second)
	res, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope, "other"}, Reason: "incident"})
	if err != nil {
		t.Fatal(err)
	}
	want := []HeldScope{{Scope: fixScope, PreviousEpoch: 1, Epoch: 2}, {Scope: "other", PreviousEpoch: 1, Epoch: 2}}
	same := func(a, b HeldScope) bool {
		return a.Scope == b.Scope && a.PreviousEpoch == b.PreviousEpoch && a.Epoch == b.Epoch
	}
	if len(res.Scopes) != 2 || !same(res.Scopes[0], want[0]) || !same(res.Scopes[1], want[1]) {
		t.Fatalf("hold result %+v, want %+v", res.Scopes, want)
	}
	st, _ := f.r.Status(fixScope)
	if st.Mode != ModeHeld || st.ActiveGrant != "" || !st.HoldCommittedAt.Equal(f.clock.Now()) {
		t.Fatalf("status after hold: %+v", st)
	}
	for _, bad := range []HoldRequest{{Reason: "x"}, {Scopes: []string{fixScope, fixScope}, Reason: "x"}, {Scopes: []string{fixScope}}} {
		if _, err := f.admin.Hold(f.ctx, bad); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Hold(%+v) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}

// Ensure that activation requires a held scope, the current epoch when one
// is named, a target of the scope and a valid window, and never advances
// the epoch.
func TestActivate_Rules(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	req := f.patchRequest("act")
	base := ActivateRequest{Scope: fixScope, Executor: "w", Claim: "c", Request: req}
	tests := []struct {
		name string
		mod  func(*ActivateRequest)
		want error
	}{
		{"unknown scope", func(a *ActivateRequest) { a.Scope = "nope" }, ErrUnknownScope},
		{"epoch mismatch", func(a *ActivateRequest) { a.Epoch = 2 }, ErrEpochMismatch},
		{"malformed request", func(a *ActivateRequest) { a.Request = []byte{0xa0} }, ErrMalformedRequest},
		{"target not in scope", func(a *ActivateRequest) {
			a.Request = f.request(&Request{V: 1, Action: "x", Target: "elsewhere", Set: ptr([]byte("v"))})
		}, ErrUnknownTarget},
		{"window over", func(a *ActivateRequest) { a.NotAfter = f.clock.Now() }, ErrInvalidWindow},
		{"window empty", func(a *ActivateRequest) {
			a.NotBefore = f.clock.Now().Add(time.Hour)
			a.NotAfter = a.NotBefore
		}, ErrInvalidWindow},
		{"empty executor", func(a *ActivateRequest) { a.Executor = "" }, ErrInvalidArgument},
	}
	for _, tt := range tests {
		a := base
		tt.mod(&a)
		if _, err := f.admin.Activate(f.ctx, a); !errors.Is(err, tt.want) {
			t.Errorf("%s: Activate = %v, want %v", tt.name, err, tt.want)
		}
	}
	g, err := f.admin.Activate(f.ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if g.Epoch != 1 || len(g.ID) != 32 || g.NotAfter.Sub(g.NotBefore) != DefaultGrantTTL {
		t.Fatalf("grant %+v", g)
	}
	if _, err := f.admin.Activate(f.ctx, base); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Activate = %v, want ErrNotHeld", err)
	}
	f.hold("x")
	g2, err := f.admin.Activate(f.ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if g2.ID == g.ID || g2.Epoch != 2 {
		t.Fatalf("grant after hold: %+v (first %s)", g2, g.ID)
	}
}

// Ensure that a read-only receiver observes but changes nothing.
func TestOpen_ReadOnly(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
	f.r.Close()
	ro, err := Open(f.path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Submit(context.Background(), "worker-a", a.envelope); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only Submit = %v, want ErrReadOnly", err)
	}
	if _, err := ro.Admin().Hold(context.Background(), HoldRequest{Scopes: []string{fixScope}, Reason: "x"}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only Hold = %v, want ErrReadOnly", err)
	}
	if st, err := ro.Status(fixScope); err != nil || st.Mode != ModeOpen {
		t.Fatalf("read-only Status = %+v, %v", st, err)
	}
	ro.Close()
	r, err := Open(f.path, f.opts())
	if err != nil {
		t.Fatal(err)
	}
	f.r = r
}
