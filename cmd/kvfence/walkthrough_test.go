package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Ensure that the CLI walks through the lab scenario of docs/design.md §1: after a
// hold and a new activation, worker A's old envelope is denied and changes
// nothing, worker B's applies once, and B's retry is already_applied.
func TestWalkthrough(t *testing.T) {
	c := newCLI(t)
	db, anchor, key := c.path("receiver.db"), c.path("receiver.anchor"), c.path("receiver.key")
	// Observation commands check the anchor when given one; commands that
	// write need it, and the receiver's key to sign its checkpoints.
	common := func(args ...string) []string { return append(args, "--db", db, "--anchor", anchor) }
	priv := func(args ...string) []string { return append(common(args...), "--key", key) }
	grants := map[string]string{}

	// The fixture files are the values the design names, byte for byte.
	for name, want := range map[string]string{"value.json": fixtureValue, "patch.json": fixturePatch} {
		got, err := os.ReadFile(filepath.Join(fixtureDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("%s = %q, want %q", name, got, want)
		}
	}

	out := c.json(0, "keygen", "--out", key)
	golden(t, "keygen.json", c.maskAll(c.last, grants))
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("private key: %v, mode %v; want 0600", err, fi.Mode())
	}
	if _, err := os.Stat(key + ".pub"); err != nil {
		t.Fatal(err)
	}
	// Keys and outputs are never overwritten.
	c.must(1, "keygen", "--out", key)

	// The recovery key is made apart from the receiver's; only its public
	// half is given to init.
	c.must(0, "keygen", "--out", c.path("recovery.key"))
	out = c.json(0, priv("init", "--id", "lab-receiver", "--recovery-pub", c.path("recovery.key.pub"))...)
	golden(t, "init.json", c.maskAll(c.last, grants))
	if fi, err := os.Stat(anchor); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("anchor: %v; want a 0600 file", err)
	}
	if out["anchor"] != anchor || out["anchor_seq"].(float64) < 1 {
		t.Fatalf("init: %v", out)
	}
	c.must(0, priv("scope", "create", "--scope", fixtureScope)...)
	c.must(0, priv("target", "create", "--scope", fixtureScope, "--target", fixtureScope,
		"--value", fixtureValue)...)
	out = c.json(0, "request", "build", "--action", "raise-retention", "--target", fixtureScope,
		"--patch-file", c.write("patch.json", fixturePatch), "--out", c.path("req.cbor"))
	golden(t, "request-build.json", c.mask(c.last, grants))

	// Worker A is activated and builds its envelope.
	out = c.json(0, priv("activate", "--scope", fixtureScope, "--executor", "worker-a", "--claim", "claim-a",
		"--request", c.path("req.cbor"), "--decision", "review-17")...)
	grantA := out["grant"].(string)
	grants[grantA] = "GRANT_A"
	golden(t, "activate.json", c.mask(c.last, grants))
	nb, err1 := time.Parse(time.RFC3339Nano, out["not_before"].(string))
	na, err2 := time.Parse(time.RFC3339Nano, out["not_after"].(string))
	if err1 != nil || err2 != nil || na.Sub(nb) != 15*time.Minute {
		t.Fatalf("window [%v, %v): want the default 15m ttl", out["not_before"], out["not_after"])
	}
	if len(grantA) < 32 {
		t.Fatalf("grant id %q is shorter than 128 bits of hex", grantA)
	}
	out = c.json(0, "envelope", "build", "--scope", fixtureScope, "--epoch", "1", "--grant", grantA,
		"--executor", "worker-a", "--claim", "claim-a", "--request", c.path("req.cbor"), "--out", c.path("a.cbor"))
	golden(t, "envelope-build.json", c.mask(c.last, grants))

	// A's heartbeat expires: the scope is held at a new epoch, and B is
	// activated at that epoch.
	out = c.json(0, priv("hold", "--scope", fixtureScope, "--reason", "worker-a heartbeat expired")...)
	golden(t, "hold.json", c.maskAll(c.last, grants))
	out = c.json(0, priv("activate", "--scope", fixtureScope, "--executor", "worker-b", "--claim", "claim-b",
		"--request", c.path("req.cbor"), "--epoch", "2")...)
	grantB := out["grant"].(string)
	grants[grantB] = "GRANT_B"
	if out["epoch"].(float64) != 2 || grantB == grantA {
		t.Fatalf("B's grant: %v", out)
	}
	c.must(0, "envelope", "build", "--scope", fixtureScope, "--epoch", "2", "--grant", grantB,
		"--executor", "worker-b", "--claim", "claim-b", "--request", c.path("req.cbor"), "--out", c.path("b.cbor"))

	// A resumes with its old envelope before B writes: denied, exit 3.
	out = c.json(3, priv("submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))...)
	golden(t, "submit-stale.json", c.mask(c.last, grants))
	if out["outcome"] != "denied" || out["reason"] != "stale_or_unknown_epoch" {
		t.Fatalf("A's stale submit: %v", out)
	}
	// A copies the new epoch number: still denied.
	c.must(0, "envelope", "build", "--scope", fixtureScope, "--epoch", "2", "--grant", grantA,
		"--executor", "worker-a", "--claim", "claim-a", "--request", c.path("req.cbor"), "--out", c.path("a2.cbor"))
	out = c.json(3, priv("submit", "--as", "worker-a", "--envelope", c.path("a2.cbor"))...)
	if out["reason"] != "inactive_grant" {
		t.Fatalf("A's copied-epoch submit: %v", out)
	}

	// The target is untouched.
	out = c.json(0, common("observe", "target", fixtureScope)...)
	if out["revision"].(float64) != 1 || out["value"] != fixtureValue {
		t.Fatalf("target after A's attempts: %v", out)
	}
	golden(t, "observe-target-1.json", c.mask(c.last, grants))

	// B applies, once.
	out = c.json(0, priv("submit", "--as", "worker-b", "--envelope", c.path("b.cbor"))...)
	golden(t, "submit-applied.json", c.mask(c.last, grants))
	if out["outcome"] != "applied" || out["revision"].(float64) != 2 {
		t.Fatalf("B's submit: %v", out)
	}
	out = c.json(0, common("observe", "target", fixtureScope)...)
	if out["revision"].(float64) != 2 || !strings.Contains(out["value"].(string), `"retention_days":"45"`) {
		t.Fatalf("target after B: %v", out)
	}
	out = c.json(0, priv("submit", "--as", "worker-b", "--envelope", c.path("b.cbor"))...)
	golden(t, "submit-already-applied.json", c.mask(c.last, grants))
	if out["outcome"] != "already_applied" || out["revision"].(float64) != 2 {
		t.Fatalf("B's retry: %v", out)
	}
	out = c.json(0, common("observe", "target", fixtureScope)...)
	if out["revision"].(float64) != 2 {
		t.Fatalf("B's retry changed the target: %v", out)
	}

	// The evidence.
	out = c.json(0, common("observe", "receipt", "--scope", fixtureScope, "--action", "raise-retention")...)
	golden(t, "observe-receipt.json", c.mask(c.last, grants))
	if out["grant"] != grantB || out["rev_before"].(float64) != 1 || out["rev_after"].(float64) != 2 {
		t.Fatalf("receipt: %v", out)
	}
	out = c.json(0, common("observe", "receipts", "--scope", fixtureScope, "--claim", "claim-b")...)
	golden(t, "observe-receipts.json", c.mask(c.last, grants))
	if rcs := out["receipts"].([]any); len(rcs) != 1 || rcs[0].(map[string]any)["grant"] != grantB {
		t.Fatalf("receipts of B's claim: %v", out)
	}
	out = c.json(0, common("status")...)
	golden(t, "status.json", c.mask(c.last, grants))
	st := out["scopes"].([]any)[0].(map[string]any)
	if st["epoch"].(float64) != 2 || st["mode"] != "open" || st["active_grant"] != grantB ||
		st["stale_rejections"].(float64) != 2 {
		t.Fatalf("status: %v", out)
	}
	r := c.must(0, common("observe", "events", "--json")...)
	golden(t, "observe-events.json", c.mask(r.stdout, grants))
	out = c.json(0, "verify-chain", "--db", db, "--anchor", anchor, "--pub", key+".pub")
	golden(t, "verify-chain-ok.json", c.mask(c.last, grants))
	if out["ok"] != true || out["problem"] != "ok" || out["head_seq"] != out["anchor_seq"] ||
		out["entries"] != out["head_seq"] || out["head"] != out["anchor_head"] {
		t.Fatalf("verify-chain: %v", out)
	}

	// Human output carries the same facts.
	r = c.must(0, common("status", "--scope", fixtureScope)...)
	golden(t, "status.txt", c.mask(r.stdout, grants))
	r = c.must(0, common("observe", "target", fixtureScope)...)
	golden(t, "observe-target-2.txt", c.mask(r.stdout, grants))
	r = c.must(0, "verify-chain", "--db", db, "--anchor", anchor, "--pub", key+".pub")
	golden(t, "verify-chain-ok.txt", c.maskAll(r.stdout, grants))
	r = c.must(3, priv("submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))...)
	golden(t, "submit-stale.txt", c.mask(r.stdout, grants))
	if !strings.HasPrefix(r.stderr, "Error: request denied by the fence: stale_or_unknown_epoch") {
		t.Errorf("stderr: %q", r.stderr)
	}
}

// write creates name in the test's directory with content and returns its
// path.
func (c *cli) write(name, content string) string {
	c.t.Helper()
	p := c.path(name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return p
}
