package kvfence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/defect"
)

// The backup-policy fixture, as in testdata/backup-policy.
const (
	fixScope  = "configmap/prod/backup-policy"
	fixTarget = "configmap/prod/backup-policy"
	fixValue  = `{"data":{"retention_days":"30"}}`
	fixPatch  = `[{"op":"test","path":"/data/retention_days","value":"30"},{"op":"replace","path":"/data/retention_days","value":"45"}]`
	fixAfter  = `{"data":{"retention_days":"45"}}`
)

// testClock is a settable clock shared by a receiver and its test.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *testClock {
	return &testClock{now: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fixture is a receiver with the backup-policy scope and target.
type fixture struct {
	t      testing.TB
	path   string
	clock  *testClock
	r      *Receiver
	admin  *Admin
	ctx    context.Context
	anchor audit.FileAnchor
	// store is where the receiver is kept, nil for the bbolt file at path
	// of a test that made the fixture itself.
	store *store
	// effects are registered when the receiver is (re)opened.
	effects map[string]Effect
	// dispatchers and dispatchTimeout are given when it is (re)opened.
	dispatchers     map[TargetKind]Dispatcher
	dispatchTimeout time.Duration
}

// opts returns the options the fixture's receiver is opened with.
func (f *fixture) opts() *Options {
	return &Options{Now: f.clock.Now, Key: testKey, Anchor: f.anchor, Warn: func(msg string) { f.t.Log(msg) }, Effects: f.effects,
		Dispatchers: f.dispatchers, DispatchTimeout: f.dispatchTimeout}
}

// reopen closes and reopens the fixture's receiver.
func (f *fixture) reopen() {
	f.t.Helper()
	f.r.Close()
	r, err := f.openStore(f.opts(), defect.Variant{})
	if err != nil {
		f.t.Fatalf("reopen: %v", err)
	}
	f.r, f.admin = r, r.Admin()
}

// reopenAfterVerify reopens the fixture's receiver after a verification;
// a store whose chain records a fence violation, which Open refuses, is
// opened read-only, for the cleanup's walk of its chain.
func (f *fixture) reopenAfterVerify() {
	f.t.Helper()
	r, err := f.openStore(f.opts(), defect.Variant{})
	if errors.Is(err, ErrFenceViolation) {
		r, err = f.openStore(&Options{ReadOnly: true}, defect.Variant{})
	}
	if err != nil {
		f.t.Fatalf("reopen: %v", err)
	}
	f.r, f.admin = r, r.Admin()
}

var testKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))

// newFixture initialises a receiver in t.TempDir with the fixture scope and
// target, opened as the given variant. Every test's chain is verified when
// the test ends.
func newFixture(t testing.TB, v defect.Variant) *fixture {
	t.Helper()
	return newFixtureOn(t, engines[0].new(t), v)
}

// newFixtureOn is newFixture on a fresh store of s's engine.
func newFixtureOn(t testing.TB, s *store, v defect.Variant) *fixture {
	t.Helper()
	s = s.fresh(t)
	dir := t.TempDir()
	f := &fixture{t: t, path: s.path, clock: newClock(), ctx: context.Background(),
		anchor: audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}, store: s}
	if err := s.init(t, &InitOptions{ReceiverID: "test-receiver", Key: testKey, Anchor: f.anchor, Now: f.clock.Now}); err != nil {
		t.Fatalf("Init: %v", err)
	}
	r, err := f.openStore(f.opts(), v)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	f.r, f.admin = r, r.Admin()
	t.Cleanup(func() {
		// f.r, not r: a test may reopen the receiver.
		checkChain(t, f.r)
		f.r.Close()
	})
	if _, err := f.admin.CreateScope(f.ctx, fixScope); err != nil {
		t.Fatalf("CreateScope: %v", err)
	}
	if _, err := f.admin.CreateTarget(f.ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
		t.Fatalf("CreateTarget: %v", err)
	}
	return f
}

// openStore opens the fixture's receiver as the given variant.
func (f *fixture) openStore(opts *Options, v defect.Variant) (*Receiver, error) {
	if f.store == nil {
		return open(f.path, opts, v)
	}
	return f.store.open(f.t, opts, v)
}

// checkChain walks the whole audit chain and fails the test on any broken
// link, seq gap or non-canonical entry.
func checkChain(t testing.TB, r *Receiver) {
	t.Helper()
	// A chain whose older entries were archived begins after its base.
	var base audit.Head
	if err := r.view(func(tx engine.Tx) (err error) { _, base, err = readBase(tx); return err }); err != nil {
		t.Errorf("audit chain: base: %v", err)
	}
	prev, seq := base.Hash, base.Seq
	err := r.Events(0, func(e Event) bool {
		seq++
		if e.Seq != seq {
			t.Errorf("audit chain: entry %d has seq %d", seq, e.Seq)
		}
		if !bytes.Equal(e.Prev, prev[:]) {
			t.Errorf("audit chain: entry %d prev %x, want %x", e.Seq, e.Prev, prev)
		}
		prev = e.Hash
		return true
	})
	if err != nil {
		t.Errorf("audit chain: %v", err)
	}
	if head := r.Head(); head.Seq != seq || head.Hash != prev {
		t.Errorf("audit chain: receiver head %v, chain ends at %d:%x", head, seq, prev)
	}
	checkTree(t, r)
	if r.opts.Anchor != nil {
		a, err := r.opts.Anchor.Load()
		if err != nil {
			t.Errorf("anchor: %v", err)
		} else if a.Seq != seq || a.Head != prev {
			t.Errorf("anchor at %d:%x, chain ends at %d:%x", a.Seq, a.Head, seq, prev)
		}
	}
}

// request encodes a request, failing the test on error.
func (f *fixture) request(r *Request) []byte {
	f.t.Helper()
	b, err := EncodeRequest(r)
	if err != nil {
		f.t.Fatalf("EncodeRequest: %v", err)
	}
	return b
}

// patchRequest is the fixture's approved request for action.
func (f *fixture) patchRequest(action string) []byte {
	return f.request(&Request{V: 1, Action: action, Target: fixTarget, Patch: []byte(fixPatch)})
}

// worker is what a worker holds after activation: its grant and the
// envelope built from it.
type worker struct {
	name     string
	grant    Grant
	envelope []byte
}

func (f *fixture) activate(name, claim string, req []byte) worker {
	f.t.Helper()
	g, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: fixScope, Executor: name, Claim: claim, Request: req, Decision: "change-123"})
	if err != nil {
		f.t.Fatalf("Activate %s: %v", name, err)
	}
	return worker{name: name, grant: g, envelope: f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: g.Epoch,
		Grant: g.ID, Executor: name, Claim: claim, Request: req})}
}

func (f *fixture) envelope(e *Envelope) []byte {
	f.t.Helper()
	b, err := EncodeEnvelope(e)
	if err != nil {
		f.t.Fatalf("EncodeEnvelope: %v", err)
	}
	return b
}

func (f *fixture) hold(reason string) HoldResult {
	f.t.Helper()
	res, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: reason})
	if err != nil {
		f.t.Fatalf("Hold: %v", err)
	}
	return res
}

func (f *fixture) submit(caller string, env []byte) Result {
	f.t.Helper()
	res, err := f.r.Submit(f.ctx, caller, env)
	if err != nil {
		f.t.Fatalf("Submit: %v", err)
	}
	return res
}

func (f *fixture) target() Target {
	f.t.Helper()
	tg, err := f.r.Target(fixTarget)
	if err != nil {
		f.t.Fatalf("Target: %v", err)
	}
	return tg
}

// wantTarget fails the test unless the target has this revision and value.
func (f *fixture) wantTarget(rev uint64, value string) {
	f.t.Helper()
	tg := f.target()
	if tg.Revision != rev || string(tg.Value) != value {
		f.t.Fatalf("target = rev %d %s, want rev %d %s", tg.Revision, tg.Value, rev, value)
	}
}

func wantDenied(t testing.TB, res Result, reason Reason) {
	t.Helper()
	if res.Outcome != Denied || res.Reason != reason {
		t.Fatalf("result = %s/%s (%s), want denied/%s", res.Outcome, res.Reason, res.Detail, reason)
	}
	if res.AuditSeq == 0 {
		t.Fatalf("denial %s has no audit seq", reason)
	}
}
