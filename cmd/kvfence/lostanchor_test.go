package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// anchorLost sets up the receiver of c with a second scope held twice
// (epoch 3), activates worker A on the fixture scope (envelope a.cbor),
// and then deletes the anchor. It returns A's grant id.
func (c *cli) anchorLost() string {
	c.t.Helper()
	c.receiver()
	c.must(0, "scope", "create", "--scope", "second")
	c.must(0, "hold", "--scope", "second", "--reason", "drill")
	c.must(0, "hold", "--scope", "second", "--reason", "drill")
	grantA := c.activate("worker-a", "claim-a", "a.cbor")
	if err := os.Remove(c.env[envAnchor]); err != nil {
		c.t.Fatal(err)
	}
	return grantA
}

// Ensure that a receiver whose anchor was deleted is refused by every
// command, that a lost-anchor admission signed by the recovery key
// re-anchors it with every scope held above the epoch floor and A's grant
// dead, that the chain then verifies, and that the admission works once.
func TestLostAnchorWalkthrough(t *testing.T) {
	c := newCLI(t)
	grantA := c.anchorLost()
	grants := map[string]string{grantA: "GRANT_A"}
	db, anchor := c.env[envDB], c.env[envAnchor]
	pub := c.path("receiver.key.pub")

	// A resumes: refused before any decision, exit 4, with the way back.
	r := c.must(ExitIntegrity, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	for _, want := range []string{"anchor missing", "kvfence admission new --lost-anchor"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("submit stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	c.must(ExitIntegrity, "status")
	c.must(ExitIntegrity, "hold", "--scope", fixtureScope, "--reason", "r")
	if _, err := os.Stat(anchor); !os.IsNotExist(err) {
		t.Fatalf("a refused command created the anchor: %v", err)
	}
	// An ordinary admission needs the anchor it supersedes; an epoch floor
	// belongs to a lost-anchor admission only.
	c.must(ExitIntegrity, "admission", "new", "--recovery-key", c.path("recovery.key"), "--reason", "r",
		"--out", c.path("ordinary.adm"))
	c.must(ExitUsage, "admission", "new", "--recovery-key", c.path("recovery.key"), "--reason", "r",
		"--epoch-floor", "5", "--out", c.path("floor.adm"))

	// The recovery key holder signs a lost-anchor admission with the
	// highest epoch monitoring ever saw.
	adm := c.path("lost.adm")
	out := c.json(0, "admission", "new", "--lost-anchor", "--recovery-key", c.path("recovery.key"),
		"--reason", "anchor volume lost; monitoring saw epoch 40", "--epoch-floor", "40", "--out", adm)
	golden(t, "admission-new-lost-anchor.json", c.maskAll(c.last, grants))
	if out["lost_anchor"] != true || out["anchor_state"] != "missing" || out["anchor_seq"].(float64) != 0 ||
		out["anchor_head"] != "" || out["epoch_high_water"] != nil || out["epoch_floor"].(float64) != 40 ||
		out["database_epoch_high_water"].(float64) != 3 || out["receiver"] != "lab-receiver" {
		t.Fatalf("admission new --lost-anchor: %v", out)
	}
	headSeq := out["head_seq"].(float64)
	if fi, err := os.Stat(adm); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admission file: %v; want mode 0600", err)
	}

	// recover applies it and creates the anchor.
	out = c.json(0, "recover", "--admission", adm, "--recovery-pub", c.path("recovery.key.pub"))
	golden(t, "recover-lost-anchor.json", c.maskAll(c.last, grants))
	if out["lost_anchor"] != true || out["grants_revoked"].(float64) != 1 ||
		out["audit_seq"].(float64) != headSeq+1 || out["anchor_seq"] != out["audit_seq"] {
		t.Fatalf("recover: %v", out)
	}
	for _, s := range out["scopes"].([]any) {
		if s := s.(map[string]any); s["epoch"].(float64) != 41 || s["mode"] != "held" {
			t.Errorf("recovered scope: %v", s)
		}
	}
	if fi, err := os.Stat(anchor); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("new anchor: %v; want mode 0600", err)
	}
	recoveredSeq := jsonNum(out["audit_seq"])

	// The receiver opens again; A's envelope is refused by the fence.
	out = c.json(ExitDenied, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	if out["outcome"] != "denied" || out["reason"] != "receiver_held" {
		t.Fatalf("A after recovery: %v", out)
	}
	out = c.json(0, "status")
	if out["anchor_checked"] != true {
		t.Fatalf("status after recovery: %v", out)
	}
	for _, s := range out["scopes"].([]any) {
		if s := s.(map[string]any); s["epoch"].(float64) != 41 || s["mode"] != "held" || s["active_grant"] != "" {
			t.Errorf("status after recovery: %v", s)
		}
	}
	out = c.json(0, "verify-chain", "--db", db, "--anchor", anchor, "--pub", pub)
	if out["ok"] != true || out["problem"] != "ok" {
		t.Fatalf("verify-chain after recovery: %v", out)
	}
	r = c.must(0, "observe", "events", "--since", recoveredSeq)
	for _, want := range []string{" reanchored ", "epoch floor 40", "admission sha256 ", "monitoring saw epoch 40"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the audit chain lacks %q:\n%s", want, r.stdout)
		}
	}
	// New grants work at the new epoch; A's envelope stays stale.
	c.must(0, "activate", "--scope", fixtureScope, "--executor", "worker-c", "--claim", "claim-c",
		"--request", c.path("req.cbor"), "--epoch", "41")
	out = c.json(ExitDenied, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	if out["reason"] != "stale_or_unknown_epoch" {
		t.Fatalf("A after a new activation: %v", out)
	}
	anchorAfter := readFile(t, anchor)

	// The admission is spent: with the anchor present, the anchor names it
	// as applied, and with the anchor deleted again the database does.
	r = c.must(ExitIntegrity, "recover", "--admission", adm, "--recovery-pub", c.path("recovery.key.pub"))
	if !strings.Contains(r.stderr, "admission already consumed") || !strings.Contains(r.stderr, "Try: this admission was applied already") {
		t.Errorf("replay with the anchor present: %s", r)
	}
	if !bytes.Equal(readFile(t, anchor), anchorAfter) {
		t.Fatal("a refused replay changed the anchor")
	}
	if err := os.Remove(anchor); err != nil {
		t.Fatal(err)
	}
	r = c.must(ExitIntegrity, "recover", "--admission", adm, "--recovery-pub", c.path("recovery.key.pub"))
	if !strings.Contains(r.stderr, "admission already consumed") || !strings.Contains(r.stderr, "sign a new admission") {
		t.Errorf("replay after deleting the anchor again: %s", r)
	}
	if _, err := os.Stat(anchor); !os.IsNotExist(err) {
		t.Fatalf("a refused replay created the anchor: %v", err)
	}
}

// Ensure that admission new and recover print a lost-anchor recovery for
// humans too, and warn when the epoch floor adds nothing to the
// database's own word.
func TestLostAnchorText(t *testing.T) {
	c := newCLI(t)
	c.anchorLost()
	r := c.must(0, "admission", "new", "--lost-anchor", "--recovery-key", c.path("recovery.key"),
		"--reason", "anchor lost", "--out", c.path("adm"))
	golden(t, "admission-new-lost-anchor.txt", c.maskAll(r.stdout, nil))
	if !strings.Contains(r.stderr, "Warning: --epoch-floor 0 is not above the database's own epoch high-water 3") {
		t.Errorf("no warning about the epoch floor:\n%s", r.stderr)
	}
	r = c.must(0, "recover", "--admission", c.path("adm"), "--recovery-pub", c.path("recovery.key.pub"))
	golden(t, "recover-lost-anchor.txt", c.maskAll(r.stdout, nil))
	out := c.json(0, "status")
	for _, s := range out["scopes"].([]any) {
		if s := s.(map[string]any); s["epoch"].(float64) != 4 || s["mode"] != "held" {
			t.Errorf("after recovery: %v", s)
		}
	}
}

// Ensure that the lost-anchor path is refused, changing nothing, with the
// receiver's key in place of the recovery key, while a valid anchor
// exists, with an ordinary admission in place of a lost-anchor one, and
// over a damaged anchor file, which is kept until the operator moves it.
func TestLostAnchorRefusals(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	anchor := c.env[envAnchor]
	anchorBefore := readFile(t, anchor)

	// While the anchor is valid, no lost-anchor admission is signed.
	r := c.must(ExitDenied, "admission", "new", "--lost-anchor", "--recovery-key", c.path("recovery.key"),
		"--reason", "r", "--out", c.path("early.adm"))
	if !strings.Contains(r.stderr, "an anchor is present") || !strings.Contains(r.stderr, "Try: ") {
		t.Errorf("lost-anchor admission with a valid anchor: %s", r)
	}
	if _, err := os.Stat(c.path("early.adm")); !os.IsNotExist(err) {
		t.Fatalf("a refused admission new wrote --out: %v", err)
	}
	// An ordinary admission, signed while the anchor was there, and a
	// lost-anchor one signed without looking at the anchor (no --anchor).
	c.must(0, "admission", "new", "--recovery-key", c.path("recovery.key"), "--reason", "r",
		"--out", c.path("ordinary.adm"))
	c.must(0, "admission", "new", "--lost-anchor", "--recovery-key", c.path("recovery.key"), "--reason", "r",
		"--anchor", "", "--out", c.path("lost.adm"))
	r = c.must(ExitIntegrity, "recover", "--admission", c.path("lost.adm"), "--recovery-pub", c.path("recovery.key.pub"))
	if !strings.Contains(r.stderr, "an anchor is present") {
		t.Errorf("lost-anchor admission applied over a valid anchor: %s", r)
	}
	if !bytes.Equal(readFile(t, anchor), anchorBefore) {
		t.Fatal("a refused recover changed the anchor")
	}

	if err := os.Remove(anchor); err != nil {
		t.Fatal(err)
	}
	// The receiver's own key signs nothing, and verifies nothing.
	r = c.must(ExitDenied, "admission", "new", "--lost-anchor", "--recovery-key", c.path("receiver.key"),
		"--reason", "r", "--out", c.path("byreceiver.adm"))
	if !strings.Contains(r.stderr, "is the receiver's own key") {
		t.Errorf("admission new with the receiver key: %s", r)
	}
	r = c.must(ExitIntegrity, "recover", "--admission", c.path("lost.adm"), "--recovery-pub", c.path("receiver.key.pub"))
	if !strings.Contains(r.stderr, "bad signature") {
		t.Errorf("recover with the receiver's public key as recovery key: %s", r)
	}
	// An ordinary admission is no substitute for a lost-anchor one.
	r = c.must(ExitIntegrity, "recover", "--admission", c.path("ordinary.adm"), "--recovery-pub", c.path("recovery.key.pub"))
	if !strings.Contains(r.stderr, "anchor missing") || !strings.Contains(r.stderr, "admission new --lost-anchor") {
		t.Errorf("ordinary admission without an anchor: %s", r)
	}

	// A damaged anchor file: admission new names it, recover keeps it.
	damaged := bytes.Repeat([]byte("damaged "), 1024)
	if err := os.WriteFile(anchor, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	out := c.json(0, "admission", "new", "--lost-anchor", "--recovery-key", c.path("recovery.key"), "--reason", "r",
		"--out", c.path("damaged.adm"))
	if out["anchor_state"] != "damaged" {
		t.Fatalf("admission new over a damaged anchor: %v", out)
	}
	r = c.must(ExitIntegrity, "recover", "--admission", c.path("damaged.adm"), "--recovery-pub", c.path("recovery.key.pub"))
	if !strings.Contains(r.stderr, "bad anchor file") || !strings.Contains(r.stderr, "Try: recover never writes over or moves a damaged anchor") {
		t.Errorf("recover over a damaged anchor: %s", r)
	}
	if !bytes.Equal(readFile(t, anchor), damaged) {
		t.Fatal("recover changed the damaged anchor file")
	}
	if err := os.Rename(anchor, anchor+".damaged"); err != nil {
		t.Fatal(err)
	}
	c.json(0, "recover", "--admission", c.path("damaged.adm"), "--recovery-pub", c.path("recovery.key.pub"))
	c.json(0, "verify-chain", "--pub", c.path("receiver.key.pub"))
}
