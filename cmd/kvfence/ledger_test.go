package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// Ensure that the ledger commands run the claim lifecycle, refuse by the
// ledger's rules with exit 3, and refuse a restored ledger file with exit 4.
func TestLedger_Walkthrough(t *testing.T) {
	c := newCLI(t)
	c.must(ExitOK, "keygen", "--out", c.path("ledger.key"))
	c.env[envLedger] = c.path("ledger.db")
	c.env[envLedgerAnchor] = c.path("ledger.anchor")
	c.env[envLedgerKey] = c.path("ledger.key")
	init := c.json(ExitOK, "ledger", "init", "--id", "ledger-1")
	if init["ledger"] != "ledger-1" {
		t.Fatalf("init = %v", init)
	}
	c.must(ExitOK, "request", "build", "--action", "act", "--target", "cm/backup", "--set", "45", "--out", c.path("req.cbor"))
	req, err := os.ReadFile(c.path("req.cbor"))
	if err != nil {
		t.Fatal(err)
	}
	appr := c.json(ExitOK, "ledger", "approve", "--action", "act", "--request", c.path("req.cbor"), "--approver", "alice")
	sum := sha256.Sum256(req)
	if appr["request_sha256"] != hex.EncodeToString(sum[:]) || appr["approver"] != "alice" || appr["action_checked"] != true {
		t.Fatalf("approve = %v", appr)
	}
	cl := c.json(ExitOK, "ledger", "claim", "--action", "act", "--worker", "worker-a")
	ref, _ := cl["claim"].(string)
	if cl["state"] != "claimed" || cl["resumed"] != false || !strings.HasPrefix(ref, "c-") {
		t.Fatalf("claim = %v", cl)
	}
	r := c.must(ExitDenied, "ledger", "claim", "--action", "act", "--worker", "worker-b")
	if !strings.Contains(r.stderr, "claimed by another worker") {
		t.Fatalf("second worker: %s", r)
	}
	if again := c.json(ExitOK, "ledger", "claim", "--action", "act", "--worker", "worker-a"); again["claim"] != ref || again["resumed"] != true {
		t.Fatalf("restarted worker: %v, want its claim %s resumed", again, ref)
	}
	c.json(ExitOK, "ledger", "dispatch", "--claim", ref, "--worker", "worker-a")
	c.must(ExitOK, "ledger", "show") // a copy taken here is restored below
	backup, err := os.ReadFile(c.path("ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	tk := c.json(ExitOK, "ledger", "takeover", "--action", "act", "--operator", "op", "--worker", "worker-b", "--reason", "worker-a paused")
	if tk["worker"] != "worker-b" || tk["generation"] != float64(2) {
		t.Fatalf("takeover = %v", tk)
	}
	c.must(ExitDenied, "ledger", "finish", "--claim", ref, "--worker", "worker-a", "--outcome", "succeeded")
	show := c.json(ExitOK, "ledger", "show", "--action", "act")
	actions := show["actions"].([]any)
	claims := actions[0].(map[string]any)["claims"].([]any)
	if len(claims) != 2 || claims[0].(map[string]any)["state"] != "uncertain" || claims[0].(map[string]any)["superseded_state"] != "dispatched" {
		t.Fatalf("show = %v", show)
	}
	c.json(ExitOK, "ledger", "reconcile", "--claim", ref, "--operator", "op", "--outcome", "failed")

	// Usage errors.
	c.must(ExitUsage, "ledger")
	c.must(ExitUsage, "ledger", "bogus")
	c.must(ExitUsage, "ledger", "claim", "--action", "act")
	c.must(ExitUsage, "ledger", "finish", "--claim", ref, "--worker", "worker-b", "--outcome", "maybe")
	c.must(ExitUsage, "ledger", "approve", "--action", "x", "--approver", "a")
	c.must(ExitOK, "ledger", "-h")
	c.must(ExitUsage, "ledger", "approve", "--action", "y", "--approver", "a", "--request-sha256", strings.Repeat("0", 64), "--ttl", "0")
	c.must(ExitUsage, "ledger", "claim", "--action", "act", "--worker", "w", "--lease", "-1s")
	c.must(ExitUsage, "ledger", "heartbeat", "--claim", ref, "--worker", "worker-a", "--lease", "48h")
	c.must(ExitUsage, "ledger", "show", "--anchor", c.path("ledger.db"))
	// Flags are checked before the ledger is opened: a usage error, not a
	// missing file, and the chain does not move.
	head := c.json(ExitOK, "ledger", "show")["audit_seq"]
	c.must(ExitUsage, "ledger", "claim", "--ledger", c.path("missing.db"), "--worker", "w")
	c.must(ExitUsage, "ledger", "dispatch", "--claim", ref)
	if again := c.json(ExitOK, "ledger", "show")["audit_seq"]; again != head {
		t.Fatalf("usage errors moved the ledger's chain from %v to %v", head, again)
	}

	// A restored copy of the ledger file: refused for writing and reading.
	if err := os.WriteFile(c.path("ledger.db"), backup, 0o600); err != nil {
		t.Fatal(err)
	}
	r = c.must(ExitIntegrity, "ledger", "claim", "--action", "act", "--worker", "worker-c")
	if !strings.Contains(r.stderr, "rollback detected") || !strings.Contains(r.stderr, "restored") {
		t.Fatalf("restored ledger: %s", r)
	}
	c.must(ExitIntegrity, "ledger", "show")
}
