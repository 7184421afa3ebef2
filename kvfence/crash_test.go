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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/testbin"
)

// The crash test re-executes this test binary as a child that runs a stream
// of fenced writes, holds and activations against a receiver with a file
// anchor, reports every acknowledged result to the parent over a pipe, and
// is killed with SIGKILL at a random moment. After every kill the parent
// checks the files the child left.
//
// KVFENCE_CRASH_SEED and KVFENCE_CRASH_KILLS override the seed and the
// number of kills; the seed is printed so that a failure can be replayed.
const (
	defaultCrashSeed  = 20261202
	defaultCrashKills = 200
	// crashMaxDelay bounds how long a child runs after it reported ready.
	crashMaxDelay = 30 * time.Millisecond
)

var crashScopes = []string{"crash/a", "crash/b"}

// crashAck is one acknowledged result, as the child reports it.
type crashAck struct {
	Op      string      `json:"op"` // submit, activate, hold
	Scope   string      `json:"scope,omitempty"`
	Action  string      `json:"action,omitempty"`
	Grant   string      `json:"grant,omitempty"`
	Outcome Outcome     `json:"outcome,omitempty"`
	Reason  Reason      `json:"reason,omitempty"`
	Epoch   uint64      `json:"epoch,omitempty"`
	Rev     uint64      `json:"rev,omitempty"`
	Seq     uint64      `json:"seq"`
	Held    []HeldScope `json:"held,omitempty"`
	Stale   bool        `json:"stale,omitempty"` // the submit used a grant superseded by an acknowledged hold
	Err     string      `json:"err,omitempty"`   // the child failed; the test fails with this
	Ready   bool        `json:"ready,omitempty"` // the receiver is open
}

// crashRequest is the request the child uses for action in scope. It is a
// pure function of both, so that a later child can rebuild the envelope of
// a grant an earlier child activated.
func crashRequest(scope, action string) []byte {
	b, err := EncodeRequest(&Request{V: 1, Action: action, Target: scope + "/t", Set: ptr([]byte("value of " + action))})
	if err != nil {
		panic(err)
	}
	return b
}

func crashEnvelope(g Grant, executor string, epoch uint64) []byte {
	b, err := EncodeEnvelope(&Envelope{V: 1, Scope: g.Scope, Epoch: epoch, Grant: g.ID, Executor: executor,
		Claim: g.Claim, Request: crashRequest(g.Scope, g.Action)})
	if err != nil {
		panic(err)
	}
	return b
}

// TestHelperCrashChild is not a test: run as a child by
// TestCrash_KillDuringWrites, it opens the receiver and writes until it is
// killed, reporting each acknowledged result on file descriptor 3.
func TestHelperCrashChild(t *testing.T) {
	path := os.Getenv("KVFENCE_CRASH_DB")
	if path == "" {
		return
	}
	report := os.NewFile(3, "report")
	ack := func(a crashAck) {
		line, _ := json.Marshal(a)
		// One write per line: a line the parent reads whole was written
		// after the call it reports returned.
		if _, err := report.Write(append(line, '\n')); err != nil {
			os.Exit(2)
		}
	}
	fail := func(err error) {
		ack(crashAck{Err: err.Error()})
		os.Exit(1)
	}
	seed, _ := strconv.ParseUint(os.Getenv("KVFENCE_CRASH_SEED"), 10, 64)
	run := os.Getenv("KVFENCE_CRASH_RUN")
	rng := rand.New(rand.NewPCG(seed, 1))
	r, err := Open(path, &Options{Key: testKey, Anchor: audit.FileAnchor{Path: os.Getenv("KVFENCE_CRASH_ANCHOR")}})
	if err != nil {
		fail(err)
	}
	ack(crashAck{Ready: true})
	ctx, admin := context.Background(), r.Admin()
	submit := func(as string, env []byte, stale bool) {
		res, err := r.Submit(ctx, as, env)
		if err != nil {
			fail(fmt.Errorf("submit: %w", err))
		}
		ack(crashAck{Op: "submit", Scope: res.Scope, Action: res.Action, Grant: res.Grant, Outcome: res.Outcome,
			Reason: res.Reason, Rev: res.Revision, Seq: res.AuditSeq, Stale: stale})
	}
	for n := 0; ; n++ {
		scope := crashScopes[rng.IntN(len(crashScopes))]
		st, err := r.Status(scope)
		if err != nil {
			fail(err)
		}
		if st.Mode == ModeHeld {
			action := fmt.Sprintf("r%s-%d", run, n)
			g, err := admin.Activate(ctx, ActivateRequest{Scope: scope, Executor: "w-" + action, Claim: "c-" + action,
				Request: crashRequest(scope, action), Epoch: st.Epoch})
			if err != nil {
				fail(fmt.Errorf("activate: %w", err))
			}
			ack(crashAck{Op: "activate", Scope: scope, Action: action, Grant: g.ID, Epoch: g.Epoch, Seq: g.AuditSeq})
			continue
		}
		g, err := r.Grant(st.ActiveGrant)
		if err != nil {
			fail(err)
		}
		env := crashEnvelope(g, g.Executor, g.Epoch)
		switch x := rng.IntN(10); {
		case x < 5:
			submit(g.Executor, env, false)
		case x < 8:
			scopes := []string{scope}
			if x == 7 {
				scopes = crashScopes
			}
			h, err := admin.Hold(ctx, HoldRequest{Scopes: scopes, Reason: "crash test " + run})
			if err != nil {
				fail(fmt.Errorf("hold: %w", err))
			}
			ack(crashAck{Op: "hold", Held: h.Scopes, Seq: h.AuditSeq})
			// The superseded worker resumes, as is and with the new epoch.
			submit(g.Executor, env, true)
			submit(g.Executor, crashEnvelope(g, g.Executor, g.Epoch+1), true)
		default:
			submit("someone-else", env, false)
		}
	}
}

// crashStats counts what the kills hit.
type crashStats struct {
	kills, beforeReady, dbAhead, acks int
}

// Ensure that a receiver killed at any moment of a stream of writes, holds
// and activations opens again without a false rollback alarm, with a chain
// that verifies, every acknowledged result present with its receipt and
// audit entry, no target changed without both, nothing applied twice, and
// an anchor that covers every acknowledged write and never runs ahead of
// the database.
func TestCrash_KillDuringWrites(t *testing.T) {
	// Its children start, sync and die while it waits, so it runs beside
	// the other parallel tests; its files and children are its own, and
	// it reads the environment without setting it.
	t.Parallel()
	seed, kills := uint64(defaultCrashSeed), defaultCrashKills
	switch {
	case testing.Short():
		kills = 20
	case raceEnabled:
		// The detector finds what it finds in the first rounds; more kills
		// find more crash points, which a build without it reaches faster
		// (KVFENCE_CRASH_KILLS=1000 go test -run TestCrash).
		kills = defaultCrashKills / 2
	}
	if s := os.Getenv("KVFENCE_CRASH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("KVFENCE_CRASH_SEED: %v", err)
		}
		seed = v
	}
	if s := os.Getenv("KVFENCE_CRASH_KILLS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("KVFENCE_CRASH_KILLS: %q", s)
		}
		kills = v
	}
	t.Logf("crash test: seed %d (KVFENCE_CRASH_SEED), %d kills (KVFENCE_CRASH_KILLS)", seed, kills)
	rng := rand.New(rand.NewPCG(seed, 0))

	dir := t.TempDir()
	path := filepath.Join(dir, "receiver.db")
	anchorDir := filepath.Join(dir, "anchor")
	if err := os.Mkdir(anchorDir, 0o700); err != nil {
		t.Fatal(err)
	}
	anchor := audit.FileAnchor{Path: filepath.Join(anchorDir, "receiver.anchor")}
	if err := Init(path, &InitOptions{ReceiverID: "crash", Key: testKey, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path, &Options{Key: testKey, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range crashScopes {
		if _, err := r.Admin().CreateScope(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Admin().CreateTarget(t.Context(), s, s+"/t", []byte("initial")); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()

	var acks []crashAck
	var st crashStats
	readyAfter := 20 * time.Millisecond // running mean of the child's start
	// A short run may end before any kill landed inside a write; it goes
	// on, up to ten times as long, until one has, so that the check below
	// holds the test to what it is for rather than to the machine's timing.
	for i := 0; i < kills || (st.dbAhead == 0 && i < 10*kills); i++ {
		early := rng.IntN(5) == 0
		var delay time.Duration
		if early {
			delay = time.Duration(rng.Int64N(int64(readyAfter) + 1))
		} else {
			delay = time.Duration(rng.Int64N(int64(crashMaxDelay) + 1))
		}
		got, ready, wasReady := runCrashChild(t, path, anchor.Path, seed, i, early, delay)
		if wasReady {
			readyAfter = (readyAfter*7 + ready) / 8
		} else {
			st.beforeReady++
		}
		st.kills++
		acks = append(acks, got...)
		st.acks += len(got)
		if checkAfterCrash(t, path, anchor, acks, &st); t.Failed() {
			t.Fatalf("seed %d: after kill %d (%s into the run, early %v), the checks above failed", seed, i, delay, early)
		}
	}
	t.Logf("seed %d: %d kills survived (%d before the child reported ready, %d left the database ahead of its anchor), "+
		"%d acknowledged results checked after every kill", seed, st.kills, st.beforeReady, st.dbAhead, st.acks)
	if st.acks == 0 || st.dbAhead == 0 {
		t.Fatalf("the kills never landed inside a write (acks %d, database ahead of anchor %d times)", st.acks, st.dbAhead)
	}
	// The anchor is written in place: no kill may leave another file
	// beside it.
	if left, _ := filepath.Glob(filepath.Join(anchorDir, ".*")); len(left) != 0 {
		t.Fatalf("files left beside the anchor: %q", left)
	}
}

// runCrashChild starts a child, kills it, and returns what it acknowledged
// and how long it took to report ready. An early kill is timed from the
// start, others from ready.
func runCrashChild(t *testing.T, path, anchor string, seed uint64, i int, early bool, delay time.Duration) ([]crashAck, time.Duration, bool) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCrashChild$")
	cmd.Env = testbin.ChildEnv("KVFENCE_CRASH_DB="+path, "KVFENCE_CRASH_ANCHOR="+anchor,
		"KVFENCE_CRASH_SEED="+strconv.FormatUint(seed+uint64(i)*7919, 10), "KVFENCE_CRASH_RUN="+strconv.Itoa(i))
	cmd.ExtraFiles = []*os.File{pw}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var acks []crashAck
	var ready time.Duration
	wasReady := false
	kill := time.NewTimer(delay)
	defer kill.Stop()
	parse := func(line string) {
		var a crashAck
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("run %d: child wrote %q: %v", i, line, err)
		}
		switch {
		case a.Err != "":
			t.Fatalf("run %d: child failed: %s", i, a.Err)
		case a.Ready:
			wasReady, ready = true, time.Since(start)
			if !early {
				kill.Reset(delay)
			}
		default:
			acks = append(acks, a)
		}
	}
	if !early {
		// Time the kill from ready: wait for it first.
		kill.Stop()
		select {
		case line, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("run %d: child exited before it was ready: %s", i, stderr.String())
			}
			parse(line)
		case <-time.After(60 * time.Second):
			t.Fatalf("run %d: child not ready after 60s", i)
		}
	}
wait:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break wait
			}
			parse(line)
		case <-kill.C:
			break wait
		}
	}
	cmd.Process.Kill() // SIGKILL
	err = cmd.Wait()
	for line := range lines {
		parse(line)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("run %d: child ended with %v before it was killed:\n%s", i, err, stderr.String())
	}
	for _, bad := range []string{"DATA RACE", "panic:", "fatal error"} {
		if strings.Contains(stderr.String(), bad) {
			t.Fatalf("run %d: child stderr:\n%s", i, stderr.String())
		}
	}
	return acks, ready, wasReady
}

// checkAfterCrash checks the files a killed child left, then opens the
// receiver for writing as the next child will.
func checkAfterCrash(t *testing.T, path string, anchor audit.FileAnchor, acks []crashAck, st *crashStats) {
	t.Helper()
	a, err := anchor.Load()
	if err != nil {
		t.Errorf("anchor: %v", err)
		return
	}
	rep, err := VerifyChain(path, VerifyOptions{Anchor: anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil || !rep.OK() {
		t.Errorf("VerifyChain = %+v, %v", rep, err)
		return
	}
	ro, err := Open(path, &Options{ReadOnly: true, Anchor: anchor})
	if err != nil {
		t.Errorf("read-only open: %v", err)
		return
	}
	m := replayChain(t, ro)
	checkState(t, ro, m)
	ro.Close()
	if a.Seq > m.head.Seq {
		t.Errorf("anchor at seq %d runs ahead of the database's head %d", a.Seq, m.head.Seq)
	}
	if a.Seq < m.head.Seq {
		st.dbAhead++
	}
	var maxAck uint64
	for _, k := range acks {
		maxAck = max(maxAck, k.Seq)
		checkAck(t, m, k)
	}
	if a.Seq < maxAck {
		t.Errorf("anchor at seq %d does not cover acknowledged seq %d", a.Seq, maxAck)
	}
	r, err := Open(path, &Options{Key: testKey, Anchor: anchor})
	if err != nil {
		t.Errorf("open after the crash: %v", err)
		return
	}
	if r.Head() != m.head {
		t.Errorf("open moved the head from %v to %v", m.head, r.Head())
	}
	r.Close()
	if b, err := anchor.Load(); err != nil || b.Seq != m.head.Seq || b.Head != m.head.Hash {
		t.Errorf("open did not move the anchor to the head %v: %+v, %v", m.head, b, err)
	}
}

// checkAck fails the test unless the chain records the acknowledged result
// exactly as the child was told it.
func checkAck(t *testing.T, m *chainModel, k crashAck) {
	t.Helper()
	e, ok := m.entries[k.Seq]
	switch k.Op {
	case "submit":
		key := string(receiptKey(k.Scope, k.Action))
		if !ok || e.Kind != KindSubmit || e.Scope != k.Scope || e.Action != k.Action || e.Grant != k.Grant ||
			e.Outcome != string(k.Outcome) || e.Reason != string(k.Reason) {
			t.Errorf("acknowledged %+v; audit entry %d is %+v", k, k.Seq, e)
		}
		if k.Outcome == Applied && m.applied[key] != k.Seq {
			t.Errorf("acknowledged %+v; the action was applied at seq %d", k, m.applied[key])
		}
		if k.Stale && k.Outcome != Denied {
			t.Errorf("a superseded grant was acknowledged: %+v", k)
		}
	case "activate":
		if !ok || e.Kind != KindActivate || e.Scope != k.Scope || e.Grant != k.Grant || e.Epoch != k.Epoch {
			t.Errorf("acknowledged %+v; audit entry %d is %+v", k, k.Seq, e)
		}
	case "hold":
		for j, h := range k.Held {
			seq := k.Seq - uint64(len(k.Held)-1-j)
			if e := m.entries[seq]; e.Kind != KindHold || e.Scope != h.Scope || e.Epoch != h.Epoch {
				t.Errorf("acknowledged hold %+v; audit entry %d is %+v", h, seq, e)
			}
		}
	default:
		t.Errorf("unknown acknowledgement %+v", k)
	}
}
