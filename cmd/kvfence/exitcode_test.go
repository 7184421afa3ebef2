package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that every documented failure exits with its documented code and
// says why on stderr.
func TestExitCodes(t *testing.T) {
	tests := []struct {
		name string
		// setup prepares c and returns the arguments to run.
		setup  func(t *testing.T, c *cli) []string
		code   int
		stderr []string // substrings of stderr
	}{
		{
			name:   "missing --db",
			setup:  func(t *testing.T, c *cli) []string { return []string{"status"} },
			code:   ExitUsage,
			stderr: []string{"Error: kvfence status: --db is required", "Try: pass --db or set KVFENCE_DB"},
		},
		{
			name:   "no command",
			setup:  func(t *testing.T, c *cli) []string { return nil },
			code:   ExitUsage,
			stderr: []string{"Usage:", "Error: no command given"},
		},
		{
			name:   "unknown command",
			setup:  func(t *testing.T, c *cli) []string { return []string{"frobnicate"} },
			code:   ExitUsage,
			stderr: []string{"Error: kvfence frobnicate: unknown command", "Try: kvfence help"},
		},
		{
			name:   "unknown subcommand",
			setup:  func(t *testing.T, c *cli) []string { return []string{"scope", "delete", "--scope", "s"} },
			code:   ExitUsage,
			stderr: []string{"unknown subcommand"},
		},
		{
			name:   "unknown flag",
			setup:  func(t *testing.T, c *cli) []string { return []string{"status", "--frob"} },
			code:   ExitUsage,
			stderr: []string{"flag provided but not defined: -frob", "Try: kvfence status -h"},
		},
		{
			name:   "stray argument",
			setup:  func(t *testing.T, c *cli) []string { return []string{"status", "extra"} },
			code:   ExitUsage,
			stderr: []string{`unexpected argument "extra"`},
		},
		{
			name: "request build without a mutation",
			setup: func(t *testing.T, c *cli) []string {
				return []string{"request", "build", "--action", "a", "--target", "t", "--out", c.path("r.cbor")}
			},
			code:   ExitUsage,
			stderr: []string{"exactly one of --set, --set-file or --patch-file"},
		},
		{
			name: "target create with two values",
			setup: func(t *testing.T, c *cli) []string {
				return []string{"target", "create", "--db", c.path("x.db"), "--anchor", c.path("x.anchor"),
					"--key", c.path("k"), "--scope", "s", "--target", "t", "--value", "1", "--value-file", "f"}
			},
			code:   ExitUsage,
			stderr: []string{"mutually exclusive"},
		},
		{
			name: "privileged command without --key",
			setup: func(t *testing.T, c *cli) []string {
				return []string{"hold", "--db", c.path("x.db"), "--anchor", c.path("x.anchor"), "--scope", "s", "--reason", "r"}
			},
			code:   ExitUsage,
			stderr: []string{"--key is required", "KVFENCE_KEY"},
		},
		{
			name: "submit without --key",
			setup: func(t *testing.T, c *cli) []string {
				return []string{"submit", "--db", c.path("x.db"), "--anchor", c.path("x.anchor"), "--as", "w",
					"--envelope", c.path("e")}
			},
			code:   ExitUsage,
			stderr: []string{"kvfence submit: --key is required", "KVFENCE_KEY"},
		},
		{
			name: "anchor at the database's path",
			setup: func(t *testing.T, c *cli) []string {
				return []string{"scope", "create", "--db", c.path("x.db"), "--anchor", c.path("x.db"),
					"--key", c.path("k"), "--scope", "s"}
			},
			code:   ExitUsage,
			stderr: []string{"--anchor names the database file"},
		},
		{
			name: "verify-chain without --pub",
			setup: func(t *testing.T, c *cli) []string {
				return []string{"verify-chain", "--db", c.path("x.db"), "--anchor", c.path("x.anchor")}
			},
			code:   ExitUsage,
			stderr: []string{"kvfence verify-chain: --pub is required"},
		},
		{
			name: "recover without --recovery-pub",
			setup: func(t *testing.T, c *cli) []string {
				return []string{"recover", "--db", c.path("x.db"), "--anchor", c.path("x.anchor"),
					"--key", c.path("k"), "--admission", c.path("adm")}
			},
			code:   ExitUsage,
			stderr: []string{"kvfence recover: --recovery-pub is required"},
		},
		{
			name: "admission without its subcommand",
			setup: func(t *testing.T, c *cli) []string {
				return []string{"admission", "--db", c.path("x.db")}
			},
			code:   ExitUsage,
			stderr: []string{"kvfence admission: missing subcommand", "Try: kvfence admission -h"},
		},
		{
			name:   "help",
			setup:  func(t *testing.T, c *cli) []string { return []string{"submit", "-h"} },
			code:   ExitOK,
			stderr: []string{"Usage: kvfence submit --as W --envelope ENV.cbor"},
		},
		{
			name: "db missing",
			setup: func(t *testing.T, c *cli) []string {
				return []string{"status", "--db", c.path("nope.db")}
			},
			code:   ExitError,
			stderr: []string{"not initialized", "Try: kvfence init"},
		},
		{
			name: "db missing for submit",
			setup: func(t *testing.T, c *cli) []string {
				c.must(0, "keygen", "--out", c.path("k"))
				return []string{"submit", "--db", c.path("nope.db"), "--anchor", c.path("nope.anchor"),
					"--key", c.path("k"), "--as", "w", "--envelope", c.write("e", "x")}
			},
			code:   ExitError,
			stderr: []string{"Try: kvfence init"},
		},
		{
			name: "not a receiver database",
			setup: func(t *testing.T, c *cli) []string {
				return []string{"status", "--db", c.write("junk.db", strings.Repeat("junk", 2048))}
			},
			code:   ExitError,
			stderr: []string{"not a kvfence receiver database", "Try: check that --db"},
		},
		{
			name: "recovery key equal to the receiver key",
			setup: func(t *testing.T, c *cli) []string {
				c.must(0, "keygen", "--out", c.path("k"))
				return []string{"init", "--db", c.path("r.db"), "--anchor", c.path("r.anchor"), "--key", c.path("k"),
					"--id", "r", "--recovery-pub", c.path("k.pub")}
			},
			code:   ExitDenied,
			stderr: []string{"recovery key must be a separately held key"},
		},
		{
			name: "init over an existing file",
			setup: func(t *testing.T, c *cli) []string {
				c.receiver()
				return []string{"init", "--id", "again", "--anchor", c.path("new.anchor"), "--recovery-pub", c.path("recovery.key.pub")}
			},
			code:   ExitError,
			stderr: []string{"already initialized"},
		},
		{
			name: "init over an existing anchor",
			setup: func(t *testing.T, c *cli) []string {
				c.receiver()
				return []string{"init", "--id", "again", "--db", c.path("new.db"), "--recovery-pub", c.path("recovery.key.pub")}
			},
			code:   ExitError,
			stderr: []string{"anchor already holds a checkpoint", "Try: the anchor file already holds a checkpoint"},
		},
		{
			name: "storage busy",
			setup: func(t *testing.T, c *cli) []string {
				c.receiver()
				hold(t, c)
				return []string{"status", "--lock-timeout", "50ms"}
			},
			code:   ExitBusy,
			stderr: []string{"storage busy", "Try: wait"},
		},
		{
			name: "storage busy for a privileged command",
			setup: func(t *testing.T, c *cli) []string {
				c.receiver()
				hold(t, c)
				return []string{"hold", "--scope", fixtureScope, "--reason", "r", "--lock-timeout", "50ms"}
			},
			code:   ExitBusy,
			stderr: []string{"storage busy"},
		},
		{
			name: "submit as another worker",
			setup: func(t *testing.T, c *cli) []string {
				c.receiver()
				c.activate("worker-a", "claim-a", "a.cbor")
				return []string{"submit", "--as", "worker-b", "--envelope", c.path("a.cbor"), "--json"}
			},
			code:   ExitDenied,
			stderr: []string{"request denied by the fence: executor_mismatch"},
		},
		{
			name: "malformed envelope is a denial",
			setup: func(t *testing.T, c *cli) []string {
				c.receiver()
				return []string{"submit", "--as", "worker-a", "--envelope", c.write("junk", "not cbor")}
			},
			code:   ExitDenied,
			stderr: []string{"malformed_envelope"},
		},
		{
			name: "key file mode 0644",
			setup: func(t *testing.T, c *cli) []string {
				c.receiver()
				if err := os.Chmod(c.path("receiver.key"), 0o644); err != nil {
					t.Fatal(err)
				}
				return []string{"scope", "create", "--scope", "other"}
			},
			code:   ExitError,
			stderr: []string{"accessible by group or others", "Try: chmod 600"},
		},
		{
			name: "key file mode 0644 at init",
			setup: func(t *testing.T, c *cli) []string {
				c.must(0, "keygen", "--out", c.path("k"))
				if err := os.Chmod(c.path("k"), 0o640); err != nil {
					t.Fatal(err)
				}
				return []string{"init", "--db", c.path("r.db"), "--anchor", c.path("r.anchor"), "--key", c.path("k"),
					"--id", "r", "--no-recovery-key"}
			},
			code:   ExitError,
			stderr: []string{"accessible by group or others"},
		},
		{
			name: "wrong key for hold",
			setup: func(t *testing.T, c *cli) []string {
				c.receiver()
				c.must(0, "keygen", "--out", c.path("other.key"))
				return []string{"hold", "--scope", fixtureScope, "--reason", "r", "--key", c.path("other.key")}
			},
			code:   ExitError,
			stderr: []string{"signing key does not match the receiver's recorded key", "Try: pass the receiver's own private key"},
		},
		{
			name: "wrong key from the environment",
			setup: func(t *testing.T, c *cli) []string {
				c.receiver()
				c.must(0, "keygen", "--out", c.path("other.key"))
				c.env[envKey] = c.path("other.key")
				return []string{"activate", "--scope", fixtureScope, "--executor", "w", "--claim", "c",
					"--request", c.path("req.cbor")}
			},
			code:   ExitError,
			stderr: []string{"does not match"},
		},
		{
			name: "--pub of another receiver",
			setup: func(t *testing.T, c *cli) []string {
				c.receiver()
				c.must(0, "keygen", "--out", c.path("other.key"))
				return []string{"status", "--pub", c.path("other.key.pub")}
			},
			code:   ExitError,
			stderr: []string{"differs from --pub"},
		},
		{
			name: "activate an open scope",
			setup: func(t *testing.T, c *cli) []string {
				c.receiver()
				c.activate("worker-a", "claim-a", "a.cbor")
				return []string{"activate", "--scope", fixtureScope, "--executor", "worker-b", "--claim", "c",
					"--request", c.path("req.cbor")}
			},
			code:   ExitDenied,
			stderr: []string{"not held", "Try: kvfence hold"},
		},
		{
			name: "activate at a stale epoch",
			setup: func(t *testing.T, c *cli) []string {
				c.receiver()
				c.must(0, "hold", "--scope", fixtureScope, "--reason", "r")
				return []string{"activate", "--scope", fixtureScope, "--executor", "worker-b", "--claim", "c",
					"--request", c.path("req.cbor"), "--epoch", "1"}
			},
			code:   ExitDenied,
			stderr: []string{"epoch mismatch"},
		},
		{
			name: "--out never overwrites",
			setup: func(t *testing.T, c *cli) []string {
				c.write("req.cbor", "keep me")
				return []string{"request", "build", "--action", "a", "--target", "t", "--set", "v",
					"--out", c.path("req.cbor")}
			},
			code:   ExitError,
			stderr: []string{"file exists", "Try: choose another --out path"},
		},
		{
			name: "observe an unknown target",
			setup: func(t *testing.T, c *cli) []string {
				c.receiver()
				return []string{"observe", "target", "nope"}
			},
			code:   ExitDenied,
			stderr: []string{"unknown target"},
		},
		{
			name: "observe a missing receipt",
			setup: func(t *testing.T, c *cli) []string {
				c.receiver()
				return []string{"observe", "receipt", "--scope", fixtureScope, "--action", "nope"}
			},
			code:   ExitDenied,
			stderr: []string{"not found"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCLI(t)
			args := tt.setup(t, c)
			r := c.run(args...)
			if r.code != tt.code {
				t.Fatalf("got %s\nwant exit %d", r, tt.code)
			}
			for _, s := range tt.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
				}
			}
			if tt.code == ExitUsage || tt.code == ExitError || tt.code == ExitBusy {
				if r.stdout != "" {
					t.Errorf("a failed command wrote to stdout: %q", r.stdout)
				}
			}
		})
	}
}

// hold keeps the receiver's database open for writing, and so locked,
// until the test ends.
func hold(t *testing.T, c *cli) {
	t.Helper()
	priv, err := keyfile.LoadPrivate(c.env[envKey])
	if err != nil {
		t.Fatal(err)
	}
	r, err := kvfence.Open(c.env[envDB], &kvfence.Options{Key: priv, Anchor: audit.FileAnchor{Path: c.env[envAnchor]}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
}

// Ensure that a denied submit prints its result with the reason on stdout
// and leaves the target untouched.
func TestSubmitDeniedExecutorMismatch(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	out := c.json(ExitDenied, "submit", "--as", "worker-b", "--envelope", c.path("a.cbor"))
	if out["outcome"] != "denied" || out["reason"] != "executor_mismatch" {
		t.Fatalf("submit: %v", out)
	}
	out = c.json(0, "observe", "target", fixtureScope)
	if out["revision"].(float64) != 1 {
		t.Fatalf("target changed: %v", out)
	}
}

// Ensure that KVFENCE_DB is a fallback for --db and that --db wins over it.
func TestEnvFallback(t *testing.T) {
	c := newCLI(t)
	c.receiver() // sets KVFENCE_DB and KVFENCE_KEY
	good := c.env[envDB]
	missing := c.path("missing.db")

	c.must(ExitOK, "status")
	c.env[envDB] = missing
	c.must(ExitError, "status")
	c.must(ExitOK, "status", "--db", good)
	c.env[envDB] = good
	c.must(ExitError, "status", "--db", missing)
	// A flag given as empty wins too: it does not fall back.
	c.must(ExitUsage, "status", "--db", "")

	// KVFENCE_KEY is the fallback for --key, and --key wins over it.
	c.must(0, "keygen", "--out", c.path("other.key"))
	c.must(ExitOK, "scope", "create", "--scope", "from-env")
	c.env[envKey] = c.path("other.key")
	c.must(ExitError, "scope", "create", "--scope", "wrong-key")
	c.must(ExitOK, "scope", "create", "--scope", "from-flag", "--key", c.path("receiver.key"))
	c.env[envKey] = c.path("receiver.key")

	// KVFENCE_ANCHOR is the fallback for --anchor, and --anchor wins over
	// it: a writer with no anchor at all is a usage error, one pointed at
	// a missing anchor an integrity error, and the anchor is never created.
	anchor := c.env[envAnchor]
	delete(c.env, envAnchor)
	c.must(ExitUsage, "scope", "create", "--scope", "no-anchor")
	c.must(ExitIntegrity, "scope", "create", "--scope", "missing-anchor", "--anchor", c.path("missing.anchor"))
	if _, err := os.Stat(c.path("missing.anchor")); !os.IsNotExist(err) {
		t.Fatalf("a writer created a missing anchor: %v", err)
	}
	c.must(ExitOK, "scope", "create", "--scope", "anchor-from-flag", "--anchor", anchor)
	c.env[envAnchor] = c.path("missing.anchor")
	c.must(ExitOK, "scope", "create", "--scope", "flag-wins", "--anchor", anchor)
	c.must(ExitIntegrity, "status")
	c.env[envAnchor] = anchor
	// An observer given --anchor "" does not fall back and checks nothing.
	out := c.json(ExitOK, "status", "--anchor", "")
	if out["anchor_checked"] != false {
		t.Fatalf("status without an anchor: %v", out)
	}
	out = c.json(ExitOK, "status")
	if out["anchor_checked"] != true {
		t.Fatalf("status with an anchor: %v", out)
	}
}

// Ensure that observation commands take only a shared lock: two can run
// while another reader holds the database.
func TestObserveIsReadOnly(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	r, err := kvfence.Open(c.env[envDB], &kvfence.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c.must(ExitOK, "status", "--lock-timeout", "50ms")
	c.must(ExitOK, "observe", "target", fixtureScope, "--lock-timeout", "50ms")
	c.must(ExitOK, "observe", "events", "--since", "2", "--lock-timeout", "50ms")
	// A writer cannot.
	c.must(ExitBusy, "submit", "--as", "w", "--envelope", c.write("e", "x"), "--lock-timeout", "50ms")
}

// Ensure that a value that is not UTF-8 is reported as null text and
// base64, and printed as base64 for humans.
func TestObserveBinaryValue(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	bin := c.path("bin")
	if err := os.WriteFile(bin, []byte{0xff, 0x00, 0x41}, 0o644); err != nil {
		t.Fatal(err)
	}
	c.must(0, "target", "create", "--scope", fixtureScope, "--target", "bin", "--value-file", bin)
	out := c.json(0, "observe", "target", "bin")
	if v, ok := out["value"]; !ok || v != nil {
		t.Errorf("value = %v, want null", v)
	}
	if out["value_b64"] != "/wBB" {
		t.Errorf("value_b64 = %v", out["value_b64"])
	}
	r := c.must(0, "observe", "target", "bin")
	if !strings.Contains(r.stdout, "value (base64)\n/wBB\n") {
		t.Errorf("text output:\n%s", r.stdout)
	}
}

// Ensure that hold names several scopes in one transaction and refuses an
// unknown one without holding the others.
func TestHoldSeveralScopes(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.must(0, "scope", "create", "--scope", "second")
	r := c.must(ExitDenied, "hold", "--scope", fixtureScope, "--scope", "nope", "--reason", "r")
	if !strings.Contains(r.stderr, "unknown scope") {
		t.Errorf("stderr: %s", r.stderr)
	}
	st := c.json(0, "status", "--scope", fixtureScope)
	if st["scopes"].([]any)[0].(map[string]any)["epoch"].(float64) != 1 {
		t.Fatalf("a failed hold changed the epoch: %v", st)
	}
	out := c.json(0, "hold", "--scope", fixtureScope, "--scope", "second", "--reason", "r")
	scopes := out["scopes"].([]any)
	if len(scopes) != 2 {
		t.Fatalf("hold: %v", out)
	}
	for _, s := range scopes {
		s := s.(map[string]any)
		if s["previous_epoch"].(float64) != 1 || s["epoch"].(float64) != 2 || s["mode"] != "held" {
			t.Errorf("held scope: %v", s)
		}
	}
}

// Ensure that stdin can carry the value and the envelope.
func TestStdin(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	var stdout, stderr strings.Builder
	m := Main{Stdin: strings.NewReader("from stdin"), Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string { return c.env[k] }}
	if code := m.Run(t.Context(), []string{"target", "create", "--scope", fixtureScope, "--target", "s",
		"--value-file", "-"}); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := c.json(0, "observe", "target", "s")
	if out["value"] != "from stdin" {
		t.Fatalf("value = %v", out["value"])
	}
}

// Ensure that help works for every command without a database.
func TestHelp(t *testing.T) {
	c := newCLI(t)
	r := c.must(0, "help")
	if !strings.Contains(r.stdout, "kvfence <command> [arguments]") {
		t.Errorf("help:\n%s", r.stdout)
	}
	for _, cmd := range []string{"keygen", "init", "scope", "scope create", "target create", "request build",
		"activate", "envelope build", "submit", "hold", "status", "observe", "verify-chain", "admission",
		"admission new", "recover", "bench"} {
		r := c.must(0, append([]string{"help"}, strings.Fields(cmd)...)...)
		if !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("help %s:\n%s", cmd, r.stdout)
		}
		r = c.must(0, append(strings.Fields(cmd), "-h")...)
		if !strings.Contains(r.stderr, "Usage:") {
			t.Errorf("%s -h:\n%s", cmd, r.stderr)
		}
	}
}

// Ensure that a busy database is reported after about --lock-timeout, not
// after the default.
func TestLockTimeoutIsShort(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	hold(t, c)
	start := time.Now()
	c.must(ExitBusy, "observe", "events", "--lock-timeout", "50ms")
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("busy after %v, want about 50ms", d)
	}
}

// Ensure that init records a separate recovery key and checks --pub
// against --key.
func TestInitKeys(t *testing.T) {
	c := newCLI(t)
	c.must(0, "keygen", "--out", c.path("k"))
	c.must(0, "keygen", "--out", c.path("rk"))
	c.must(0, "keygen", "--out", c.path("other"))
	c.must(ExitError, "init", "--db", c.path("r.db"), "--anchor", c.path("r.anchor"), "--key", c.path("k"), "--id", "r",
		"--pub", c.path("other.pub"), "--recovery-pub", c.path("rk.pub"))
	for _, f := range []string{"r.db", "r.anchor"} {
		if _, err := os.Stat(c.path(f)); !os.IsNotExist(err) {
			t.Fatalf("a refused init left %s behind: %v", f, err)
		}
	}
	out := c.json(0, "init", "--db", c.path("r.db"), "--anchor", c.path("r.anchor"), "--key", c.path("k"), "--id", "r",
		"--pub", c.path("k.pub"), "--recovery-pub", c.path("rk.pub"))
	pub, err := os.ReadFile(c.path("rk.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if rk, _ := out["recovery_key"].(string); rk == "" || !strings.HasPrefix(string(pub), rk) {
		t.Fatalf("recovery_key = %v, want the key in %q", out["recovery_key"], pub)
	}
	r, err := kvfence.Open(c.path("r.db"), &kvfence.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.RecoveryKey() == nil || r.ID() != "r" {
		t.Fatalf("receiver %q recorded recovery key %x", r.ID(), r.RecoveryKey())
	}
}
