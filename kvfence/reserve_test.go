package kvfence

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kvfence/kvfence/engine"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/testbin"
)

// floodOutcome is what a denial flood against a small volume came to.
type floodOutcome struct {
	Denials   int    `json:"denials"`
	Refused   int    `json:"refused"` // ErrStorageReserve
	Applied   int    `json:"applied"` // must stay 0: every flooding call is stale or hostile
	FloodErr  string `json:"flood_err,omitempty"`
	HoldErr   string `json:"hold_err,omitempty"`
	ActErr    string `json:"activate_err,omitempty"`
	StaleErr  string `json:"stale_err,omitempty"`
	StaleOut  string `json:"stale_outcome,omitempty"`
	Anchored  bool   `json:"anchored"` // the anchor covers the hold
	ChainOK   bool   `json:"chain_ok"`
	ChainNote string `json:"chain_note,omitempty"`
}

// reserveScenario initialises a receiver in dir (a small volume) with its
// anchor in anchorDir, holds worker A's scope, and floods it with A's stale
// envelope and with hostile envelopes carrying 512-byte identifiers for an
// unknown scope, from 8 goroutines, until every flooding call fails. Then
// an administrator holds and activates, and A tries once more.
func reserveScenario(dir, anchorDir string, reserve int64) (out floodOutcome, err error) {
	path := filepath.Join(dir, "receiver.db")
	anchor := audit.FileAnchor{Path: filepath.Join(anchorDir, "receiver.anchor")}
	clock := newClock()
	if err := Init(path, &InitOptions{ReceiverID: "flood", Key: testKey, Anchor: anchor, Now: clock.Now}); err != nil {
		return out, err
	}
	r, err := Open(path, &Options{Key: testKey, Anchor: anchor, Now: clock.Now, Reserve: reserve})
	if err != nil {
		return out, err
	}
	defer r.Close()
	ctx := context.Background()
	admin := r.Admin()
	if _, err := admin.CreateScope(ctx, fixScope); err != nil {
		return out, err
	}
	if _, err := admin.CreateTarget(ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
		return out, err
	}
	req, _ := EncodeRequest(&Request{V: 1, Action: "raise", Target: fixTarget, Patch: []byte(fixPatch)})
	g, err := admin.Activate(ctx, ActivateRequest{Scope: fixScope, Executor: "worker-a", Claim: "c1", Request: req})
	if err != nil {
		return out, err
	}
	stale, _ := EncodeEnvelope(&Envelope{V: 1, Scope: fixScope, Epoch: g.Epoch, Grant: g.ID, Executor: "worker-a", Claim: "c1", Request: req})
	if _, err := admin.Hold(ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "lease expired"}); err != nil {
		return out, err
	}
	long := strings.Repeat("x", 512)
	hreq, _ := EncodeRequest(&Request{V: 1, Action: long, Target: long, Set: ptr([]byte("v"))})
	hostile, _ := EncodeEnvelope(&Envelope{V: 1, Scope: long, Epoch: 7, Grant: long, Executor: long, Claim: long, Request: hreq})

	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			env, caller := stale, "worker-a"
			if w%2 == 1 {
				env, caller = hostile, "worker-h"
			}
			for range 2_000_000 {
				res, err := r.Submit(ctx, caller, env)
				mu.Lock()
				switch {
				case errors.Is(err, ErrStorageReserve):
					out.Refused++
				case err != nil:
					out.FloodErr = err.Error()
				case res.Outcome == Applied:
					out.Applied++
				default:
					out.Denials++
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()

	if _, err := admin.Hold(ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "incident during a flood"}); err != nil {
		out.HoldErr = err.Error()
		return out, nil
	}
	head := r.Head()
	if a, err := anchor.Load(); err == nil && a.Seq == head.Seq && a.Head == head.Hash {
		out.Anchored = true
	}
	if _, err := admin.Activate(ctx, ActivateRequest{Scope: fixScope, Executor: "worker-b", Claim: "c2", Request: req}); err != nil {
		out.ActErr = err.Error()
	}
	res, err := r.Submit(ctx, "worker-a", stale)
	if err != nil {
		out.StaleErr = err.Error()
	} else {
		out.StaleOut = string(res.Outcome)
	}
	// Read back from the chain: no applied entry at all.
	applied := 0
	err = r.Events(0, func(e Event) bool {
		if e.Kind == KindSubmit && e.Outcome == string(Applied) {
			applied++
		}
		return true
	})
	out.ChainOK = err == nil && applied == 0
	out.ChainNote = fmt.Sprintf("%d applied entries, events: %v", applied, err)
	return out, nil
}

// smallVolume mounts a tmpfs of size bytes at a new directory, or reports
// why it cannot (no privilege to mount).
func smallVolume(t *testing.T, size int) (string, error) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		return "", err
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir, nil
}

// runReserveScenario runs reserveScenario on a 4 MiB volume: a tmpfs
// where this process may mount one, otherwise a child process whose file
// size limit (RLIMIT_FSIZE) is 4 MiB.
func runReserveScenario(t *testing.T, reserve int64) floodOutcome {
	const volume = 4 << 20
	if os.Getenv("KVFENCE_NO_TMPFS") != "" {
		t.Log("KVFENCE_NO_TMPFS: RLIMIT_FSIZE in a child")
	} else if dir, err := smallVolume(t, volume); err == nil {
		t.Logf("on a %d-byte tmpfs", volume)
		out, err := reserveScenario(dir, t.TempDir(), reserve)
		if err != nil {
			t.Fatal(err)
		}
		return out
	} else {
		t.Logf("cannot mount a tmpfs (%v): RLIMIT_FSIZE %d in a child instead", err, volume)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperReserveFlood$")
	cmd.Env = testbin.ChildEnv("KVFENCE_FLOOD_DIR="+t.TempDir(), "KVFENCE_FLOOD_ANCHOR_DIR="+t.TempDir(),
		fmt.Sprintf("KVFENCE_FLOOD_LIMIT=%d", volume), fmt.Sprintf("KVFENCE_FLOOD_RESERVE=%d", reserve))
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, raw)
	}
	var out floodOutcome
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("child said %q: %v", raw, err)
	}
	return out
}

// TestHelperReserveFlood is not a test: run as a child by
// runReserveScenario, it lowers RLIMIT_FSIZE and runs the scenario,
// printing its outcome as JSON.
func TestHelperReserveFlood(t *testing.T) {
	dir := os.Getenv("KVFENCE_FLOOD_DIR")
	if dir == "" {
		return
	}
	out := bufio.NewWriter(os.Stdout)
	defer func() { out.Flush(); os.Exit(0) }()
	signal.Ignore(syscall.SIGXFSZ)
	var limit uint64
	var reserve int64
	fmt.Sscan(os.Getenv("KVFENCE_FLOOD_LIMIT"), &limit)
	fmt.Sscan(os.Getenv("KVFENCE_FLOOD_RESERVE"), &reserve)
	rl := syscall.Rlimit{Cur: limit, Max: limit}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &rl); err != nil {
		fmt.Fprintf(out, "setup: %v\n", err)
		return
	}
	res, err := reserveScenario(dir, os.Getenv("KVFENCE_FLOOD_ANCHOR_DIR"), reserve)
	if err != nil {
		fmt.Fprintf(out, "setup: %v\n", err)
		return
	}
	json.NewEncoder(out).Encode(res)
}

// Ensure that a stale worker and a hostile caller flooding the receiver
// with denials on a small volume cannot keep an administrator from
// holding and activating: Submit is refused with ErrStorageReserve before
// the volume is full, the hold commits and is anchored, and the stale
// worker is never applied.
func TestReserve_DenialFloodCannotBlockHold(t *testing.T) {
	skipShort(t)
	out := runReserveScenario(t, 1<<20)
	t.Logf("%+v", out)
	switch {
	case out.FloodErr != "":
		t.Fatalf("a flooding call failed with something other than the reserve: %s", out.FloodErr)
	case out.Refused != 8 || out.Denials == 0:
		t.Fatalf("flood: %d denials, %d refused by the reserve; want denials, then all 8 callers refused", out.Denials, out.Refused)
	case out.HoldErr != "" || !out.Anchored:
		t.Fatalf("hold during the flood: %q, anchored %v", out.HoldErr, out.Anchored)
	case out.ActErr != "":
		t.Fatalf("activation during the flood: %s", out.ActErr)
	case out.Applied != 0 || !out.ChainOK || out.StaleOut == string(Applied):
		t.Fatalf("the stale worker was applied: %+v", out)
	case !strings.Contains(out.StaleErr, ErrStorageReserve.Error()) && out.StaleOut != string(Denied):
		t.Fatalf("stale worker after the hold: %q %q", out.StaleOut, out.StaleErr)
	}
}

// Ensure that without the reserve nothing stops the same flood before the
// volume is full: the disk itself refuses the flood's writes, and then an
// administrator's hold commits only if it fits in pages the flood freed,
// which is luck, not a guarantee (it failed with "no space left on device"
// in most runs). The reserve is what keeps the room.
func TestReserve_WithoutReserveTheVolumeFills(t *testing.T) {
	skipShort(t)
	out := runReserveScenario(t, -1)
	t.Logf("%+v", out)
	if out.Applied != 0 {
		t.Fatalf("stale worker applied: %+v", out)
	}
	full := strings.Contains(out.FloodErr, syscall.ENOSPC.Error()) || strings.Contains(out.FloodErr, syscall.EFBIG.Error()) ||
		strings.Contains(out.FloodErr, "file too large")
	if out.Refused != 0 || !full {
		t.Fatalf("without a reserve the flood stopped on %q (%d refused), not on a full volume", out.FloodErr, out.Refused)
	}
	t.Logf("hold on the full volume: %q", out.HoldErr)
}

func eventAt(t *testing.T, r *Receiver, seq uint64) Event {
	t.Helper()
	var got Event
	if err := r.Events(seq, func(e Event) bool { got = e; return false }); err != nil || got.Seq != seq {
		t.Fatalf("event %d: %v", seq, err)
	}
	return got
}

// entrySize returns the stored size of audit entry seq.
func entrySize(t *testing.T, r *Receiver, seq uint64) int {
	t.Helper()
	var n int
	err := r.view(func(tx engine.Tx) error {
		v, err := tx.Get(bucketAudit, audit.SeqKey(seq))
		n = len(v)
		return err
	})
	if err != nil || n == 0 {
		t.Fatalf("entry %d: %d bytes, %v", seq, n, err)
	}
	return n
}

// maxDenialEntry is the bound SECURITY.md states for a denial's audit
// entry, beyond the caller's identity and a scope name that exists.
const maxDenialEntry = 300

// Ensure that a denial's audit entry stays under a fixed size whatever the
// envelope carries: identifiers that matched nothing are recorded by length
// and digest, never verbatim, and notes quote no envelope text.
func TestDenial_EntrySizeBounded(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	long := strings.Repeat("\u00e9", 256) // 512 bytes
	longReq := f.request(&Request{V: 1, Action: long, Target: long, Set: ptr([]byte("v"))})
	env := func(scope, grant, executor, claim string, req []byte) []byte {
		return f.envelope(&Envelope{V: 1, Scope: scope, Epoch: 1, Grant: grant, Executor: executor, Claim: claim, Request: req})
	}
	for _, tc := range []struct {
		name   string
		caller string
		env    []byte
		reason Reason
	}{
		{"unknown scope", "worker-a", env(long, long, long, long, longReq), ReasonUnknownScope},
		{"malformed envelope", "worker-a", append([]byte{0xbf}, []byte(strings.Repeat(long, 100))...), ReasonMalformedEnvelope},
		{"malformed request", "worker-a", env(fixScope, a.grant.ID, "worker-a", "claim-1", []byte(long)), ReasonMalformedRequest},
		{"inactive grant", "worker-a", env(fixScope, long, long, long, longReq), ReasonInactiveGrant},
		{"executor mismatch", "worker-a", env(fixScope, a.grant.ID, long, long, longReq), ReasonExecutorMismatch},
		{"claim mismatch", "worker-a", env(fixScope, a.grant.ID, "worker-a", long, longReq), ReasonClaimMismatch},
		{"request mismatch", "worker-a", env(fixScope, a.grant.ID, "worker-a", "claim-1", longReq), ReasonRequestMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := f.submit(tc.caller, tc.env)
			wantDenied(t, res, tc.reason)
			bound := maxDenialEntry + len(tc.caller)
			if tc.reason != ReasonUnknownScope && tc.reason != ReasonMalformedEnvelope {
				bound += len(fixScope)
			}
			n := entrySize(t, f.r, res.AuditSeq)
			t.Logf("%s: %d envelope bytes, %d-byte audit entry (bound %d)", tc.reason, len(tc.env), n, bound)
			if n > bound {
				t.Fatalf("%d-byte audit entry for a %d-byte envelope, over the %d-byte bound", n, len(tc.env), bound)
			}
			e := eventAt(t, f.r, res.AuditSeq)
			if strings.Contains(e.Note+e.Scope+e.Grant+e.Action+e.Target, "\u00e9\u00e9\u00e9") {
				t.Fatalf("the entry stores envelope text verbatim: %+v", e)
			}
		})
	}
	// A stale worker's real grant is named verbatim, with its action.
	f.hold("lease expired")
	res := f.submit("worker-a", a.envelope)
	if e := eventAt(t, f.r, res.AuditSeq); e.Grant != a.grant.ID || e.Action != "raise-retention" || e.Scope != fixScope {
		t.Fatalf("stale denial entry does not name the grant and action: %+v", e)
	}
}

// Ensure that the reserve is measured again for each call of a failed
// batch that is retried alone: a batch admitted just above the reserve and
// failed (as one that fills the volume does) must not have its worker calls
// committed one by one into the administrators' room. The measurement is
// the fault hook's: above the reserve once, below it from then on.
func TestReserve_RetriedCallsMeasuredAgain(t *testing.T) {
	f := gcFixture(t, gcSeed)
	a, b := twoWorkers(t, f)
	f.r.opts.Reserve = 1 << 20
	var measured int
	f.r.faults.freeSpace = func(string) (int64, error) {
		measured++
		if measured == 1 {
			return f.r.opts.Reserve + 1, nil
		}
		return f.r.opts.Reserve - 1, nil
	}
	f.r.faults.beforeReceipt = func(_, action string) error {
		if action == "act-b" {
			return errors.New("no space left on device")
		}
		return nil
	}
	calls := []*gcCall{
		{caller: "worker-a", envelope: a.envelope},
		{caller: "worker-b", envelope: b.envelope},
		{hold: &HoldRequest{Scopes: []string{fixScope}, Reason: "during the retry"}},
	}
	inOneBatch(t, f, calls)
	f.r.faults = faultHooks{}
	if !errors.Is(calls[0].err, ErrStorageReserve) {
		t.Fatalf("worker A's call retried alone below the reserve: %s %v, want ErrStorageReserve", outcome(calls[0]), calls[0].err)
	}
	if outcome(calls[2]) != "held" {
		t.Fatalf("the hold retried alone: %s %v", outcome(calls[2]), calls[2].err)
	}
	f.wantTarget(1, fixValue)
}
