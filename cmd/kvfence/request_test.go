package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that request build refuses a patch the receiver would refuse, as a
// usage error, and writes no request file; a conforming patch is built.
func TestRequestBuild_PatchValidation(t *testing.T) {
	tests := []struct {
		name, patch string
		code        int
		stderr      string
	}{
		{"conforming", `[{"op":"test","path":"/a/0","value":1},{"op":"add","path":"/a/-","value":2}]`, ExitOK, ""},
		{"test without value", `[{"op":"test","path":"/a"}]`, ExitUsage, `no "value" member`},
		{"duplicate op", `[{"op":"test","path":"/a","value":1,"op":"replace"}]`, ExitUsage, `"op" twice`},
		{"duplicate name inside value", `[{"op":"add","path":"/a","value":{"k":1,"k":2}}]`, ExitUsage, `"k" twice`},
		{"unknown member", `[{"op":"remove","path":"/a","value":1}]`, ExitUsage, `member "value"`},
		{"bad pointer", `[{"op":"remove","path":"a"}]`, ExitUsage, "starts with /"},
		{"not an array", `{"op":"remove","path":"/a"}`, ExitUsage, "not a JSON array"},
		{"trailing data", `[] []`, ExitUsage, "after the JSON text"},
		{"null", `null`, ExitUsage, "not a JSON array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCLI(t)
			r := c.must(tt.code, "request", "build", "--action", "a", "--target", "t",
				"--patch-file", c.write("patch.json", tt.patch), "--out", c.path("req.cbor"))
			_, err := os.Stat(c.path("req.cbor"))
			if built := err == nil; built != (tt.code == ExitOK) {
				t.Fatalf("request file written: %v, exit %d", built, r.code)
			}
			if !strings.Contains(r.stderr, tt.stderr) {
				t.Fatalf("stderr %q does not say %q", r.stderr, tt.stderr)
			}
		})
	}
}

// Ensure that request show and envelope show print every field of the
// exact bytes, and the digest that activate binds and request build
// printed, from a file or stdin, as text and as JSON.
func TestRequestEnvelopeShow(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	built := c.json(0, "request", "build", "--action", "act-1", "--target", fixtureScope, "--expect-revision", "1",
		"--expect-value", fixtureValue, "--patch-file", filepath.Join(fixtureDir, "patch.json"), "--out", c.path("p.cbor"))
	g := c.json(0, "activate", "--scope", fixtureScope, "--executor", "w", "--claim", "c", "--request", c.path("p.cbor"))
	if built["request_sha256"] != g["request_sha256"] {
		t.Fatalf("request build and activate disagree on the digest: %v, %v", built, g)
	}
	c.must(0, "envelope", "build", "--scope", fixtureScope, "--epoch", jsonNum(g["epoch"]), "--grant", g["grant"].(string),
		"--executor", "w", "--claim", "c", "--request", c.path("p.cbor"), "--out", c.path("e.cbor"))

	reqBytes := readFile(t, c.path("p.cbor"))
	for _, r := range []result{c.must(0, "request", "show", c.path("p.cbor"), "--json"),
		c.runIn(reqBytes, "request", "show", "--json", "-")} {
		var out requestShowJSON
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("request show --json: %v\n%s", err, r)
		}
		if out.Kind != "request" || out.RequestSHA256 != g["request_sha256"] || out.Action != "act-1" ||
			out.Target != fixtureScope || out.ExpectRevision == nil || *out.ExpectRevision != 1 ||
			out.ExpectValue == nil || *out.ExpectValue.Text != fixtureValue || out.Mutation != "patch" || out.Set != nil ||
			*out.PatchBytes.Text != strings.TrimSpace(fixturePatch) || out.Bytes != len(reqBytes) {
			t.Errorf("request show --json: %s", r.stdout)
		}
		var patch, want any
		if json.Unmarshal(out.Patch, &patch) != nil || json.Unmarshal([]byte(fixturePatch), &want) != nil ||
			!reflect.DeepEqual(patch, want) {
			t.Errorf("patch %s, want %s", out.Patch, fixturePatch)
		}
	}
	text := c.must(0, "request", "show", c.path("p.cbor")).stdout
	for _, want := range []string{"request sha256   " + g["request_sha256"].(string), "action           act-1",
		"expect revision  1", "expect value (32 bytes, text)\n" + fixtureValue + "\n", "mutation         patch",
		fmt.Sprintf("patch (%d bytes, pretty-printed)\n[\n  {\n    \"op\": \"test\",\n    \"path\": \"/data/retention_days\",", len(fixturePatch))} {
		if !strings.Contains(text, want) {
			t.Errorf("request show lacks %q:\n%s", want, text)
		}
	}

	r := c.must(0, "envelope", "show", "--json", c.path("e.cbor"))
	var env envelopeShowJSON
	if err := json.Unmarshal([]byte(r.stdout), &env); err != nil {
		t.Fatal(err)
	}
	if env.Kind != "envelope" || env.Scope != fixtureScope || jsonNum(env.Epoch) != jsonNum(g["epoch"]) ||
		env.Grant != g["grant"] || env.Executor != "w" || env.Claim != "c" ||
		env.Request.RequestSHA256 != g["request_sha256"] || env.Request.Action != "act-1" {
		t.Errorf("envelope show --json: %s", r.stdout)
	}
	text = c.runIn(readFile(t, c.path("e.cbor")), "envelope", "show", "-").stdout
	for _, want := range []string{"grant     " + g["grant"].(string), "executor  w", "claim     c",
		"request (carried unchanged)\n", "  request sha256   " + g["request_sha256"].(string)} {
		if !strings.Contains(text, want) {
			t.Errorf("envelope show lacks %q:\n%s", want, text)
		}
	}
}

// Ensure that a value is shown as text only when it prints as itself, and
// in hex otherwise.
func TestRequestShow_Values(t *testing.T) {
	tests := []struct {
		name, value, want string
	}{
		{"text", "retention 45\n", "set (13 bytes, text)\nretention 45\n"},
		{"binary", "\x00\x01\xff", "set (3 bytes, hex)\n0001ff\n"},
		{"terminal escape", "ok\x1b[2J", "set (6 bytes, hex)\n6f6b1b5b324a\n"},
		{"bidi override", "a\u202eb", "set (5 bytes, hex)\n61e280ae62\n"},
		{"C1 control", "a\u009bb", "set (4 bytes, hex)\n61c29b62\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCLI(t)
			c.must(0, "request", "build", "--action", "a", "--target", "t", "--set-file", c.write("v", tt.value),
				"--out", c.path("r.cbor"))
			if r := c.must(0, "request", "show", c.path("r.cbor")); !strings.Contains(r.stdout, tt.want) {
				t.Errorf("got\n%s\nwant %q", r.stdout, tt.want)
			}
		})
	}
}

// Ensure that request show and envelope show refuse every malformed or
// hostile input with a precise usage error, write nothing to stdout, and
// name an envelope given as a request and the reverse.
func TestShow_Malformed(t *testing.T) {
	valid := func(c *cli) ([]byte, []byte) {
		c.must(0, "request", "build", "--action", "a", "--target", "t", "--set", "v", "--out", c.path("r.cbor"))
		c.must(0, "envelope", "build", "--scope", "s", "--epoch", "1", "--grant", "g", "--executor", "w", "--claim", "c",
			"--request", c.path("r.cbor"), "--out", c.path("e.cbor"))
		return readFile(t, c.path("r.cbor")), readFile(t, c.path("e.cbor"))
	}
	junkEnv, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: "s", Epoch: 1, Grant: "g", Executor: "w",
		Claim: "c", Request: []byte("junk")})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		cmd   string
		input func(req, env []byte) []byte
		code  int
		msg   string
	}{
		{"envelope as request", "request", func(req, env []byte) []byte { return env }, ExitUsage, "is an envelope, not a request"},
		{"request as envelope", "envelope", func(req, env []byte) []byte { return req }, ExitUsage, "is a request, not an envelope"},
		{"empty request", "request", func(req, env []byte) []byte { return nil }, ExitUsage, "malformed request: empty input"},
		{"empty envelope", "envelope", func(req, env []byte) []byte { return nil }, ExitUsage, "malformed envelope: empty input"},
		{"not CBOR", "request", func(req, env []byte) []byte { return []byte("hello") }, ExitUsage, "not a CBOR map"},
		{"JSON", "envelope", func(req, env []byte) []byte { return []byte(`{"v":1}`) }, ExitUsage, "not a CBOR map"},
		{"truncated request", "request", func(req, env []byte) []byte { return req[:len(req)-1] }, ExitUsage, "malformed request"},
		{"truncated envelope", "envelope", func(req, env []byte) []byte { return env[:len(env)/2] }, ExitUsage, "malformed envelope"},
		{"trailing byte", "request", func(req, env []byte) []byte { return append(req, 0) }, ExitUsage, "malformed request"},
		{"too large", "request", func(req, env []byte) []byte {
			return append([]byte{0xa1}, make([]byte, kvfence.DefaultMaxEnvelopeSize)...)
		}, ExitUsage, "exceeds the 65536-byte limit"},
		{"malformed carried request", "envelope", func(req, env []byte) []byte { return junkEnv }, ExitUsage,
			"is a well-formed envelope, but the request it carries is not"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCLI(t)
			req, env := valid(c)
			r := c.runIn(tt.input(req, env), tt.cmd, "show", "-")
			if r.code != tt.code || !strings.Contains(r.stderr, tt.msg) || r.stdout != "" {
				t.Errorf("got %s\nwant exit %d and %q", r, tt.code, tt.msg)
			}
			r = c.runIn(tt.input(req, env), tt.cmd, "show", "-", "--json")
			if e := errorOutput(t, r); r.code != tt.code || !strings.HasPrefix(e.Code, "malformed_") {
				t.Errorf("--json: %s", r)
			}
		})
	}
	c := newCLI(t)
	c.must(ExitError, "request", "show", c.path("none"))
	c.must(ExitUsage, "request", "show")
	c.must(ExitUsage, "envelope", "show", "a", "b")
}

// FuzzShow feeds arbitrary bytes to request show and envelope show: they
// never panic, exit 0 or 2, and what they accept they print as JSON whose
// digest is the SHA-256 of the request bytes.
func FuzzShow(f *testing.F) {
	req, _ := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: "a", Target: "t", Patch: []byte(fixturePatch)})
	env, _ := kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: "s", Epoch: 1, Grant: "g", Executor: "w", Claim: "c",
		Request: req})
	for _, seed := range [][]byte{req, env, nil, []byte("x"), {0xa0}, req[:len(req)-3], append(env, 0)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, cmd := range []string{"request", "envelope"} {
			var stdout, stderr bytes.Buffer
			m := Main{Stdin: bytes.NewReader(b), Stdout: &stdout, Stderr: &stderr}
			code := m.Run(context.Background(), []string{cmd, "show", "-", "--json"})
			if code != ExitOK && code != ExitUsage {
				t.Fatalf("%s show: exit %d\n%s", cmd, code, stderr.String())
			}
			var out struct {
				RequestSHA256 string          `json:"request_sha256"`
				Request       requestShowJSON `json:"request"`
				Error         *errorBodyJSON  `json:"error"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
				t.Fatalf("%s show: stdout is not JSON: %v", cmd, err)
			}
			if (code == ExitOK) != (out.Error == nil) {
				t.Fatalf("%s show: exit %d with %s", cmd, code, stdout.String())
			}
			if code == ExitOK && cmd == "request" {
				if sum := sha256.Sum256(b); out.RequestSHA256 != hex.EncodeToString(sum[:]) {
					t.Fatalf("request show: digest %s of %x", out.RequestSHA256, b)
				}
			}
		}
	})
}

// endless is a stdin that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 0xa1
	}
	return len(p), nil
}

// Ensure that show reads no more of its input than the largest artefact a
// receiver accepts: an endless stdin is refused, not read to exhaustion.
func TestShow_EndlessInput(t *testing.T) {
	for _, cmd := range []string{"request", "envelope"} {
		done := make(chan result, 1)
		go func() {
			var stdout, stderr bytes.Buffer
			code := Main{Stdin: endless{}, Stdout: &stdout, Stderr: &stderr}.Run(context.Background(), []string{cmd, "show", "-"})
			done <- result{code: code, stdout: stdout.String(), stderr: stderr.String()}
		}()
		select {
		case r := <-done:
			if r.code != ExitUsage || !strings.Contains(r.stderr, "exceeds the 65536-byte limit") {
				t.Errorf("%s show of an endless input: %s", cmd, r)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s show reads an endless input without bound", cmd)
		}
	}
}
