package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kvfence/kvfence/internal/testbin"
)

// The tests below run the kvfence binary as its own process, built twice:
// as shipped (no tags) and as the lab build (-tags kvfencelab).
var (
	binDir  string
	binOnce = map[string]*sync.Once{"": new(sync.Once), testbin.LabTag: new(sync.Once)}
	binPath = map[string]string{}
	binErr  = map[string]error{}
	binMu   sync.Mutex
)

// kvfenceBinary builds the kvfence binary with the given tag ("" for none)
// once per test run and returns its path.
func kvfenceBinary(t *testing.T, tag string) string {
	t.Helper()
	binOnce[tag].Do(func() {
		binMu.Lock()
		defer binMu.Unlock()
		if binDir == "" {
			if binDir, binErr[tag] = os.MkdirTemp("", "kvfence-cmd-test-"); binErr[tag] != nil {
				return
			}
		}
		var tags []string
		if tag != "" {
			tags = append(tags, tag)
		}
		binPath[tag], binErr[tag] = testbin.Build(binDir, tags...)
	})
	binMu.Lock()
	defer binMu.Unlock()
	if binErr[tag] != nil {
		t.Fatalf("building kvfence (tags %q): %v", tag, binErr[tag])
	}
	return binPath[tag]
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// labMarker is the file that marks a lab output directory (lab/worker.go).
const labMarker = "KVFENCE-LAB"

// staleReceiver sets up the paused-worker state: worker A's envelope
// (a.cbor) is from before a committed hold, and worker B's grant is active.
func (c *cli) staleReceiver() {
	c.t.Helper()
	c.receiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "worker-a lease expired")
	c.activate("worker-b", "claim-b", "b.cbor")
}

// receiverState is what a refused worker must leave as it was.
type receiverState struct {
	revision, auditSeq float64
	value              string
}

// state reads the receiver at db: the target's revision and value, and the
// audit chain's head, after checking that the chain verifies.
func (c *cli) state(db, anchor string) receiverState {
	c.t.Helper()
	files := []string{"--db", db, "--anchor", anchor}
	c.must(0, append([]string{"verify-chain", "--pub", c.path("receiver.key.pub")}, files...)...)
	tg := c.json(0, append([]string{"observe", "target", fixtureScope}, files...)...)
	st := c.json(0, append([]string{"status"}, files...)...)
	return receiverState{revision: tg["revision"].(float64), value: tg["value"].(string), auditSeq: st["audit_seq"].(float64)}
}

// labDir makes a directory that carries the lab marker.
func (c *cli) labDir(name string) string {
	c.t.Helper()
	dir := c.path(name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, labMarker), []byte("kvfence lab output; lab workers run only here\n"), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return dir
}

// labWorker runs bin as a lab worker for worker A's envelope against db,
// releasing it at once, and returns its exit code and output.
func (c *cli) labWorker(bin, db, anchor string, mode ...string) result {
	c.t.Helper()
	args := append([]string{"lab-worker", "--db", db, "--anchor", anchor, "--key", c.path("receiver.key"),
		"--envelope", c.path("a.cbor"), "--as", "worker-a"}, mode...)
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader("go\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("running %s: %v", bin, err)
	}
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// Ensure that the shipped binary (no build tags) has no defective mode: a
// lab worker asked for one refuses before it opens anything, even when
// pointed, through a symbolic link in a directory that carries the lab
// marker, at a real receiver that holds a stale envelope's scope; the
// receiver is unchanged and its chain still verifies.
func TestLabWorker_ShippedBinaryRefusesDefectiveModes(t *testing.T) {
	skipShort(t)
	bin := kvfenceBinary(t, "")
	c := newCLI(t)
	c.staleReceiver()
	db, anchor := c.path("receiver.db"), c.path("receiver.anchor")
	before := c.state(db, anchor)
	link := filepath.Join(c.labDir("lab"), "receiver.db")
	if err := os.Symlink(db, link); err != nil {
		t.Fatal(err)
	}
	for _, mode := range [][]string{
		{"--defective"},
		{"--skip-anchor"},
		{"--defective", "--skip-anchor"},
		{"--skip-ledger-anchor", "--ledger", filepath.Join(c.path("lab"), "ledger.db"), "--ledger-anchor", anchor,
			"--ledger-key", c.path("receiver.key"), "--action", "raise-retention"},
	} {
		r := c.labWorker(bin, link, anchor, mode...)
		if r.code == 0 || r.stdout != "" || !strings.Contains(r.stderr, "kvfencelab") {
			t.Fatalf("lab-worker %s: %s\nwant a refusal naming the lab build, before the worker gets ready", mode[0], r)
		}
		if after := c.state(db, anchor); after != before {
			t.Fatalf("lab-worker %s changed the receiver: %+v, was %+v", mode[0], after, before)
		}
	}
}

// Ensure that the shipped binary refuses to run the lab, with exit code 2
// and the command that runs it, and creates nothing.
func TestLab_ShippedBinaryRefuses(t *testing.T) {
	bin := kvfenceBinary(t, "")
	out := filepath.Join(t.TempDir(), "lab-out")
	cmd := exec.Command(bin, "lab", "--output", out)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	err := cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != ExitUsage {
		t.Fatalf("kvfence lab: %v, want exit %d\n%s", err, ExitUsage, stderr.String())
	}
	if want := "go run -tags kvfencelab ./cmd/kvfence lab --output"; !strings.Contains(stderr.String(), want) {
		t.Fatalf("kvfence lab said %q; want it to say how to run the lab (%s)", stderr.String(), want)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("kvfence lab created %s: %v", out, err)
	}
}

// Ensure that a --kube value other than auto, on or off is a usage error
// that creates nothing, before the lab starts.
func TestLab_BadKubeMode(t *testing.T) {
	c := newCLI(t)
	out := c.path("lab-out")
	if r := c.must(ExitUsage, "lab", "--output", out, "--kube", "yes"); !strings.Contains(r.stderr, "one of auto, on or off") {
		t.Fatalf("stderr %q", r.stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("kvfence lab created %s: %v", out, err)
	}
}

// Ensure that the lab build's worker, which has the defective modes,
// refuses a database reached through a symbolic link or a hard link from a
// directory that carries the lab marker; and, so that the refusal is not
// vacuous, that it applies the stale envelope to a copy that really is in
// a lab directory.
func TestLabWorker_LabBuildRefusesLinks(t *testing.T) {
	skipShort(t)
	bin := kvfenceBinary(t, testbin.LabTag)
	c := newCLI(t)
	c.staleReceiver()
	db, anchor := c.path("receiver.db"), c.path("receiver.anchor")
	before := c.state(db, anchor)
	dir := c.labDir("lab")
	links := map[string]func(string, string) error{"symlink.db": os.Symlink, "hardlink.db": os.Link}
	for name, mk := range links {
		link := filepath.Join(dir, name)
		if err := mk(db, link); err != nil {
			t.Fatal(err)
		}
		r := c.labWorker(bin, link, anchor, "--defective")
		if r.code == 0 || r.stdout != "" || !strings.Contains(r.stderr, "not inside a lab output directory") {
			t.Fatalf("lab-worker --defective through %s: %s\nwant a refusal", name, r)
		}
		if after := c.state(db, anchor); after != before {
			t.Fatalf("lab-worker through %s changed the receiver: %+v, was %+v", name, after, before)
		}
	}

	copyDir := c.labDir("lab-copy")
	cdb, canchor := filepath.Join(copyDir, "receiver.db"), filepath.Join(copyDir, "receiver.anchor")
	for from, to := range map[string]string{db: cdb, anchor: canchor} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := c.labWorker(bin, cdb, canchor, "--defective")
	var res struct{ Outcome string }
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || json.Unmarshal([]byte(lines[len(lines)-1]), &res) != nil || res.Outcome != "applied" {
		t.Fatalf("lab-worker --defective on a copy in a lab directory: %s\nwant the stale envelope applied", r)
	}
	if after := c.state(db, anchor); after != before {
		t.Fatalf("the original receiver changed: %+v, was %+v", after, before)
	}
	// The copy's own chain is the evidence of what its receiver skipped.
	v := c.json(ExitIntegrity, "verify-chain", "--db", cdb, "--anchor", canchor, "--pub", c.path("receiver.key.pub"))
	if v["problem"] != "fence_violation" || !strings.Contains(v["detail"].(string), "superseded by the hold") {
		t.Fatalf("verify-chain of the defective receiver's copy: %v; want fence_violation", v)
	}
}

// Ensure that the lab build's lab command prints every claim of
// summary.json in its table, with the same value, the served receiver's
// among them.
func TestLab_LabBuildTableListsEverySummaryKey(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs in the full test command (go test without -short)")
	}
	bin := kvfenceBinary(t, testbin.LabTag)
	out := filepath.Join(t.TempDir(), "lab-out")
	// --kube off: demonstration 8 is TestKube_Demonstration8's (package
	// lab); here its checks show as not run, whatever this machine has.
	cmd := exec.Command(bin, "lab", "--output", out, "--kube", "off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kvfence lab: %v\n%s", err, stderr.String())
	}
	table := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			t.Fatalf("table line %q", line)
		}
		table[f[0]] = f[1]
	}
	raw, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum map[string]any
	if err := json.Unmarshal(raw, &sum); err != nil {
		t.Fatal(err)
	}
	for k, v := range sum {
		if k == "checks" || k == "verdict_detail" || k == "not_run" {
			continue // nested, or words: checked below
		}
		want := fmt.Sprint(v)
		if v == nil {
			want = "-" // a check not run
		}
		if got := table[k]; got != want {
			t.Errorf("table %s = %q, summary.json %q", k, got, want)
		}
	}
	if table["verdict"] != "as_expected" || len(sum["checks"].(map[string]any)) != len(sum)-4 {
		t.Errorf("verdict %q, %d checks for %d flat keys", table["verdict"], len(sum["checks"].(map[string]any)), len(sum)-4)
	}
	if table["k8s_lost_update"] != "-" || !strings.Contains(stdout.String(), "<- not run") ||
		!strings.Contains(fmt.Sprint(sum["not_run"]), "--kube off") {
		t.Errorf("demonstration 8 not shown as not run: %q, not_run %v", table["k8s_lost_update"], sum["not_run"])
	}
	for _, k := range []string{"served_wrong_identity_denied", "served_worker_hold_forbidden",
		"served_hold_while_serving_denied_stale_worker", "served_current_worker_accepted"} {
		if table[k] != "true" {
			t.Errorf("table %s = %q, want true", k, table[k])
		}
	}
}
