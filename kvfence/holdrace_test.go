package kvfence

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/testbin"
)

// The hold race runs stale workers, the current worker and an administrator
// who holds and activates at random moments, all at once, and then checks
// the audit chain: no mutation commits under a grant after the hold that
// superseded it commits, and every call gets exactly one decision.
//
// KVFENCE_RACE_SEED and KVFENCE_RACE_SCHEDULES override the seed and the
// number of schedules.
const (
	defaultRaceSeed      = 1202
	defaultRaceSchedules = 24
	raceScope            = "race/scope"
	raceTarget           = "race/target"
)

// raceCall is one Submit call and the decision it got.
type raceCall struct {
	caller string
	grant  string
	// stale is set when the grant was superseded by a hold that had
	// returned before the call started: it must be denied.
	stale bool
	res   Result
	err   error
}

// raceEnvelope is an envelope a worker holds.
type raceEnvelope struct {
	grant    Grant
	executor string
	env      []byte
}

func raceRequest(action string) []byte {
	b, err := EncodeRequest(&Request{V: 1, Action: action, Target: raceTarget, Set: ptr([]byte("set by " + action))})
	if err != nil {
		panic(err)
	}
	return b
}

func raceEnv(g Grant, epoch uint64) []byte {
	b, err := EncodeEnvelope(&Envelope{V: 1, Scope: g.Scope, Epoch: epoch, Grant: g.ID, Executor: g.Executor,
		Claim: g.Claim, Request: raceRequest(g.Action)})
	if err != nil {
		panic(err)
	}
	return b
}

// raceSchedule is one run of the race: how many rotations the
// administrator makes and how the goroutines pace themselves.
type raceSchedule struct {
	seed      uint64
	rotations int
	stale     int // stale worker goroutines
	current   int // current worker goroutines
}

// runHoldRace runs one schedule against r and returns every call made.
func runHoldRace(t testing.TB, r *Receiver, sc raceSchedule) []raceCall {
	t.Helper()
	ctx := context.Background()
	admin := r.Admin()
	var (
		cur     atomic.Pointer[raceEnvelope]
		poolMu  sync.Mutex
		pool    []raceEnvelope // superseded: a hold for them has returned
		epoch   atomic.Uint64  // the newest epoch a hold returned
		done    atomic.Bool
		callsMu sync.Mutex
		calls   []raceCall
		wg      sync.WaitGroup
		adminEr error
	)
	record := func(c raceCall) {
		callsMu.Lock()
		calls = append(calls, c)
		callsMu.Unlock()
	}
	pause := func(rng *rand.Rand) {
		switch rng.IntN(4) {
		case 0:
			runtime.Gosched()
		case 1:
			time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
		}
	}
	// The administrator: activate, let the worker run, hold, repeat.
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer done.Store(true)
		rng := rand.New(rand.NewPCG(sc.seed, 1))
		for i := range sc.rotations {
			action := fmt.Sprintf("s%d-a%d", sc.seed, i)
			g, err := admin.Activate(ctx, ActivateRequest{Scope: raceScope, Executor: "worker-" + action,
				Claim: "claim-" + action, Request: raceRequest(action)})
			if err != nil {
				adminEr = fmt.Errorf("activate: %w", err)
				return
			}
			e := &raceEnvelope{grant: g, executor: g.Executor, env: raceEnv(g, g.Epoch)}
			cur.Store(e)
			for range rng.IntN(4) {
				pause(rng)
			}
			h, err := admin.Hold(ctx, HoldRequest{Scopes: []string{raceScope}, Reason: "rotate " + action})
			if err != nil {
				adminEr = fmt.Errorf("hold: %w", err)
				return
			}
			epoch.Store(h.Scopes[0].Epoch)
			poolMu.Lock()
			pool = append(pool, *e)
			poolMu.Unlock()
		}
	}()
	// The current worker submits whatever grant is current; it may lose
	// the race with a hold, and then must be denied.
	for w := range sc.current {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(sc.seed, uint64(100+w)))
			for !done.Load() {
				e := cur.Load()
				if e == nil {
					runtime.Gosched()
					continue
				}
				res, err := r.Submit(ctx, e.executor, e.env)
				record(raceCall{caller: e.executor, grant: e.grant.ID, res: res, err: err})
				pause(rng)
			}
		}()
	}
	// Stale workers resume with superseded grants, as they were and with
	// the newest epoch copied in, and as another worker.
	for w := range sc.stale {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(sc.seed, uint64(200+w)))
			for !done.Load() {
				poolMu.Lock()
				var e raceEnvelope
				ok := len(pool) > 0
				if ok {
					e = pool[rng.IntN(len(pool))]
				}
				poolMu.Unlock()
				if !ok {
					runtime.Gosched()
					continue
				}
				env, caller := e.env, e.executor
				switch rng.IntN(3) {
				case 1:
					env = raceEnv(e.grant, epoch.Load())
				case 2:
					caller = "intruder"
				}
				res, err := r.Submit(ctx, caller, env)
				record(raceCall{caller: caller, grant: e.grant.ID, stale: true, res: res, err: err})
				pause(rng)
			}
		}()
	}
	wg.Wait()
	if adminEr != nil {
		t.Fatalf("schedule %d: administrator: %v", sc.seed, adminEr)
	}
	return calls
}

// checkRaceCalls fails the test unless every call got exactly one
// decision, recorded as the one audit entry its result names, and every
// call with a superseded grant was denied for staleness.
func checkRaceCalls(t testing.TB, m *chainModel, calls []raceCall) (applied, staleDenied int) {
	t.Helper()
	seen := map[uint64]bool{}
	for _, c := range calls {
		if c.err != nil {
			t.Errorf("call %+v: error %v", c, c.err)
			continue
		}
		if seen[c.res.AuditSeq] {
			t.Errorf("two calls answered by audit entry %d", c.res.AuditSeq)
		}
		seen[c.res.AuditSeq] = true
		e, ok := m.entries[c.res.AuditSeq]
		if !ok || e.Kind != KindSubmit || e.Outcome != string(c.res.Outcome) || e.Reason != string(c.res.Reason) ||
			e.Grant != c.grant || e.Executor != c.caller {
			t.Errorf("call by %s with grant %s got %+v; audit entry %d is %+v", c.caller, c.grant, c.res, c.res.AuditSeq, e)
		}
		if c.res.Outcome == Applied {
			applied++
		}
		if c.stale {
			if c.res.Outcome != Denied || !c.res.Reason.isStale() {
				t.Errorf("superseded grant %s by %s: %+v", c.grant, c.caller, c.res)
			}
			if c.res.Reason.isStale() {
				staleDenied++
			}
		}
	}
	total := 0
	for _, n := range m.submits {
		total += n
	}
	if total != len(calls) {
		t.Errorf("%d submit entries in the chain for %d calls", total, len(calls))
	}
	return applied, staleDenied
}

func raceSettings(t *testing.T) (seed uint64, schedules int) {
	seed, schedules = defaultRaceSeed, defaultRaceSchedules
	if testing.Short() {
		schedules /= 4
	}
	if s := os.Getenv("KVFENCE_RACE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("KVFENCE_RACE_SEED: %v", err)
		}
		seed = v
	}
	if s := os.Getenv("KVFENCE_RACE_SCHEDULES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("KVFENCE_RACE_SCHEDULES: %q", s)
		}
		schedules = v
	}
	return seed, schedules
}

// raceReceiver is a receiver with the race scope and target, fast enough
// for thousands of calls: the database is not synced and the anchor is in
// memory (durability is the crash test's subject, not this one's).
func raceReceiver(t *testing.T, v defect.Variant) *Receiver {
	t.Helper()
	r, _ := raceReceiverOn(t, engines[0].new(t), v)
	return r
}

// raceReceiverOn is raceReceiver on a fresh store of s's engine, which it
// returns too.
func raceReceiverOn(t *testing.T, s *store, v defect.Variant) (*Receiver, *store) {
	t.Helper()
	s = s.fresh(t)
	anchor := &audit.MemAnchor{}
	if err := s.init(t, &InitOptions{ReceiverID: "race", Key: testKey, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	r, err := s.open(t, &Options{Key: testKey, Anchor: anchor, NoSync: true}, v)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if _, err := r.Admin().CreateScope(t.Context(), raceScope); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admin().CreateTarget(t.Context(), raceScope, raceTarget, []byte("initial")); err != nil {
		t.Fatal(err)
	}
	return r, s
}

// Ensure that, with stale workers, the current worker and an administrator
// all racing, no mutation commits under a superseded grant and every call
// gets exactly one decision, over many schedules.
func TestHoldRace_InProcess(t *testing.T) {
	// Its schedules count calls, not time, so it runs beside the parallel
	// tests that mostly wait; its receivers are its own.
	t.Parallel()
	forEngines(t, func(t *testing.T, s *store) {
		seed, schedules := raceSettings(t)
		if s.name == "etcd" && os.Getenv("KVFENCE_RACE_SCHEDULES") == "" {
			// A schedule on etcd takes ten times as long; a third of them
			// keeps the suite's time sane.
			schedules = max(1, schedules/3)
		}
		var calls, applied, staleDenied int
		for i := range schedules {
			sc := raceSchedule{seed: seed + uint64(i), rotations: 20 + i%3*10, stale: 1 + i%4, current: 1 + i%2}
			r, st := raceReceiverOn(t, s, defect.Variant{})
			got := runHoldRace(t, r, sc)
			m := replayChain(t, r)
			checkState(t, r, m)
			a, sd := checkRaceCalls(t, m, got)
			verifyRaceChain(t, st, r)
			calls, applied, staleDenied = calls+len(got), applied+a, staleDenied+sd
			if t.Failed() {
				t.Fatalf("schedule seed %d (KVFENCE_RACE_SEED=%d) failed", sc.seed, seed)
			}
		}
		t.Logf("seed %d: %d schedules, %d calls, %d applied, %d superseded-grant calls denied as stale", seed, schedules, calls, applied, staleDenied)
		if applied == 0 || staleDenied == 0 {
			t.Fatalf("the race never applied (%d) or never denied a stale worker (%d)", applied, staleDenied)
		}
	})
}

// verifyRaceChain closes r and checks that VerifyChain, with its replay of
// the scopes' control state, finds nothing wrong with what a correct
// receiver wrote under the race (closing r again in cleanup does nothing).
func verifyRaceChain(t *testing.T, s *store, r *Receiver) {
	t.Helper()
	anchor := r.opts.Anchor
	r.Close()
	rep, err := s.verify(t, VerifyOptions{Anchor: anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil || !rep.OK() {
		t.Errorf("VerifyChain = %s (%s), %v; want ok", rep.Problem, rep.Detail, err)
	}
}

// errRecorder is a testing.TB that records failures instead of failing.
type errRecorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (e *errRecorder) Helper() {}
func (e *errRecorder) Errorf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

// Ensure that the race's checks go red when checks 2-4 are removed: the
// defective receiver applies superseded grants, and the chain replay, the
// per-call check and VerifyChain (from the receiver's own evidence) all
// say so.
func TestHoldRace_DefectiveReceiverIsCaught(t *testing.T) {
	rec := &errRecorder{TB: t}
	for i := range 4 {
		r := raceReceiver(t, defect.Variant{SkipAuthority: true})
		calls := runHoldRace(t, r, raceSchedule{seed: defaultRaceSeed + uint64(i), rotations: 30, stale: 3, current: 1})
		m := replayChain(rec, r)
		checkRaceCalls(rec, m, calls)
		// VerifyChain opens the file itself, so the receiver closes first
		// (closing it again in cleanup does nothing).
		anchor := r.opts.Anchor
		r.Close()
		rep, err := VerifyChain(r.Path(), VerifyOptions{Anchor: anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Problem != audit.ProblemFenceViolation || !errors.Is(rep.Err(), audit.ErrFenceViolation) {
			t.Fatalf("schedule %d: VerifyChain = %s (%s), want fence_violation", i, rep.Problem, rep.Detail)
		}
	}
	if len(rec.errs) == 0 {
		t.Fatal("the hold race found nothing wrong with a receiver that skips checks 2-4")
	}
	t.Logf("defective receiver: %d violations found, first: %s", len(rec.errs), rec.errs[0])
}

// The same race across processes: each child opens the receiver for every
// call and closes it after, so bbolt's file lock makes them take turns.

// raceGrantFile is a grant as the administrator child shares it.
type raceGrantFile struct {
	Grant Grant  `json:"grant"`
	Epoch uint64 `json:"epoch"` // for a superseded grant, the epoch its hold moved to
}

// raceReport is one line a child reports.
type raceReport struct {
	Role    string  `json:"role"`
	Caller  string  `json:"caller,omitempty"`
	Grant   string  `json:"grant,omitempty"`
	Stale   bool    `json:"stale,omitempty"`
	Outcome Outcome `json:"outcome,omitempty"`
	Reason  Reason  `json:"reason,omitempty"`
	Seq     uint64  `json:"seq,omitempty"`
	Admin   string  `json:"admin,omitempty"` // activate or hold
	Busy    bool    `json:"busy,omitempty"`
	Waiting bool    `json:"waiting,omitempty"`
	Err     string  `json:"err,omitempty"`
}

func writeJSONFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSONFile(path string, v any) bool {
	b, err := os.ReadFile(path)
	return err == nil && json.Unmarshal(b, v) == nil
}

// TestHelperRaceChild is not a test: run as a child by
// TestHoldRace_AcrossProcesses in one of three roles until a deadline,
// reporting every decision on stdout.
func TestHelperRaceChild(t *testing.T) {
	role := os.Getenv("KVFENCE_RACE_ROLE")
	if role == "" {
		return
	}
	enc := json.NewEncoder(os.Stdout)
	report := func(r raceReport) {
		r.Role = role
		if err := enc.Encode(r); err != nil {
			os.Exit(2)
		}
	}
	fail := func(err error) {
		report(raceReport{Err: err.Error()})
		os.Exit(1)
	}
	path, dir := os.Getenv("KVFENCE_RACE_DB"), os.Getenv("KVFENCE_RACE_DIR")
	anchor := audit.FileAnchor{Path: os.Getenv("KVFENCE_RACE_ANCHOR")}
	seed, _ := strconv.ParseUint(os.Getenv("KVFENCE_RACE_SEED"), 10, 64)
	until, _ := strconv.ParseInt(os.Getenv("KVFENCE_RACE_UNTIL"), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 0))
	ctx := context.Background()
	// withReceiver opens the receiver, runs fn and closes it. It reports a
	// lock not obtained in time as busy; any other error fails the child.
	withReceiver := func(timeout time.Duration, fn func(r *Receiver) error) bool {
		r, err := Open(path, &Options{Key: testKey, Anchor: anchor, LockTimeout: timeout})
		if errors.Is(err, ErrStorageBusy) {
			report(raceReport{Busy: true})
			return false
		}
		if err != nil {
			fail(err)
		}
		err = fn(r)
		if cerr := r.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			fail(err)
		}
		return true
	}
	submit := func(r *Receiver, caller string, g Grant, env []byte, stale bool) error {
		res, err := r.Submit(ctx, caller, env)
		if err != nil {
			return err
		}
		report(raceReport{Caller: caller, Grant: g.ID, Stale: stale, Outcome: res.Outcome, Reason: res.Reason, Seq: res.AuditSeq})
		return nil
	}
	// The parent holds the lock now: the first attempt must be busy.
	report(raceReport{Waiting: true})
	for withReceiver(-1, func(*Receiver) error { return nil }) {
		fail(errors.New("opened the receiver while the parent held it"))
	}
	stop := filepath.Join(dir, "stop")
	for n := 0; time.Now().UnixNano() < until; n++ {
		if _, err := os.Stat(stop); err == nil {
			break
		}
		switch role {
		case "admin":
			var cur raceGrantFile
			withReceiver(2*time.Second, func(r *Receiver) error {
				st, err := r.Status(raceScope)
				if err != nil {
					return err
				}
				if st.Mode == ModeHeld {
					action := fmt.Sprintf("p%d-a%d", seed, n)
					g, err := r.Admin().Activate(ctx, ActivateRequest{Scope: raceScope, Executor: "worker-" + action,
						Claim: "claim-" + action, Request: raceRequest(action)})
					if err != nil {
						return err
					}
					report(raceReport{Grant: g.ID, Seq: g.AuditSeq, Admin: "activate"})
					return writeJSONFile(filepath.Join(dir, "current.json"), raceGrantFile{Grant: g, Epoch: g.Epoch})
				}
				if !readJSONFile(filepath.Join(dir, "current.json"), &cur) {
					return errors.New("open scope without a current grant file")
				}
				h, err := r.Admin().Hold(ctx, HoldRequest{Scopes: []string{raceScope}, Reason: "rotate"})
				if err != nil {
					return err
				}
				cur.Epoch = h.Scopes[0].Epoch
				report(raceReport{Grant: cur.Grant.ID, Seq: h.AuditSeq, Admin: "hold"})
				return nil
			})
			if cur.Grant.ID != "" {
				// Published only after the hold returned: from now on the
				// grant is superseded.
				if err := writeJSONFile(filepath.Join(dir, "stale", cur.Grant.ID+".json"), cur); err != nil {
					fail(err)
				}
			}
			time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
		case "current":
			var cur raceGrantFile
			if !readJSONFile(filepath.Join(dir, "current.json"), &cur) {
				time.Sleep(time.Millisecond)
				continue
			}
			withReceiver(2*time.Second, func(r *Receiver) error {
				return submit(r, cur.Grant.Executor, cur.Grant, raceEnv(cur.Grant, cur.Grant.Epoch), false)
			})
			// bbolt polls a busy lock every 50ms: a process that reopens
			// at once would starve the administrator.
			time.Sleep(time.Duration(1+rng.IntN(10)) * time.Millisecond)
		case "stale":
			files, _ := filepath.Glob(filepath.Join(dir, "stale", "*.json"))
			var old raceGrantFile
			if len(files) == 0 || !readJSONFile(files[rng.IntN(len(files))], &old) {
				time.Sleep(time.Millisecond)
				continue
			}
			caller, epoch := old.Grant.Executor, old.Grant.Epoch
			switch rng.IntN(3) {
			case 1:
				epoch = old.Epoch // the epoch its hold moved to, copied
			case 2:
				caller = "intruder"
			}
			// Stale workers do not wait for the lock: contention is busy.
			withReceiver(-1, func(r *Receiver) error { return submit(r, caller, old.Grant, raceEnv(old.Grant, epoch), true) })
			time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
		}
	}
	os.Exit(0)
}

// The cross-process race runs until it has seen this much, or fails after
// raceMaxDuration.
const (
	raceMinHolds    = 8
	raceMinApplied  = 4
	raceMinStale    = 30
	raceMaxDuration = 20 * time.Second
)

// Ensure that processes racing on one receiver take turns on the file lock,
// that contention is ErrStorageBusy and never a skipped check, that no
// mutation commits under a superseded grant, and that every call gets
// exactly one decision.
func TestHoldRace_AcrossProcesses(t *testing.T) {
	seed, _ := raceSettings(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "race.db")
	anchor := audit.FileAnchor{Path: filepath.Join(dir, "race.anchor")}
	shared := filepath.Join(dir, "shared")
	if err := os.MkdirAll(filepath.Join(shared, "stale"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Init(path, &InitOptions{ReceiverID: "race", Key: testKey, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	holder, err := Open(path, &Options{Key: testKey, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Admin().CreateScope(t.Context(), raceScope); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Admin().CreateTarget(t.Context(), raceScope, raceTarget, []byte("initial")); err != nil {
		t.Fatal(err)
	}
	roles := []string{"admin", "current", "stale", "stale"}
	until := time.Now().Add(raceMaxDuration).UnixNano()
	type child struct {
		cmd    *exec.Cmd
		lines  chan raceReport
		stderr bytes.Buffer
	}
	children := make([]*child, len(roles))
	for i, role := range roles {
		c := &child{lines: make(chan raceReport, 4096)}
		c.cmd = exec.Command(os.Args[0], "-test.run=^TestHelperRaceChild$")
		c.cmd.Env = testbin.ChildEnv("KVFENCE_RACE_ROLE="+role, "KVFENCE_RACE_DB="+path, "KVFENCE_RACE_ANCHOR="+anchor.Path,
			"KVFENCE_RACE_DIR="+shared, "KVFENCE_RACE_SEED="+strconv.FormatUint(seed+uint64(i), 10),
			"KVFENCE_RACE_UNTIL="+strconv.FormatInt(until, 10))
		c.cmd.Stderr = &c.stderr
		stdout, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(c.lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var r raceReport
				if json.Unmarshal(sc.Bytes(), &r) == nil && r.Role != "" {
					c.lines <- r
				}
			}
		}()
		children[i] = c
	}
	var reports []raceReport
	// Hold the lock until every child has tried and been refused once.
	for i, c := range children {
		for {
			r, ok := <-c.lines
			if !ok {
				t.Fatalf("%s child ended before it started: %s", roles[i], c.stderr.String())
			}
			reports = append(reports, r)
			if r.Busy || r.Err != "" {
				break
			}
		}
	}
	holder.Close()
	// Let them race until enough has happened, then tell them to stop.
	merged := make(chan raceReport)
	var fanIn sync.WaitGroup
	for _, c := range children {
		fanIn.Add(1)
		go func() {
			defer fanIn.Done()
			for r := range c.lines {
				merged <- r
			}
		}()
	}
	go func() { fanIn.Wait(); close(merged) }()
	var holds, applied, staleDenied int
	stopped := false
	for r := range merged {
		reports = append(reports, r)
		switch {
		case r.Admin == "hold":
			holds++
		case r.Outcome == Applied:
			applied++
		case r.Stale && r.Outcome == Denied:
			staleDenied++
		}
		if !stopped && holds >= raceMinHolds && applied >= raceMinApplied && staleDenied >= raceMinStale {
			if err := os.WriteFile(filepath.Join(shared, "stop"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			stopped = true
		}
	}
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("%s child: %v\n%s", roles[i], err, c.stderr.String())
		}
		if strings.Contains(c.stderr.String(), "DATA RACE") {
			t.Fatalf("%s child:\n%s", roles[i], c.stderr.String())
		}
	}
	var calls []raceCall
	busy, admin := map[string]int{}, map[string]int{}
	for _, r := range reports {
		switch {
		case r.Err != "":
			t.Fatalf("%s child failed: %s", r.Role, r.Err)
		case r.Busy:
			busy[r.Role]++
		case r.Admin != "":
			admin[r.Admin]++
		case r.Outcome != "":
			calls = append(calls, raceCall{caller: r.Caller, grant: r.Grant, stale: r.Stale,
				res: Result{Outcome: r.Outcome, Reason: r.Reason, AuditSeq: r.Seq}})
		}
	}
	r, err := Open(path, &Options{Key: testKey, Anchor: anchor})
	if err != nil {
		t.Fatalf("open after the race: %v", err)
	}
	defer r.Close()
	m := replayChain(t, r)
	checkState(t, r, m)
	applied, staleDenied = checkRaceCalls(t, m, calls)
	t.Logf("seed %d: %d processes, %v, %d calls, %d applied, %d superseded-grant calls denied as stale, busy by role %v",
		seed, len(roles), admin, len(calls), applied, staleDenied, busy)
	if !stopped || busy["stale"] < 2 {
		t.Fatalf("in %v the race did not reach %d holds, %d applied and %d stale denials, or never met a busy lock (%v)",
			raceMaxDuration, raceMinHolds, raceMinApplied, raceMinStale, busy)
	}
}
