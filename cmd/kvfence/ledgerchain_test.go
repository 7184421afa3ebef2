package main

import (
	"os"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/lab"
)

// ledgerCLI sets up a ledger with its key and anchor, and points the
// ledger's environment variables at them.
func ledgerCLI(t *testing.T) *cli {
	t.Helper()
	c := newCLI(t)
	c.must(ExitOK, "keygen", "--out", c.path("ledger.key"))
	c.env[envLedger] = c.path("ledger.db")
	c.env[envLedgerAnchor] = c.path("ledger.anchor")
	c.env[envLedgerKey] = c.path("ledger.key")
	c.must(ExitOK, "ledger", "init", "--id", "ledger-1")
	return c
}

// Ensure that ledger approve refuses, with exit 3 and nothing written, a
// request that names another action than --action; refuses a file that is
// not a request as a usage error; and marks an approval by digest alone
// as unchecked.
func TestLedger_ApproveChecksTheRequestsAction(t *testing.T) {
	c := ledgerCLI(t)
	c.must(ExitOK, "request", "build", "--action", "act-3", "--target", "cm/backup", "--set", "45", "--out", c.path("req.cbor"))
	head := c.json(ExitOK, "ledger", "show")["audit_seq"]
	r := c.must(ExitDenied, "ledger", "approve", "--action", "act-X", "--request", c.path("req.cbor"), "--approver", "alice")
	if !strings.Contains(r.stderr, `"act-X"`) || !strings.Contains(r.stderr, `"act-3"`) || !strings.Contains(r.stderr, "Try:") {
		t.Fatalf("mismatched approval: %s", r)
	}
	if err := os.WriteFile(c.path("junk.cbor"), []byte("act-3"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.must(ExitUsage, "ledger", "approve", "--action", "act-3", "--request", c.path("junk.cbor"), "--approver", "alice")
	show := c.json(ExitOK, "ledger", "show")
	if show["audit_seq"] != head || len(show["actions"].([]any)) != 0 {
		t.Fatalf("refused approvals wrote: %v", show)
	}
	if a := c.json(ExitOK, "ledger", "approve", "--action", "act-3", "--request", c.path("req.cbor"), "--approver", "alice"); a["action_checked"] != true {
		t.Fatalf("approval of the request's own action: %v", a)
	}
	d := c.json(ExitOK, "ledger", "approve", "--action", "act-4", "--request-sha256", strings.Repeat("ab", 32), "--approver", "alice")
	if d["action_checked"] != false {
		t.Fatalf("approval by digest: %v, want action_checked false", d)
	}
	if r := c.must(ExitOK, "ledger", "show", "--action", "act-4"); !strings.Contains(r.stdout, "approved by digest alone") {
		t.Fatalf("show does not say the action was not checked:\n%s", r.stdout)
	}
}

// Ensure that a reconciled claim reports when it was reconciled, apart
// from settled_at (the takeover), and that no settled claim reports a lease.
func TestLedger_ReconcileShowsReconciledAt(t *testing.T) {
	c := ledgerCLI(t)
	c.must(ExitOK, "ledger", "approve", "--action", "act", "--request-sha256", strings.Repeat("ab", 32), "--approver", "alice")
	ref := c.json(ExitOK, "ledger", "claim", "--action", "act", "--worker", "worker-a")["claim"].(string)
	c.must(ExitOK, "ledger", "takeover", "--action", "act", "--operator", "op", "--worker", "worker-b", "--reason", "paused")
	rec := c.json(ExitOK, "ledger", "reconcile", "--claim", ref, "--operator", "op", "--outcome", "failed")
	settled, _ := rec["settled_at"].(string)
	reconciled, _ := rec["reconciled_at"].(string)
	if reconciled == "" || settled == "" || reconciled < settled || rec["lease_expires_at"] != nil || rec["lease_expired"] != false {
		t.Fatalf("reconciled claim: %v", rec)
	}
	claims := c.json(ExitOK, "ledger", "show", "--action", "act")["actions"].([]any)[0].(map[string]any)["claims"].([]any)
	if old := claims[0].(map[string]any); old["reconciled_at"] != reconciled || old["lease_expires_at"] != nil {
		t.Fatalf("stored reconciled claim: %v", old)
	}
	if live := claims[1].(map[string]any); live["lease_expires_at"] == nil {
		t.Fatalf("the live claim reports no lease: %v", live)
	}
	if r := c.must(ExitOK, "ledger", "show", "--action", "act"); !strings.Contains(r.stdout, "reconciled") ||
		strings.Count(r.stdout, "lease expires") != 1 {
		t.Fatalf("show text: want one lease (the live claim's) and the reconciliation:\n%s", r.stdout)
	}
}

// Ensure that ledger verify-chain reports a sound ledger ok and a restored
// copy as rollback_detected (exit 4); that ledger events lists the chain;
// and that verify-chain given the other kind of file says which it is and
// names the right command.
func TestLedger_VerifyChainAndEvents(t *testing.T) {
	c := ledgerCLI(t)
	c.must(ExitOK, "ledger", "approve", "--action", "act", "--request-sha256", strings.Repeat("ab", 32), "--approver", "alice")
	backup, err := os.ReadFile(c.path("ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	ref := c.json(ExitOK, "ledger", "claim", "--action", "act", "--worker", "worker-a")["claim"].(string)
	pub := c.path("ledger.key.pub")
	v := c.json(ExitOK, "ledger", "verify-chain", "--pub", pub)
	if v["ok"] != true || v["problem"] != "ok" || v["entries"] != float64(3) || v["head"] != v["anchor_head"] {
		t.Fatalf("verify-chain of a sound ledger: %v", v)
	}
	if r := c.must(ExitOK, "ledger", "verify-chain", "--pub", pub); !strings.Contains(r.stdout, "problem  ok") {
		t.Fatalf("verify-chain text:\n%s", r.stdout)
	}
	c.must(ExitUsage, "ledger", "verify-chain")
	c.must(ExitUsage, "ledger", "verify-chain", "--pub", pub, "--max-age", "-1s")

	ev := c.json(ExitOK, "ledger", "events")
	events := ev["events"].([]any)
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e.(map[string]any)["kind"].(string))
	}
	last := events[len(events)-1].(map[string]any)
	if ev["ledger"] != "ledger-1" || strings.Join(kinds, ",") != "init,approve,claim" || last["decision"] != ref || last["executor"] != "worker-a" {
		t.Fatalf("events: %v", ev)
	}
	if only := c.json(ExitOK, "ledger", "events", "--since", "3")["events"].([]any); len(only) != 1 {
		t.Fatalf("events --since 3: %v", only)
	}
	if none := c.json(ExitOK, "ledger", "events", "--action", "other")["events"].([]any); len(none) != 0 {
		t.Fatalf("events --action other: %v", none)
	}
	text := c.must(ExitOK, "ledger", "events").stdout
	if !strings.Contains(text, "GENERATION") || !strings.Contains(text, ref) || !strings.Contains(text, "by=worker-a") {
		t.Fatalf("events text:\n%s", text)
	}

	// The receiver's verify-chain given the ledger, and the reverse.
	c.must(ExitOK, "keygen", "--out", c.path("receiver.key"))
	c.must(ExitOK, "keygen", "--out", c.path("recovery.key"))
	c.must(ExitOK, "init", "--db", c.path("receiver.db"), "--anchor", c.path("receiver.anchor"), "--key", c.path("receiver.key"), "--id", "r1",
		"--recovery-pub", c.path("recovery.key.pub"))
	r := c.must(ExitError, "verify-chain", "--db", c.path("ledger.db"), "--anchor", c.path("ledger.anchor"), "--pub", pub)
	if !strings.Contains(r.stderr, "is an execution ledger file, not a receiver database") || !strings.Contains(r.stderr, "kvfence ledger verify-chain") {
		t.Fatalf("verify-chain of a ledger file: %s", r)
	}
	r = c.must(ExitError, "ledger", "verify-chain", "--ledger", c.path("receiver.db"), "--anchor", c.path("receiver.anchor"),
		"--pub", c.path("receiver.key.pub"))
	if !strings.Contains(r.stderr, "is a receiver database, not an execution ledger") || !strings.Contains(r.stderr, "kvfence verify-chain --db") {
		t.Fatalf("ledger verify-chain of a receiver database: %s", r)
	}
	if r := c.must(ExitError, "ledger", "show", "--ledger", c.path("receiver.db")); !strings.Contains(r.stderr, "is a receiver database") {
		t.Fatalf("ledger show of a receiver database: %s", r)
	}

	// A restored copy of the ledger.
	if err := os.WriteFile(c.path("ledger.db"), backup, 0o600); err != nil {
		t.Fatal(err)
	}
	v = c.json(ExitIntegrity, "ledger", "verify-chain", "--pub", pub)
	if v["ok"] != false || v["problem"] != "rollback_detected" {
		t.Fatalf("verify-chain of a restored ledger: %v", v)
	}
	if r := c.must(ExitIntegrity, "ledger", "verify-chain", "--pub", pub); !strings.Contains(r.stderr, "restored") {
		t.Fatalf("restored ledger: %s", r)
	}
	// Another key is a bad signature, not a sound chain.
	if v := c.json(ExitIntegrity, "ledger", "verify-chain", "--pub", c.path("receiver.key.pub")); v["problem"] != "bad_signature" {
		t.Fatalf("verify-chain with the receiver's key: %v", v)
	}
}

// Ensure that the lab command fails (exit 1) when a summary's checks are
// not as expected, naming them: a summary with no observation judged has
// every check unexpected.
func TestLabVerdict_NotAsExpectedFails(t *testing.T) {
	err := labVerdict(&lab.Summary{}, "out")
	if exitCode(err) != ExitError || !strings.Contains(err.Error(), "stale_worker_accepted") || !strings.Contains(hint(err), "report.md") {
		t.Fatalf("labVerdict = %v (exit %d)", err, exitCode(err))
	}
}
