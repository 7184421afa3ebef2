package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Ensure that audit archive moves the oldest entries to a file, that
// verify-chain verifies from the base and, with --archive, the whole
// history, that archives given in the wrong order or with one missing exit
// 4, and that a copy of the database from before the archive is refused as
// a rollback.
func TestAuditArchive(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "r")
	copyFile(t, c.env[envDB], c.path("pre-archive.db"))
	pub := c.path("receiver.key.pub")

	c.must(ExitUsage, "audit", "archive", "--before", "3", "--out", "-")
	c.must(ExitUsage, "audit", "archive", "--out", c.path("x.kva"))
	c.must(ExitUsage, "audit", "archive", "--before", "999", "--out", c.path("x.kva"))
	c.write("exists.kva", "")
	if r := c.must(ExitError, "audit", "archive", "--before", "3", "--out", c.path("exists.kva")); !strings.Contains(r.stderr, "file exists") {
		t.Fatalf("archive over an existing file: %s", r)
	}
	out := c.json(0, "audit", "archive", "--before", "3", "--out", c.path("one.kva"))
	if out["from_seq"].(float64) != 0 || out["to_seq"].(float64) != 3 || out["entries"].(float64) != 3 {
		t.Fatalf("archive: %v", out)
	}
	c.activate("worker-b", "claim-b", "b.cbor")
	out = c.json(0, "audit", "archive", "--before", "6", "--out", c.path("two.kva"))
	if out["from_seq"].(float64) != 3 || out["to_seq"].(float64) != 6 {
		t.Fatalf("second archive: %v", out)
	}
	if r := c.json(0, "submit", "--as", "worker-b", "--envelope", c.path("b.cbor")); r["outcome"] != "applied" {
		t.Fatalf("submit after archives: %v", r)
	}

	v := c.json(0, "verify-chain", "--pub", pub)
	if v["ok"] != true || v["base_seq"].(float64) != 6 || v["archived_entries"].(float64) != 0 {
		t.Fatalf("verify-chain from the base: %v", v)
	}
	v = c.json(0, "verify-chain", "--pub", pub, "--archive", c.path("one.kva"), c.path("two.kva"))
	if v["ok"] != true || v["archived_entries"].(float64) != 6 {
		t.Fatalf("verify-chain with archives: %v", v)
	}
	c.must(0, "verify-chain", "--pub", pub, "--archive", c.path("one.kva"), "--archive", c.path("two.kva"))
	for _, args := range [][]string{
		{c.path("two.kva"), c.path("one.kva")},
		{c.path("two.kva")},
		{c.path("one.kva")},
	} {
		v = c.json(ExitIntegrity, append([]string{"verify-chain", "--pub", pub, "--archive"}, args...)...)
		if v["problem"] != "base_mismatch" {
			t.Fatalf("verify-chain --archive %v: %v", args, v)
		}
		if r := c.run(append([]string{"verify-chain", "--pub", pub, "--archive"}, args...)...); !strings.Contains(r.stderr, "Try: the database's base") {
			t.Fatalf("verify-chain --archive %v: no hint about archives:\n%s", args, r.stderr)
		}
	}
	// A FIFO given as an archive is refused before it is opened: opening
	// one with no writer would block for ever.
	if err := syscall.Mkfifo(c.path("fifo.kva"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifoDone := make(chan result, 1)
	go func() { fifoDone <- c.run("verify-chain", "--pub", pub, "--archive", c.path("fifo.kva")) }()
	select {
	case r := <-fifoDone:
		if r.code != ExitUsage || !strings.Contains(r.stderr, "not a regular file") {
			t.Fatalf("verify-chain --archive FIFO: %s", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("verify-chain --archive FIFO blocked")
	}
	// The archive's format is checked before anything is trusted.
	c.write("junk.kva", "not an archive")
	if v = c.json(ExitIntegrity, "verify-chain", "--pub", pub, "--archive", c.path("junk.kva")); v["problem"] != "bad_archive" {
		t.Fatalf("junk archive: %v", v)
	}
	if r := c.run("verify-chain", "--pub", pub, "--archive", c.path("junk.kva")); !strings.Contains(r.stderr, "Try: an --archive file") {
		t.Fatalf("junk archive: no hint about archives:\n%s", r.stderr)
	}

	// The archived database opens as a writer and read-only; the copy
	// from before the archive is a rollback.
	c.must(0, "status")
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "after archive")
	copyFile(t, c.path("pre-archive.db"), c.env[envDB])
	r := c.must(ExitIntegrity, "status")
	if !strings.Contains(r.stderr, "rollback detected") {
		t.Fatalf("pre-archive copy: %s", r)
	}
	if v = c.json(ExitIntegrity, "verify-chain", "--pub", pub); v["problem"] != "rollback_detected" {
		t.Fatalf("verify-chain of the pre-archive copy: %v", v)
	}
}

// Ensure that observe events filters by scope, kind and seq range.
func TestObserveEventsFilters(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "r")
	c.must(0, "scope", "create", "--scope", "other")
	events := func(args ...string) []map[string]any {
		t.Helper()
		out := c.json(0, append([]string{"observe", "events"}, args...)...)
		var evs []map[string]any
		for _, e := range out["events"].([]any) {
			evs = append(evs, e.(map[string]any))
		}
		return evs
	}
	if evs := events("--kind", "hold"); len(evs) != 1 || evs[0]["kind"] != "hold" {
		t.Fatalf("--kind hold: %v", evs)
	}
	if evs := events("--kind", "hold", "--kind", "activate"); len(evs) != 2 {
		t.Fatalf("--kind hold --kind activate: %v", evs)
	}
	if evs := events("--scope", "other"); len(evs) != 1 || evs[0]["kind"] != "scope_created" {
		t.Fatalf("--scope other: %v", evs)
	}
	if evs := events("--since", "2", "--until", "3"); len(evs) != 2 || evs[0]["seq"].(float64) != 2 || evs[1]["seq"].(float64) != 3 {
		t.Fatalf("--since 2 --until 3: %v", evs)
	}
	c.must(ExitUsage, "observe", "events", "--since", "3", "--until", "2")
	c.must(ExitUsage, "observe", "events", "--interval", "1s")
	if r := c.must(ExitUsage, "observe", "events", "--kind", "holds"); !strings.Contains(r.stderr, "unknown --kind \"holds\"") {
		t.Fatalf("a mistyped kind: %s", r)
	}
}

// syncBuffer is a writer that a test reads while the command writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// follow runs observe events --follow --json --kind hold with extra args
// while hold(i) commits three holds, then interrupts it and checks that it
// printed exactly those holds, in order, and exited 0.
func (c *cli) follow(extra []string, hold func(i int)) {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout syncBuffer
	done := make(chan int, 1)
	go func() {
		m := Main{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: io.Discard,
			Getenv: func(k string) string { return c.env[k] }}
		done <- m.Run(ctx, append([]string{"observe", "events", "--follow", "--interval", "20ms", "--json", "--kind", "hold"}, extra...))
	}()
	for i := range 3 {
		hold(i)
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(stdout.String(), "\n") < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("follow exited %d", code)
	}
	sc := bufio.NewScanner(strings.NewReader(stdout.String()))
	var n int
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if e["kind"] != "hold" || !strings.Contains(e["note"].(string), fmt.Sprintf("hold %d", n)) {
			t.Fatalf("line %d: %v", n, e)
		}
		n++
	}
	if n != 3 {
		t.Fatalf("follow printed %d holds, want 3:\n%s", n, stdout.String())
	}
}

// Ensure that observe events --follow prints entries committed while it
// runs, holds no lock between polls (writers, which need the exclusive
// lock, proceed), and exits 0 when interrupted.
func TestObserveEventsFollow(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.follow(nil, func(i int) {
		c.must(0, "hold", "--scope", fixtureScope, "--reason", fmt.Sprintf("hold %d", i), "--lock-timeout", "5s")
	})
}

// Ensure that observe events --follow polls a served receiver too.
func TestObserveEventsFollow_Served(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.pki("t")
	sock := filepath.Join(socketDir(t), "admin.sock")
	rn := c.serve("--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
		"--client-ca", c.path("t-ca.crt"), "--admin", spiffeOperator, "--admin-socket", sock,
		"--admin-uid", fmt.Sprint(os.Getuid()))
	c.follow([]string{"--server", "unix://" + sock}, func(i int) {
		c.must(0, "hold", "--scope", fixtureScope, "--reason", fmt.Sprintf("hold %d", i), "--server", "unix://"+sock)
	})
	if code := rn.wait(t); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
}

// Ensure that a follower whose unread entries were archived between two
// reads says so and exits 1, not 4: nothing was tampered with.
func TestObserveEventsFollow_ArchivedBetweenReads(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	cf := commonFlags{name: "observe events", db: c.env[envDB], lockTimeout: time.Second}
	fw := eventFollower{p: newJSONLines(io.Discard)}
	if _, err := fw.poll(context.Background(), &cf, &remoteFlags{}, func(string) {}); err != nil || fw.last == nil {
		t.Fatalf("first read: %v", err)
	}
	seen := fw.last.Seq
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "one")
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "two")
	c.must(0, "audit", "archive", "--before", fmt.Sprint(seen+1), "--out", c.path("one.kva"))
	_, err := fw.poll(context.Background(), &cf, &remoteFlags{}, func(string) {})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("entries %d to %d are no longer in the database", seen+1, seen+1)) ||
		exitCode(err) != ExitError {
		t.Fatalf("second read: %v (exit %d)", err, exitCode(err))
	}
}
