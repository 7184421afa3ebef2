package ledger

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/testbin"
	bolt "go.etcd.io/bbolt"
)

var ctx = context.Background()

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fixture is a ledger file with its anchor and key in a temporary directory.
type fixture struct {
	t      testing.TB
	path   string
	anchor audit.FileAnchor
	key    ed25519.PrivateKey
	clock  *clock
	// problem is what checkChain must find at the end of the test; nil
	// means the chain must verify.
	problem error
}

// testKey is fixed so that a re-executed test process can sign too.
var testKey = ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))

func newFixture(t testing.TB) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{t: t, path: filepath.Join(dir, "ledger.db"), anchor: audit.FileAnchor{Path: filepath.Join(dir, "ledger.anchor")},
		key: testKey, clock: &clock{t: time.Now().UTC()}}
	if err := Init(f.path, &InitOptions{LedgerID: "ledger-test", Key: f.key, Anchor: f.anchor, Now: f.clock.Now}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.checkChain() })
	return f
}

func (f *fixture) opts() *Options {
	return &Options{Key: f.key, Anchor: f.anchor, Now: f.clock.Now, LockTimeout: 10 * time.Second}
}

func (f *fixture) open() *Ledger {
	f.t.Helper()
	l, err := Open(f.path, f.opts())
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

// checkChain verifies the whole audit chain against the anchor, so every
// test also proves that what it wrote is covered.
func (f *fixture) checkChain() {
	f.t.Helper()
	if _, err := os.Stat(f.path); err != nil {
		return
	}
	db, err := bolt.Open(f.path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		f.t.Errorf("checkChain: %v", err)
		return
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		// A ledger chain records approvals and claims, not a receiver's
		// scopes, holds and grants: there is no fence to replay.
		rep, err := audit.Verify(audit.VerifyOptions{Anchor: f.anchor, PublicKey: f.key.Public().(ed25519.PublicKey), Receiver: "ledger-test",
			NoFenceReplay: true, Entries: func(yield func([]byte, []byte) bool) {
				tx.Bucket(bucketAudit).ForEach(func(k, v []byte) error {
					if !yield(k, v) {
						return errors.New("stop")
					}
					return nil
				})
			}})
		if err != nil {
			return err
		}
		return rep.Err()
	})
	if (err == nil) != (f.problem == nil) || (err != nil && !errors.Is(err, f.problem)) {
		f.t.Errorf("checkChain: %v, want %v", err, f.problem)
	}
}

func approve(t testing.TB, l *Ledger, action string) Approval {
	t.Helper()
	a, err := l.Approve(ctx, ApproveRequest{Action: action, RequestSHA256: sha256.Sum256([]byte(action)), Approver: "alice", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustClaim(t testing.TB, l *Ledger, action, worker string) Claim {
	t.Helper()
	c, err := l.Claim(ctx, ClaimRequest{Action: action, Worker: worker, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Ensure that a claim goes claimed -> dispatched -> succeeded, each step in
// the audit chain, and that the settled action cannot be claimed again.
func TestLedger_Lifecycle(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	defer l.Close()
	a := approve(t, l, "backup-45")
	if a.ExpiresAt.Sub(a.ApprovedAt) != time.Hour || a.Approver != "alice" {
		t.Fatalf("approval = %+v", a)
	}
	c := mustClaim(t, l, "backup-45", "worker-a")
	if c.State != StateClaimed || c.Generation != 1 || c.Resumed || !strings.HasPrefix(c.Ref, "c-") {
		t.Fatalf("claim = %+v", c)
	}
	f.clock.Advance(time.Second)
	hb, err := l.Heartbeat(ctx, c.Ref, "worker-a", 2*time.Minute)
	if err != nil || !hb.LeaseExpiresAt.Equal(f.clock.Now().Add(2*time.Minute)) {
		t.Fatalf("heartbeat = %+v, %v", hb, err)
	}
	if d, err := l.Dispatch(ctx, c.Ref, "worker-a"); err != nil || d.State != StateDispatched {
		t.Fatalf("dispatch = %+v, %v", d, err)
	}
	if _, err := l.Dispatch(ctx, c.Ref, "worker-a"); !errors.Is(err, ErrBadTransition) {
		t.Fatalf("second dispatch: %v, want ErrBadTransition", err)
	}
	done, err := l.Finish(ctx, c.Ref, "worker-a", StateSucceeded)
	if err != nil || done.State != StateSucceeded || done.SettledAt.IsZero() {
		t.Fatalf("finish = %+v, %v", done, err)
	}
	if _, err := l.Claim(ctx, ClaimRequest{Action: "backup-45", Worker: "worker-b"}); !errors.Is(err, ErrSettled) {
		t.Fatalf("claim after success: %v, want ErrSettled", err)
	}
	if _, err := l.Heartbeat(ctx, c.Ref, "worker-a", 0); !errors.Is(err, ErrBadTransition) {
		t.Fatalf("heartbeat after finish: %v, want ErrBadTransition", err)
	}
	v, err := l.Action("backup-45")
	if err != nil || v.Live != "" || len(v.Claims) != 1 || v.Claims[0].State != StateSucceeded {
		t.Fatalf("view = %+v, %v", v, err)
	}
	// init, approve, claim, heartbeat, dispatch, finish.
	if h := l.Head(); h.Seq != 6 {
		t.Fatalf("head seq = %d, want 6", h.Seq)
	}
}

// Ensure that refusals name the rule and write nothing.
func TestLedger_Refusals(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	defer l.Close()
	approve(t, l, "act")
	c := mustClaim(t, l, "act", "worker-a")
	l.Approve(ctx, ApproveRequest{Action: "short", RequestSHA256: sha256.Sum256(nil), Approver: "alice", TTL: time.Second})
	approve(t, l, "never-dispatched")
	nd := mustClaim(t, l, "never-dispatched", "worker-a")
	f.clock.Advance(2 * time.Second)

	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"approve twice", func() error {
			_, err := l.Approve(ctx, ApproveRequest{Action: "act", RequestSHA256: sha256.Sum256(nil), Approver: "bob", TTL: time.Hour})
			return err
		}, ErrAlreadyApproved},
		{"claim unapproved", func() error { _, err := l.Claim(ctx, ClaimRequest{Action: "nope", Worker: "w"}); return err }, ErrNotApproved},
		{"claim expired approval", func() error { _, err := l.Claim(ctx, ClaimRequest{Action: "short", Worker: "w"}); return err }, ErrApprovalExpired},
		{"claim held by another", func() error { _, err := l.Claim(ctx, ClaimRequest{Action: "act", Worker: "worker-b"}); return err }, ErrClaimed},
		{"heartbeat by another", func() error { _, err := l.Heartbeat(ctx, c.Ref, "worker-b", 0); return err }, ErrNotOwner},
		{"dispatch unknown ref", func() error { _, err := l.Dispatch(ctx, "c-unknown", "worker-a"); return err }, ErrNoClaim},
		{"succeed undispatched", func() error { _, err := l.Finish(ctx, nd.Ref, "worker-a", StateSucceeded); return err }, ErrBadTransition},
		{"finish uncertain", func() error { _, err := l.Finish(ctx, c.Ref, "worker-a", StateUncertain); return err }, ErrInvalidArgument},
		{"reconcile live claim", func() error { _, err := l.Reconcile(ctx, c.Ref, "op", StateSucceeded); return err }, ErrBadTransition},
		{"takeover without live claim", func() error {
			_, err := l.Takeover(ctx, TakeoverRequest{Action: "short", Operator: "op", Reason: "r", Worker: "w"})
			return err
		}, ErrNoClaim},
		{"takeover without reason", func() error {
			_, err := l.Takeover(ctx, TakeoverRequest{Action: "act", Operator: "op", Worker: "w"})
			return err
		}, ErrInvalidArgument},
		{"control character in worker", func() error { _, err := l.Claim(ctx, ClaimRequest{Action: "act", Worker: "w\x1b[2J"}); return err }, ErrInvalidArgument},
		{"negative lease", func() error {
			_, err := l.Claim(ctx, ClaimRequest{Action: "act", Worker: "w", Lease: -time.Second})
			return err
		}, ErrInvalidArgument},
		{"lease too long", func() error { _, err := l.Heartbeat(ctx, c.Ref, "worker-a", MaxLease+1); return err }, ErrInvalidArgument},
		{"zero digest", func() error {
			_, err := l.Approve(ctx, ApproveRequest{Action: "z", Approver: "alice", TTL: time.Hour})
			return err
		}, ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := l.Head()
			err := tc.call()
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if after := l.Head(); after != before {
				t.Fatalf("a refused call moved the chain from %v to %v", before, after)
			}
		})
	}
}

// Ensure that an expired lease releases nothing: another worker still may
// not claim, and the owner may still heartbeat (no automatic takeover).
func TestClaim_LeaseExpiryWithoutTakeover(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	defer l.Close()
	approve(t, l, "act")
	c := mustClaim(t, l, "act", "worker-a")
	f.clock.Advance(10 * time.Minute)
	if !c.LeaseExpired(f.clock.Now()) {
		t.Fatal("lease should have expired")
	}
	_, err := l.Claim(ctx, ClaimRequest{Action: "act", Worker: "worker-b"})
	if !errors.Is(err, ErrClaimed) || !strings.Contains(err.Error(), "lease expired") {
		t.Fatalf("claim by another after lease expiry: %v, want ErrClaimed naming the expiry", err)
	}
	hb, err := l.Heartbeat(ctx, c.Ref, "worker-a", time.Minute)
	if err != nil || hb.LeaseExpired(f.clock.Now()) {
		t.Fatalf("owner heartbeat after expiry: %+v, %v", hb, err)
	}
}

// Ensure that a worker that restarts finds its own claim, and that finding
// it writes nothing.
func TestClaim_RestartFindsOwnClaim(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	approve(t, l, "act")
	c := mustClaim(t, l, "act", "worker-a")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = f.open()
	defer l.Close()
	before := l.Head()
	again := mustClaim(t, l, "act", "worker-a")
	if !again.Resumed || again.Ref != c.Ref || again.Generation != 1 {
		t.Fatalf("claim after restart = %+v, want resumed %s", again, c.Ref)
	}
	if l.Head() != before {
		t.Fatal("resuming a claim wrote to the chain")
	}
}

// Ensure that a takeover supersedes the live claim, marks it uncertain,
// refuses the superseded worker everything, and that reconciliation
// settles it.
func TestTakeover(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	defer l.Close()
	approve(t, l, "act")
	old := mustClaim(t, l, "act", "worker-a")
	if _, err := l.Dispatch(ctx, old.Ref, "worker-a"); err != nil {
		t.Fatal(err)
	}
	nc, err := l.Takeover(ctx, TakeoverRequest{Action: "act", Operator: "op", Reason: "worker-a paused", Worker: "worker-b"})
	if err != nil {
		t.Fatal(err)
	}
	if nc.Worker != "worker-b" || nc.Generation != 2 || nc.State != StateClaimed || nc.Ref == old.Ref {
		t.Fatalf("new claim = %+v", nc)
	}
	v, _ := l.Action("act")
	if v.Live != nc.Ref || len(v.Claims) != 2 {
		t.Fatalf("view = %+v", v)
	}
	sup := v.Claims[0]
	if sup.State != StateUncertain || sup.SupersededBy != nc.Ref || sup.SupersededState != StateDispatched || sup.TakeoverBy != "op" {
		t.Fatalf("superseded claim = %+v", sup)
	}
	for _, call := range []func() error{
		func() error { _, err := l.Heartbeat(ctx, old.Ref, "worker-a", 0); return err },
		func() error { _, err := l.Finish(ctx, old.Ref, "worker-a", StateSucceeded); return err },
	} {
		if err := call(); !errors.Is(err, ErrSuperseded) {
			t.Fatalf("superseded worker: %v, want ErrSuperseded", err)
		}
	}
	if _, err := l.Claim(ctx, ClaimRequest{Action: "act", Worker: "worker-a"}); !errors.Is(err, ErrClaimed) {
		t.Fatalf("superseded worker re-claiming: %v, want ErrClaimed", err)
	}
	if r, err := l.Reconcile(ctx, old.Ref, "op", StateFailed); err != nil || r.State != StateFailed || r.ReconciledBy != "op" {
		t.Fatalf("reconcile = %+v, %v", r, err)
	}
	if _, err := l.Reconcile(ctx, old.Ref, "op", StateSucceeded); !errors.Is(err, ErrBadTransition) {
		t.Fatalf("second reconcile: %v, want ErrBadTransition", err)
	}
	if _, err := l.Dispatch(ctx, nc.Ref, "worker-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Finish(ctx, nc.Ref, "worker-b", StateSucceeded); err != nil {
		t.Fatal(err)
	}
}

// Ensure that of many goroutines claiming one action exactly one wins.
func TestClaim_RaceGoroutines(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	defer l.Close()
	approve(t, l, "act")
	const n = 32
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = l.Claim(ctx, ClaimRequest{Action: "act", Worker: fmt.Sprintf("worker-%d", i)})
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrClaimed):
			t.Errorf("worker-%d: %v", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d workers won the claim, want exactly 1", won)
	}
	v, _ := l.Action("act")
	if len(v.Claims) != 1 {
		t.Fatalf("%d claims stored, want 1", len(v.Claims))
	}
}

// TestHelperClaimer is not a test: TestClaim_RaceProcesses runs the test
// binary as several processes that each open the ledger and claim once.
func TestHelperClaimer(t *testing.T) {
	path := os.Getenv("KVFENCE_TEST_LEDGER")
	if path == "" {
		return
	}
	opts := &Options{Key: testKey, Anchor: audit.FileAnchor{Path: os.Getenv("KVFENCE_TEST_LEDGER_ANCHOR")}, LockTimeout: 30 * time.Second}
	// Wait for the start signal so the processes race.
	io.ReadAll(os.Stdin)
	l, err := Open(path, opts)
	if err == nil {
		_, err = l.Claim(ctx, ClaimRequest{Action: "act", Worker: os.Getenv("KVFENCE_TEST_WORKER")})
		l.Close()
	}
	switch {
	case err == nil:
		fmt.Println("RESULT won")
	case errors.Is(err, ErrClaimed):
		fmt.Println("RESULT claimed")
	default:
		fmt.Println("RESULT error", err)
	}
}

// Ensure that of several processes claiming one action exactly one wins:
// the file lock makes them take turns, and each sees the others' claims.
func TestClaim_RaceProcesses(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	approve(t, l, "act")
	l.Close()
	const n = 4
	type proc struct {
		cmd   *exec.Cmd
		out   strings.Builder
		start io.WriteCloser
	}
	procs := make([]*proc, n)
	for i := range procs {
		p := &proc{cmd: exec.Command(os.Args[0], "-test.run=^TestHelperClaimer$")}
		p.cmd.Env = testbin.ChildEnv("KVFENCE_TEST_LEDGER="+f.path, "KVFENCE_TEST_LEDGER_ANCHOR="+f.anchor.Path,
			"KVFENCE_TEST_WORKER=worker-"+strconv.Itoa(i))
		p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
		var err error
		if p.start, err = p.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = p
	}
	for _, p := range procs {
		p.start.Close()
	}
	won := 0
	for i, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v\n%s", i, err, p.out.String())
		}
		switch out := p.out.String(); {
		case strings.Contains(out, "RESULT won"):
			won++
		case strings.Contains(out, "RESULT claimed"):
		default:
			t.Fatalf("process %d: %s", i, out)
		}
	}
	if won != 1 {
		t.Fatalf("%d processes won the claim, want exactly 1", won)
	}
}

// copyFile copies a ledger file as a backup would.
func copyFile(t testing.TB, dst, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Ensure that a restored copy of the ledger, taken before a claim, is
// refused at Open, and show that without the anchor check the same copy
// hands out a second claim of the action (the counterexample).
func TestRestoredCopy(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	approve(t, l, "act")
	l.Close()
	backup := f.path + ".backup"
	copyFile(t, backup, f.path)
	l = f.open()
	mustClaim(t, l, "act", "worker-a")
	l.Close()
	copyFile(t, f.path, backup)
	f.problem = audit.ErrRollbackDetected

	_, err := Open(f.path, f.opts())
	var rb *audit.RollbackError
	if !errors.Is(err, audit.ErrRollbackDetected) || !errors.As(err, &rb) {
		t.Fatalf("restored copy opened: %v, want ErrRollbackDetected", err)
	}
	// Read-only with the anchor is refused too.
	if _, err := Open(f.path, &Options{ReadOnly: true, Anchor: f.anchor}); !errors.Is(err, audit.ErrRollbackDetected) {
		t.Fatalf("restored copy opened read-only: %v, want ErrRollbackDetected", err)
	}

	// The counterexample: the same copy without its anchor check.
	u, err := open(f.path, &Options{Key: f.key, Now: f.clock.Now}, defect.Variant{SkipAnchor: true})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	c, err := u.Claim(ctx, ClaimRequest{Action: "act", Worker: "worker-b"})
	if err != nil || c.Worker != "worker-b" {
		t.Fatalf("unanchored restored copy: %+v, %v; want a second claim (the counterexample)", c, err)
	}
	// Its new entry now sits where the anchored claim was: a fork.
	f.problem = audit.ErrForkDetected
}

// Ensure that Open refuses what is not a ledger and never creates one.
func TestOpen_Refusals(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	garbage := filepath.Join(dir, "garbage")
	os.WriteFile(garbage, []byte(strings.Repeat("not a ledger ", 1000)), 0o600)
	other := filepath.Join(dir, "other.db")
	db, _ := bolt.Open(other, 0o600, nil)
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("meta")); return err })
	db.Close()
	for _, tc := range []struct {
		name string
		path string
		opts *Options
		want error
	}{
		{"missing", filepath.Join(dir, "missing"), f.opts(), ErrNotInitialized},
		{"empty", empty, f.opts(), ErrBadFormat},
		{"garbage", garbage, f.opts(), ErrBadFormat},
		{"directory", dir, f.opts(), ErrBadFormat},
		{"another bbolt file", other, f.opts(), ErrBadFormat},
		{"no anchor for writing", f.path, &Options{Key: f.key}, ErrNoAnchor},
		{"other key", f.path, &Options{Key: ed25519.NewKeyFromSeed(sha256.New().Sum(nil)), Anchor: f.anchor}, ErrKeyMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Open(tc.path, tc.opts); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("Open created a file")
	}
	if err := Init(f.path, &InitOptions{LedgerID: "x", Key: f.key, Anchor: &audit.MemAnchor{}}); !errors.Is(err, ErrAlreadyInitialized) {
		t.Fatalf("Init over an existing file: %v", err)
	}
}

// Ensure that no code of this package can activate a receiver grant: it
// does not import the receiver at all.
func TestNoPathToReceiverGrant(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/kvfence/kvfence/kvfence" {
				t.Errorf("%s imports the receiver package", name)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}

// Ensure that a ledger whose Init died before its first anchor write opens
// (writing that anchor), and that with any history a missing anchor is
// refused.
func TestOpen_InitCrashWindow(t *testing.T) {
	f := newFixture(t)
	os.Remove(f.anchor.Path)
	l := f.open()
	approve(t, l, "act")
	l.Close()
	os.Remove(f.anchor.Path)
	if _, err := Open(f.path, f.opts()); !errors.Is(err, audit.ErrAnchorMissing) {
		t.Fatalf("Open of a ledger with history and no anchor = %v, want ErrAnchorMissing", err)
	}
	f.problem = audit.ErrAnchorMissing
}
