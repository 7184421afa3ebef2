package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// Fixture values of the lab (docs/design.md §5), also kept in /testdata/backup-policy.
const (
	fixtureScope = "configmap/prod/backup-policy"
	fixtureValue = `{"data":{"retention_days":"30"}}`
	fixturePatch = `[{"op":"test","path":"/data/retention_days","value":"30"},{"op":"replace","path":"/data/retention_days","value":"45"}]`
	fixtureDir   = "../../testdata/backup-policy"
)

// cli runs Main in-process in a temporary directory with a fake
// environment.
type cli struct {
	t   *testing.T
	dir string
	env map[string]string
	// last is the stdout of the latest run, for golden files.
	last string
	// now, if set, is the program's clock (Main.Now).
	now func() time.Time
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	return &cli{t: t, dir: t.TempDir(), env: map[string]string{}}
}

// path returns name inside the test's directory.
func (c *cli) path(name string) string { return filepath.Join(c.dir, name) }

// result is one run of the program.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs the program with args and returns its exit code and output.
func (c *cli) run(args ...string) result {
	c.t.Helper()
	var stdout, stderr bytes.Buffer
	m := Main{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string { return c.env[k] }, Now: c.now}
	code := m.Run(context.Background(), args)
	c.last = stdout.String()
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// must runs the program and fails the test unless it exits with want.
func (c *cli) must(want int, args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	if r.code != want {
		c.t.Fatalf("kvfence %s: got %s, want exit %d", strings.Join(args, " "), r, want)
	}
	return r
}

// json runs the program with --json appended, requires exit want, and
// decodes stdout.
func (c *cli) json(want int, args ...string) map[string]any {
	c.t.Helper()
	r := c.must(want, append(args, "--json")...)
	var out map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		c.t.Fatalf("kvfence %s: stdout is not one JSON object: %v\n%s", strings.Join(args, " "), err, r.stdout)
	}
	return out
}

// receiver sets up a receiver key, a separately held recovery key and an
// initialised receiver with the fixture scope and target, and points
// KVFENCE_DB (unless a test set KVFENCE_ETCD), KVFENCE_ANCHOR (unless a
// test set it) and KVFENCE_KEY at them.
func (c *cli) receiver() {
	c.t.Helper()
	c.must(0, "keygen", "--out", c.path("receiver.key"))
	c.must(0, "keygen", "--out", c.path("recovery.key"))
	if c.env[envEtcd] == "" {
		c.env[envDB] = c.path("receiver.db")
	}
	if c.env[envAnchor] == "" {
		c.env[envAnchor] = c.path("receiver.anchor")
	}
	c.env[envKey] = c.path("receiver.key")
	c.must(0, "init", "--id", "lab-receiver", "--recovery-pub", c.path("recovery.key.pub"))
	c.must(0, "scope", "create", "--scope", fixtureScope)
	c.must(0, "target", "create", "--scope", fixtureScope, "--target", fixtureScope,
		"--value-file", filepath.Join(fixtureDir, "value.json"))
	c.must(0, "request", "build", "--action", "raise-retention", "--target", fixtureScope,
		"--patch-file", filepath.Join(fixtureDir, "patch.json"), "--out", c.path("req.cbor"))
}

// activate activates a grant for worker w with claim and builds its
// envelope at env. It returns the grant id.
func (c *cli) activate(w, claim, env string) string {
	c.t.Helper()
	g := c.json(0, "activate", "--scope", fixtureScope, "--executor", w, "--claim", claim,
		"--request", c.path("req.cbor"))
	id := g["grant"].(string)
	c.must(0, "envelope", "build", "--scope", fixtureScope, "--epoch", jsonNum(g["epoch"]), "--grant", id,
		"--executor", w, "--claim", claim, "--request", c.path("req.cbor"), "--out", c.path(env))
	return id
}

func jsonNum(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

var (
	reTime = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	reHash = regexp.MustCompile(`"(hash|prev|head|anchor_head)": "[0-9a-f]{64}"`)
	reKey  = regexp.MustCompile(`ssh-ed25519 [A-Za-z0-9+/=]+`)
	// reUID is the invoking user that local administrative commands
	// record as their actor.
	reUID = regexp.MustCompile(`unix:uid:\d+`)
	// reAnyHash and reFingerprint are for outputs that carry chain hashes
	// and key fingerprints in free text (details, tables).
	reAnyHash     = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
	reFingerprint = regexp.MustCompile(`SHA256:[A-Za-z0-9+/]{43}`)
	// reSigned is the signed forms and signatures of JSON outputs, which
	// sign times.
	reSigned = regexp.MustCompile(`"(signed_b64|signature_b64)": "[A-Za-z0-9+/=]+"`)
)

// mask replaces what differs between runs (times, grant ids, chain hashes
// that cover them, keys, the temporary directory) with stable tokens.
func (c *cli) mask(s string, grants map[string]string) string {
	for id, name := range grants {
		s = strings.ReplaceAll(s, id, name)
	}
	s = strings.ReplaceAll(s, c.dir, "$DIR")
	s = reTime.ReplaceAllString(s, "TIME")
	s = reHash.ReplaceAllString(s, `"$1": "HASH"`)
	s = reUID.ReplaceAllString(s, "unix:uid:UID")
	s = reSigned.ReplaceAllString(s, `"$1": "SIGNED"`)
	return reKey.ReplaceAllString(s, "ssh-ed25519 KEY")
}

// maskAll is mask for outputs that also carry chain hashes and key
// fingerprints in free text (details, tables): every 64-digit hex string
// and every SHA256: fingerprint is replaced too.
func (c *cli) maskAll(s string, grants map[string]string) string {
	s = c.mask(s, grants)
	s = reAnyHash.ReplaceAllString(s, "HASH")
	return reFingerprint.ReplaceAllString(s, "SHA256:FINGERPRINT")
}

// golden compares got with testdata/golden/name, or rewrites it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// skipShort skips a long test under go test -short; the README's full
// test command, which CI runs, always runs it.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("long: runs in the full test command (go test without -short)")
	}
}
