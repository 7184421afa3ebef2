package main

import (
	"os"
	"strings"
	"testing"
	"unicode"

	"github.com/fxamacker/cbor/v2"

	"github.com/kvfence/kvfence/kvfence"
)

// unprintable returns the first rune of s that does not print as itself
// (a format character such as a zero-width space or a bidirectional
// override, a line separator, a C1 control), or -1.
func unprintable(s string) rune {
	for _, r := range s {
		if r != '\n' && r != '\t' && !unicode.IsPrint(r) {
			return r
		}
	}
	return -1
}

// Ensure that request show and envelope show never print an identifier
// with a character that would not print as itself: the wire's identifier
// rule refuses control characters, but a zero-width space or a line
// separator passes it, and an approver reading "deploy" must be able to
// tell it from "deploy" followed by a zero-width space (another action, so
// not answered already_applied by the receiver).
func TestRedteam_ShowIdentifiersPrintAsThemselves(t *testing.T) {
	c := newCLI(t)
	req, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: "deploy\u200b", Target: "prod\u2028x",
		Set: func() *[]byte { b := []byte(`{}`); return &b }()})
	if err != nil {
		t.Fatal(err)
	}
	env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: "s\ufeff", Epoch: 1, Grant: "g\u00ad",
		Executor: "spiffe://example.org/w\u200e", Claim: "c\u2060", Request: req})
	if err == nil {
		// A bidirectional mark is refused by the identifier rule; keep
		// the others.
		t.Fatalf("an executor with U+200E was accepted")
	}
	env, err = kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: "s\ufeff", Epoch: 1, Grant: "g\u00ad",
		Executor: "spiffe://example.org/w\u3000", Claim: "c\u2060", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		data []byte
	}{
		{"request show", []string{"request", "show"}, req},
		{"envelope show", []string{"envelope", "show"}, env},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := c.path(strings.ReplaceAll(tc.name, " ", "-") + ".cbor")
			if err := os.WriteFile(p, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			r := c.must(ExitOK, append(tc.args, p)...)
			if u := unprintable(r.stdout); u != -1 {
				t.Fatalf("stdout holds U+%04X unescaped:\n%s", u, r.stdout)
			}
			if !strings.Contains(r.stdout, `deploy\u200b`) {
				t.Fatalf("stdout does not show the action's zero-width space:\n%s", r.stdout)
			}
		})
	}
}

// Ensure that a request file whose patch is refused does not bring its
// strings into the error message unescaped.
func TestRedteam_ShowPatchErrorEscapesStrings(t *testing.T) {
	c := newCLI(t)
	// A lone surrogate escape, next to a right-to-left override and a C1
	// control, which JSON allows in a string as they are.
	patch := []byte("[{\"op\":\"add\",\"path\":\"/a\",\"value\":\"\\ud800\u202e\u009b31m\"}]")
	req, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: "a", Target: "t", Patch: patch})
	if err == nil {
		t.Fatalf("EncodeRequest accepted the patch")
	}
	// Encode without the check: the bytes a hostile file holds.
	req = hostileRequest(t, patch)
	p := c.path("req.cbor")
	if err := os.WriteFile(p, req, 0o644); err != nil {
		t.Fatal(err)
	}
	r := c.must(ExitUsage, "request", "show", p)
	if !strings.Contains(r.stderr, "surrogate") {
		t.Fatalf("stderr does not name the problem: %s", r.stderr)
	}
	if u := unprintable(r.stderr); u != -1 {
		t.Fatalf("stderr holds U+%04X unescaped: %q", u, r.stderr)
	}
}

// hostileRequest encodes a request as the wire does, without the checks
// EncodeRequest makes: the bytes of a file someone else made.
func hostileRequest(t *testing.T, patch []byte) []byte {
	t.Helper()
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := em.Marshal(&kvfence.Request{V: 1, Action: "a", Target: "t", Patch: patch})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Ensure that whether a failure's error object goes to stdout follows the
// --json the command itself read: the flag package takes a flag's last
// value, so "--json=false --json" asks for JSON and "--json --json=false"
// does not.
func TestRedteam_JSONErrorFollowsTheLastJSONFlag(t *testing.T) {
	c := newCLI(t)
	missing := c.path("missing.db")
	for _, tc := range []struct {
		flags    []string
		wantJSON bool
	}{
		{[]string{"--json=false", "--json"}, true},
		{[]string{"--json", "--json=false"}, false},
		{[]string{"--json=true"}, true},
		{[]string{"--json=false"}, false},
	} {
		t.Run(strings.Join(tc.flags, " "), func(t *testing.T) {
			r := c.run(append([]string{"status", "--db", missing}, tc.flags...)...)
			if r.code == ExitOK {
				t.Fatalf("status of a missing database succeeded: %s", r)
			}
			if tc.wantJSON {
				errorOutput(t, r)
			} else if r.stdout != "" {
				t.Fatalf("text mode wrote to stdout:\n%s", r.stdout)
			}
		})
	}
}
