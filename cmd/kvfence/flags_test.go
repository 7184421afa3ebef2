package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/kvfence"
)

// runIn runs the program with stdin.
func (c *cli) runIn(stdin []byte, args ...string) result {
	c.t.Helper()
	var stdout, stderr bytes.Buffer
	m := Main{Stdin: bytes.NewReader(stdin), Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string { return c.env[k] }}
	code := m.Run(context.Background(), args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// noDashFile fails the test if a file named "-" was created in the
// working directory, as "--out -" once did.
func noDashFile(t *testing.T) {
	t.Helper()
	for _, name := range []string{"-", "-.pub", "-.crt", "-.key"} {
		if _, err := os.Lstat(name); err == nil {
			os.Remove(name)
			t.Errorf("a file named %q was created", name)
		}
	}
}

// Ensure that "--out -" writes the exact bytes to stdout and the summary
// to stderr, for every command that writes one artefact, and that the
// bytes work downstream; that it is refused with --json, and refused for
// the commands that write a private key and a second file.
func TestOutStdout(t *testing.T) {
	c := newCLI(t)
	c.rolledBack()
	t.Cleanup(func() { noDashFile(t) })

	r := c.must(0, "request", "build", "--action", "a", "--target", fixtureScope, "--set", "v", "--out", "-")
	req, err := kvfence.DecodeRequest([]byte(r.stdout), 0)
	if err != nil || req.Action != "a" || !strings.Contains(r.stderr, "request sha256") {
		t.Fatalf("request build --out -: %v\n%s", err, r)
	}
	c.must(0, "request", "build", "--action", "a", "--target", fixtureScope, "--set", "v", "--out", c.path("a.req"))
	if want := readFile(t, c.path("a.req")); r.stdout != string(want) {
		t.Fatalf("--out - wrote other bytes than --out FILE")
	}

	r = c.runIn([]byte(r.stdout), "envelope", "build", "--scope", fixtureScope, "--epoch", "2", "--grant", "g",
		"--executor", "w", "--claim", "c", "--request", "-", "--out", "-")
	env, err := kvfence.DecodeEnvelope([]byte(r.stdout), 0)
	if r.code != 0 || err != nil || env.Scope != fixtureScope || !strings.Contains(r.stderr, "envelope") {
		t.Fatalf("envelope build --out -: %v\n%s", err, r)
	}

	// The rolled-back database is re-admitted with an admission that
	// went through stdout.
	r = c.must(0, "admission", "new", "--recovery-key", c.path("recovery.key"), "--reason", "restored", "--out", "-")
	if !strings.Contains(r.stderr, "recovery key") {
		t.Fatalf("admission new --out -: the summary is not on stderr\n%s", r)
	}
	if r := c.runIn([]byte(r.stdout), "recover", "--admission", "-", "--recovery-pub", c.path("recovery.key.pub")); r.code != 0 {
		t.Fatalf("recover with the admission from stdout: %s", r)
	}

	for _, args := range [][]string{
		{"request", "build", "--action", "a", "--target", "t", "--set", "v", "--out", "-", "--json"},
		{"envelope", "build", "--scope", "s", "--epoch", "1", "--grant", "g", "--executor", "w", "--claim", "c",
			"--request", c.path("a.req"), "--out", "-", "--json"},
		{"keygen", "--out", "-"},
		{"cert", "ca", "--out", "-"},
	} {
		r := c.must(ExitUsage, args...)
		if !strings.Contains(r.stderr, "--out -") {
			t.Errorf("kvfence %s: %s", strings.Join(args, " "), r)
		}
		if strings.Contains(r.stdout, "BEGIN") || strings.Contains(r.stdout, "PRIVATE") {
			t.Errorf("kvfence %s wrote key material to stdout", strings.Join(args, " "))
		}
	}
}

// Ensure that --lock-timeout 0 means "do not wait": a busy database is
// reported at once, not after the default second, and a free one opens.
func TestLockTimeoutZero(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.must(0, "status", "--lock-timeout", "0")
	c.must(0, "scope", "create", "--scope", "second", "--lock-timeout", "0s")
	c.must(ExitUsage, "status", "--lock-timeout", "soon")
	hold(t, c)
	for _, args := range [][]string{
		{"status", "--lock-timeout", "0"},
		{"hold", "--scope", fixtureScope, "--reason", "r", "--lock-timeout=0"},
		{"observe", "events", "--lock-timeout", "-1s"},
	} {
		start := time.Now()
		c.must(ExitBusy, args...)
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("kvfence %s: busy after %v, want at once", strings.Join(args, " "), d)
		}
	}
}

// Ensure that an unknown flag suggests the nearest known one when it looks
// like a typo of it, and nothing when none is near.
func TestUnknownFlagSuggestion(t *testing.T) {
	tests := []struct {
		args []string
		want string // "" for no suggestion
	}{
		{[]string{"activate", "--scop", "s"}, "--scope"},
		{[]string{"activate", "--sope", "s"}, "--scope"},
		{[]string{"status", "--jsn"}, "--json"},
		{[]string{"status", "-lock-timout", "1s"}, "--lock-timeout"},
		{[]string{"hold", "--reasn", "r"}, "--reason"},
		{[]string{"observe", "receipt", "--acton", "a"}, "--action"},
		{[]string{"request", "build", "--patchfile", "p"}, "--patch-file"},
		{[]string{"ledger", "show", "--ledgr", "l"}, "--ledger"},
		{[]string{"status", "--frobnicate"}, ""},
		{[]string{"status", "--x"}, ""},
		{[]string{"statsu"}, "status"},
		{[]string{"verify-chian"}, "verify-chain"},
		{[]string{"request", "shwo", "f"}, "show"},
		{[]string{"frobnicate"}, ""},
		{[]string{"request", "frobnicate"}, ""},
		{[]string{"status", "--lcok-timeout", "1s"}, "--lock-timeout"},
	}
	for _, tt := range tests {
		c := newCLI(t)
		r := c.must(ExitUsage, tt.args...)
		got := strings.Contains(r.stderr, "did you mean")
		want := "(did you mean " + tt.want + "?)"
		if tt.want == "" && got || tt.want != "" && !strings.Contains(r.stderr, want) {
			t.Errorf("kvfence %s: want suggestion %q:\n%s", strings.Join(tt.args, " "), tt.want, r.stderr)
		}
	}
}

// Ensure that a command with subcommands finds its subcommand after flags,
// as in "observe --json target K", for every such command, and that flags
// alone still say the subcommand is missing.
func TestSubcommandAfterFlags(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.must(0, "ledger", "init", "--ledger", c.path("l.db"), "--anchor", c.path("l.anchor"), "--key", c.path("receiver.key"),
		"--id", "l")
	for _, args := range [][]string{
		{"observe", "--json", "target", fixtureScope},
		{"observe", "--json", "--lock-timeout", "1s", "events"},
		{"observe", "--scope", fixtureScope, "--json", "receipt", "--action", "raise-retention"},
		{"scope", "--json", "create", "--scope", "second"},
		{"target", "--scope", "second", "create", "--target", "t2", "--value", "v", "--json"},
		{"request", "--json", "build", "--action", "a", "--target", "t", "--set", "v", "--out", c.path("r2")},
		{"envelope", "--json", "build", "--scope", "s", "--epoch", "1", "--grant", "g", "--executor", "w", "--claim", "c",
			"--request", c.path("r2"), "--out", c.path("e2")},
		{"ledger", "--json", "--ledger", c.path("l.db"), "show"},
		{"cert", "--json", "ca", "--out", c.path("ca")},
	} {
		want := ExitOK
		if args[0] == "observe" && args[len(args)-1] == "raise-retention" {
			want = ExitDenied // no receipt yet: found the subcommand, refused the lookup
		}
		r := c.run(args...)
		if r.code != want || !strings.HasPrefix(r.stdout, "{") {
			t.Errorf("kvfence %s: %s", strings.Join(args, " "), r)
		}
	}
	for _, args := range [][]string{{"observe", "--json"}, {"scope", "--scope", "s"}, {"ledger", "--json"}} {
		if r := c.must(ExitUsage, args...); !strings.Contains(r.stderr, "missing") {
			t.Errorf("kvfence %s: %s", strings.Join(args, " "), r)
		}
	}
}
