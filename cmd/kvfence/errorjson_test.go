package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// errorOutput decodes stdout as exactly one {"error":{...}} object.
func errorOutput(t *testing.T, r result) errorBodyJSON {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	var out errorJSON
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("stdout is not an error object: %v\n%s", err, r)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("stdout holds more than one JSON value:\n%s", r)
	}
	if out.Error.Code == "" || out.Error.Message == "" {
		t.Fatalf("error object without code or message:\n%s", r)
	}
	return out.Error
}

// Ensure that with --json, anywhere on the command line, every kind of
// failure exits with its code and writes one error object to stdout whose
// code is the documented one, and whose message and hint are the ones on
// stderr.
func TestErrorJSON(t *testing.T) {
	scopeArgs := func(c *cli, extra ...string) []string {
		return append([]string{"activate", "--scope", fixtureScope, "--executor", "worker-b", "--claim", "c",
			"--request", c.path("req.cbor")}, extra...)
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, c *cli) []string
		exit  int
		code  string
		// stderr is a substring that the message must carry.
		stderr string
	}{
		{"unknown command", func(t *testing.T, c *cli) []string { return []string{"frobnicate", "--json"} },
			ExitUsage, "usage", "unknown command"},
		{"unknown flag", func(t *testing.T, c *cli) []string { return []string{"status", "--json", "--frob"} },
			ExitUsage, "usage", "not defined"},
		{"missing --db", func(t *testing.T, c *cli) []string { return []string{"status", "--json"} },
			ExitUsage, "usage", "--db is required"},
		{"json flag before the command's flags", func(t *testing.T, c *cli) []string {
			return []string{"status", "-json=true", "--db", c.path("none.db")}
		}, ExitError, "not_initialized", "not initialized"},
		{"scope exists", func(t *testing.T, c *cli) []string {
			c.receiver()
			return []string{"scope", "create", "--json", "--scope", fixtureScope}
		}, ExitDenied, "scope_exists", "scope already exists"},
		{"target exists", func(t *testing.T, c *cli) []string {
			c.receiver()
			return []string{"target", "create", "--scope", fixtureScope, "--target", fixtureScope, "--value", "x", "--json"}
		}, ExitDenied, "target_exists", "target already exists"},
		{"activate an open scope", func(t *testing.T, c *cli) []string {
			c.receiver()
			c.activate("worker-a", "claim-a", "a.cbor")
			return scopeArgs(c, "--json")
		}, ExitDenied, "not_held", "not held"},
		{"epoch mismatch", func(t *testing.T, c *cli) []string {
			c.receiver()
			c.must(0, "hold", "--scope", fixtureScope, "--reason", "r")
			return scopeArgs(c, "--epoch", "1", "--json")
		}, ExitDenied, "epoch_mismatch", "epoch mismatch"},
		{"unknown scope", func(t *testing.T, c *cli) []string {
			c.receiver()
			return []string{"hold", "--scope", "nope", "--reason", "r", "--json"}
		}, ExitDenied, "unknown_scope", "unknown scope"},
		{"unknown target", func(t *testing.T, c *cli) []string {
			c.receiver()
			return []string{"observe", "target", "nope", "--json"}
		}, ExitDenied, "unknown_target", "unknown target"},
		{"unknown receipt", func(t *testing.T, c *cli) []string {
			c.receiver()
			return []string{"observe", "receipt", "--scope", fixtureScope, "--action", "nope", "--json"}
		}, ExitDenied, "not_found", "no receipt"},
		{"recovery key is the receiver key", func(t *testing.T, c *cli) []string {
			c.must(0, "keygen", "--out", c.path("k"))
			return []string{"init", "--db", c.path("r.db"), "--anchor", c.path("r.anchor"), "--key", c.path("k"),
				"--id", "r", "--recovery-pub", c.path("k.pub"), "--json"}
		}, ExitDenied, "recovery_key_is_receiver_key", "receiver's own key"},
		{"anchor present for a lost-anchor admission", func(t *testing.T, c *cli) []string {
			c.receiver()
			return []string{"admission", "new", "--lost-anchor", "--recovery-key", c.path("recovery.key"),
				"--reason", "r", "--out", c.path("a.adm"), "--json"}
		}, ExitDenied, "anchor_present", "an anchor is present"},
		{"malformed request file", func(t *testing.T, c *cli) []string {
			c.receiver()
			c.must(0, "hold", "--scope", fixtureScope, "--reason", "r")
			return []string{"activate", "--scope", fixtureScope, "--executor", "w", "--claim", "c",
				"--request", c.write("junk.cbor", "not cbor"), "--json"}
		}, ExitUsage, "malformed_request", "malformed request"},
		{"malformed patch file", func(t *testing.T, c *cli) []string {
			return []string{"request", "build", "--action", "a", "--target", "t", "--json",
				"--patch-file", c.write("p.json", `[{"op":"remove"}]`), "--out", c.path("r.cbor")}
		}, ExitUsage, "malformed_patch", "--patch-file"},
		{"mistyped --anchor", func(t *testing.T, c *cli) []string {
			c.receiver()
			return []string{"status", "--anchor", c.path("nodir/receiver.anchor"), "--json"}
		}, ExitIntegrity, "anchor_missing", "no file exists at --anchor " + filepath.Join("$DIR", "nodir/receiver.anchor") +
			", and its directory " + filepath.Join("$DIR", "nodir") + " does not exist either"},
		{"missing anchor file", func(t *testing.T, c *cli) []string {
			c.receiver()
			return []string{"status", "--anchor=" + c.path("receiver.anchr"), "--json"}
		}, ExitIntegrity, "anchor_missing", "no file exists at --anchor $DIR/receiver.anchr ("},
		{"mistyped KVFENCE_ANCHOR", func(t *testing.T, c *cli) []string {
			c.receiver()
			c.env[envAnchor] = c.path("nodir/receiver.anchor")
			return []string{"scope", "create", "--scope", "x", "--json"}
		}, ExitIntegrity, "anchor_missing", "no file exists at --anchor $DIR/nodir/receiver.anchor, and its directory"},
		{"mistyped KVFENCE_LEDGER_ANCHOR", func(t *testing.T, c *cli) []string {
			c.receiver()
			c.must(0, "ledger", "init", "--ledger", c.path("l.db"), "--anchor", c.path("l.anchor"),
				"--key", c.path("receiver.key"), "--id", "l")
			c.env[envLedgerAnchor] = c.path("nodir/l.anchor")
			return []string{"ledger", "--json", "show", "--ledger", c.path("l.db")}
		}, ExitIntegrity, "anchor_missing", "no file exists at --anchor $DIR/nodir/l.anchor, and its directory"},
		{"rollback", func(t *testing.T, c *cli) []string {
			c.rolledBack()
			return []string{"status", "--json"}
		}, ExitIntegrity, "rollback_detected", "rollback detected"},
		{"storage busy", func(t *testing.T, c *cli) []string {
			c.receiver()
			hold(t, c)
			return []string{"status", "--lock-timeout", "20ms", "--json"}
		}, ExitBusy, "storage_busy", "storage busy"},
		{"anchor busy", func(t *testing.T, c *cli) []string {
			c.receiver()
			// Anything that can open the anchor file can lock it.
			f, err := os.Open(c.path("receiver.anchor"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			return []string{"status", "--json"}
		}, ExitBusy, "anchor_busy", "anchor file busy"},
		{"wrong key", func(t *testing.T, c *cli) []string {
			c.receiver()
			c.must(0, "keygen", "--out", c.path("other.key"))
			return []string{"scope", "create", "--scope", "x", "--key", c.path("other.key"), "--json"}
		}, ExitError, "key_mismatch", "does not match"},
		{"key readable by others", func(t *testing.T, c *cli) []string {
			c.receiver()
			if err := os.Chmod(c.path("receiver.key"), 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{"scope", "create", "--scope", "x", "--json"}
		}, ExitError, "key_permissions", "group or others"},
		{"--pub of another receiver", func(t *testing.T, c *cli) []string {
			c.receiver()
			c.must(0, "keygen", "--out", c.path("other.key"))
			return []string{"status", "--pub", c.path("other.key.pub"), "--json"}
		}, ExitError, "pub_mismatch", "differs from --pub"},
		{"not a database", func(t *testing.T, c *cli) []string {
			return []string{"status", "--db", c.write("junk.db", strings.Repeat("junk", 2048)), "--json"}
		}, ExitError, "bad_format", "not a kvfence receiver database"},
		{"--out exists", func(t *testing.T, c *cli) []string {
			return []string{"request", "build", "--action", "a", "--target", "t", "--set", "v",
				"--out", c.write("r.cbor", "keep"), "--json"}
		}, ExitError, "file_exists", "file exists"},
		{"missing input file", func(t *testing.T, c *cli) []string {
			return []string{"envelope", "build", "--scope", "s", "--epoch", "1", "--grant", "g", "--executor", "w",
				"--claim", "c", "--request", c.path("none.cbor"), "--out", c.path("e.cbor"), "--json"}
		}, ExitError, "file_not_found", "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCLI(t)
			args := tt.setup(t, c)
			r := c.run(args...)
			if r.code != tt.exit {
				t.Fatalf("got %s\nwant exit %d", r, tt.exit)
			}
			e := errorOutput(t, r)
			if e.Code != tt.code {
				t.Errorf("code %q, want %q\n%s", e.Code, tt.code, r)
			}
			if !slices.Contains(allErrorCodes(), e.Code) {
				t.Errorf("code %q is not in the documented list", e.Code)
			}
			if msg := strings.ReplaceAll(e.Message, c.dir, "$DIR"); !strings.Contains(msg, tt.stderr) {
				t.Errorf("message %q does not say %q", msg, tt.stderr)
			}
			want := "Error: " + e.Message + "\n"
			if e.Hint != "" {
				want += "Try: " + e.Hint + "\n"
			}
			if !strings.HasSuffix(r.stderr, want) {
				t.Errorf("stderr %q does not end with the JSON error's message and hint %q", r.stderr, want)
			}
			// Without --json, stdout stays empty.
			if r := c.run(withoutJSON(args)...); r.code != tt.exit || r.stdout != "" {
				t.Errorf("without --json: %s", r)
			}
		})
	}
}

// withoutJSON returns args without their --json flag.
func withoutJSON(args []string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-json") && !strings.HasPrefix(a, "--json") {
			out = append(out, a)
		}
	}
	return out
}

// Ensure that a command that already wrote its JSON result before failing
// (a denied submit) writes no second object, and that --json=false or a
// --json after "--" asks for none.
func TestErrorJSON_OneDocument(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	r := c.must(ExitDenied, "submit", "--json", "--as", "worker-b", "--envelope", c.path("a.cbor"))
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	var out map[string]any
	if err := dec.Decode(&out); err != nil || out["reason"] != "executor_mismatch" {
		t.Fatalf("submit: %v %v", err, r)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("a denied submit wrote more than its result:\n%s", r)
	}
	for _, args := range [][]string{{"status", "--json=false", "--db", c.path("none.db")},
		{"observe", "target", "--", "--json"}} {
		if r := c.run(args...); r.code == ExitOK || r.stdout != "" {
			t.Errorf("kvfence %s: %s", strings.Join(args, " "), r)
		}
	}
}

// Ensure that README's table of --json error codes lists exactly the codes
// errorCode can return, each with an exit code its errors take.
func TestErrorJSON_READMECodes(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(b, []byte("<!-- error codes -->"))
	end := bytes.Index(b, []byte("<!-- /error codes -->"))
	if start < 0 || end < start {
		t.Fatal("README has no error code table between <!-- error codes --> and <!-- /error codes -->")
	}
	// exits are the exit codes that errors with each code take.
	exits := map[string][]int{"not_acknowledged": {exitCode(kvfence.ErrNotAcknowledged)},
		"anchor_write_conflict": {exitCode(audit.ErrWriteConflict)}, "malformed_patch": {exitCode(kvfence.ErrMalformedPatch)},
		codeUsage: {ExitUsage}, codeDenied: {ExitDenied}, codeRefused: {ExitDenied}, codeIntegrity: {ExitIntegrity},
		codeWarning: {ExitWarning}, codePartial: {ExitPartial}, codeError: {ExitError}}
	for _, e := range append(append([]errorCodeEntry{}, integrityCodes...), cliCodes...) {
		exits[e.code] = append(exits[e.code], exitCode(e.err))
	}
	for _, e := range api.Sentinels {
		exits[e.Code] = append(exits[e.Code], exitCode(e.Err))
	}
	var documented []string
	for _, line := range strings.Split(string(b[start:end]), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		exit, err := strconv.Atoi(strings.TrimSpace(cells[2]))
		if err != nil {
			t.Fatalf("README row without an exit code: %s", line)
		}
		for _, f := range strings.Split(cells[1], ",") {
			code := strings.Trim(strings.TrimSpace(f), "`")
			documented = append(documented, code)
			if !slices.Contains(exits[code], exit) {
				t.Errorf("README gives %s exit %d; its errors exit %v", code, exit, exits[code])
			}
		}
	}
	codes := allErrorCodes()
	for _, code := range codes {
		if !slices.Contains(documented, code) {
			t.Errorf("code %q is not in README", code)
		}
	}
	for _, code := range documented {
		if !slices.Contains(codes, code) {
			t.Errorf("README documents %q, which errorCode never returns", code)
		}
	}
}
