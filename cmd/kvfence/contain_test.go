package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// containSetup makes a ledger and two receivers on this host, r1 and r2,
// each with the fixture scope and target, an action approved with a
// boundary at each, claimed by worker-a and taken over by worker-b. It
// returns worker-a's and worker-b's claim refs.
func containSetup(t *testing.T) (c *cli, claimA, claimB string) {
	c = ledgerWithReceivers(t)
	for _, r := range []string{"r1", "r2"} {
		recv := []string{"--db", c.path(r + ".db"), "--anchor", c.path(r + ".anchor"), "--key", c.path(r + ".key")}
		c.must(ExitOK, append([]string{"init", "--id", "recv-" + r, "--no-recovery-key"}, recv...)...)
		c.must(ExitOK, append([]string{"scope", "create", "--scope", fixtureScope}, recv...)...)
		c.must(ExitOK, append([]string{"target", "create", "--scope", fixtureScope, "--target", fixtureScope,
			"--value-file", filepath.Join(fixtureDir, "value.json")}, recv...)...)
		c.must(ExitOK, "ledger", "receiver", "add", "--name", r, "--db", c.path(r+".db"), "--receiver-anchor", c.path(r+".anchor"),
			"--receiver-pub", c.path(r+".key.pub"), "--operator", "op")
	}
	c.must(ExitOK, "request", "build", "--action", "raise-retention", "--target", fixtureScope,
		"--patch-file", filepath.Join(fixtureDir, "patch.json"), "--out", c.path("req.cbor"))
	c.must(ExitOK, "ledger", "approve", "--action", "raise-retention", "--request", c.path("req.cbor"), "--approver", "alice",
		"--boundary", "r1:"+fixtureScope, "--boundary", "r2:"+fixtureScope)
	claimA = c.json(ExitOK, "ledger", "claim", "--action", "raise-retention", "--worker", "worker-a")["claim"].(string)
	// worker-a applies its request at r1 before it pauses: an effect the
	// containment lists as outstanding.
	r1 := []string{"--db", c.path("r1.db"), "--anchor", c.path("r1.anchor"), "--key", c.path("r1.key")}
	g := c.json(ExitOK, append([]string{"activate", "--scope", fixtureScope, "--executor", "worker-a", "--claim", claimA,
		"--request", c.path("req.cbor")}, r1...)...)
	c.must(ExitOK, "envelope", "build", "--scope", fixtureScope, "--epoch", jsonNum(g["epoch"]), "--grant", g["grant"].(string),
		"--executor", "worker-a", "--claim", claimA, "--request", c.path("req.cbor"), "--out", c.path("a.cbor"))
	c.must(ExitOK, append([]string{"submit", "--as", "worker-a", "--envelope", c.path("a.cbor")}, r1...)...)
	claimB = c.json(ExitOK, "ledger", "takeover", "--action", "raise-retention", "--operator", "op", "--worker", "worker-b",
		"--reason", "worker-a paused")["claim"].(string)
	return c, claimA, claimB
}

// scopeAt returns the fixture scope's status at receiver r.
func (c *cli) scopeAt(r string) map[string]any {
	c.t.Helper()
	st := c.json(ExitOK, "status", "--db", c.path(r+".db"), "--anchor", c.path(r+".anchor"), "--scope", fixtureScope)
	return st["scopes"].([]any)[0].(map[string]any)
}

// Ensure the contain commands as an operator runs them: a boundary whose
// key is missing leaves the containment partial (exit 8) and the
// successor refused (exit 3, nothing activated); the rerun holds only the
// missing boundary, with no second generation at the first; activate is
// refused until the superseded claim is reconciled, then opens both
// boundaries at the installed epoch; verify passes, and fails (exit 4)
// once a receiver is restored from a backup taken before the hold.
func TestContain_CLI(t *testing.T) {
	c, claimA, claimB := containSetup(t)
	k1, k2 := "r1="+c.path("r1.key"), "r2="+c.path("r2.key")
	contain := func(keys ...string) []string {
		args := []string{"contain", "--action", "raise-retention", "--reason", "worker-a paused", "--operator", "op", "--json"}
		for _, k := range keys {
			args = append(args, "--receiver-key", k)
		}
		return args
	}
	activate := []string{"contain", "activate", "--action", "raise-retention", "--executor", "worker-b", "--claim", claimB,
		"--request", c.path("req.cbor"), "--decision", "review-7", "--receiver-key", k1, "--receiver-key", k2}

	r := c.must(ExitPartial, contain(k1)...)
	for _, want := range []string{`"state": "partial"`, `"result": "acknowledged"`, `"result": "failed"`, `"error_code": "unreachable"`,
		`"superseded_claim": "` + claimA + `"`, `"hold_requested_at": "`, `"checkpoint": {`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("partial containment lacks %s:\n%s", want, r.stdout)
		}
	}
	var rec struct {
		Boundaries []struct {
			Outstanding []map[string]any `json:"outstanding"`
		} `json:"boundaries"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatal(err)
	}
	if o := rec.Boundaries[0].Outstanding; len(o) != 1 || o[0]["action"] != "raise-retention" || o[0]["revision"] != 2.0 ||
		o[0]["applied_at"] == nil {
		t.Errorf("worker-a's applied request is not outstanding at r1: %v", o)
	}
	r = c.must(ExitDenied, activate...)
	if !strings.Contains(r.stderr, "not fully contained") {
		t.Errorf("activate on partial: %s", r)
	}
	for _, rc := range []string{"r1", "r2"} {
		if st := c.scopeAt(rc); st["active_grant"] != nil && st["active_grant"] != "" {
			t.Fatalf("%s activated while partial: %v", rc, st)
		}
	}
	epoch1 := c.scopeAt("r1")["epoch"]
	copyFile(t, c.path("r2.db"), c.path("r2.db.bak"))
	copyFile(t, c.path("r2.anchor"), c.path("r2.anchor.bak"))

	r = c.must(ExitOK, contain(k1, k2)...)
	if !strings.Contains(r.stdout, `"state": "full"`) {
		t.Fatalf("rerun: %s", r)
	}
	if got := c.scopeAt("r1")["epoch"]; got != epoch1 {
		t.Fatalf("the rerun moved r1 from epoch %v to %v", epoch1, got)
	}
	c.must(ExitOK, "contain", "verify", "--action", "raise-retention", "--receiver-key", k1, "--receiver-key", k2)
	// Without r2's key its epoch cannot be read: not a pass.
	r = c.must(ExitError, "contain", "verify", "--action", "raise-retention", "--receiver-key", k1, "--json")
	if !strings.Contains(r.stdout, `"ok": false`) || !strings.Contains(r.stdout, `"mismatches": []`) {
		t.Fatalf("verify with r2 unreached: %s", r)
	}

	r = c.must(ExitDenied, activate...)
	if !strings.Contains(r.stderr, "not reconciled") {
		t.Errorf("activate unreconciled: %s", r)
	}
	c.must(ExitOK, "ledger", "reconcile", "--claim", claimA, "--operator", "op", "--outcome", "failed")
	superseded := append([]string{}, activate...)
	superseded[7] = claimA
	if r := c.must(ExitDenied, superseded...); !strings.Contains(r.stderr, "not the action's successor") {
		t.Errorf("activate with the superseded claim: %s", r)
	}
	c.must(ExitOK, activate...)
	// A repeat, as after a lost answer, activates nothing twice.
	if r := c.must(ExitOK, activate...); strings.Contains(r.stdout, "not activated") {
		t.Fatalf("repeated activate: %s", r)
	}
	for _, rc := range []string{"r1", "r2"} {
		if st := c.scopeAt(rc); st["mode"] != "open" || st["grant"].(map[string]any)["claim"] != claimB {
			t.Fatalf("%s after activate: %v", rc, st)
		}
	}
	show := c.json(ExitOK, "contain", "show", "--action", "raise-retention")
	if s := show["successor"].([]any); len(s) != 2 {
		t.Fatalf("show: %v", show)
	}

	copyFile(t, c.path("r2.db.bak"), c.path("r2.db"))
	copyFile(t, c.path("r2.anchor.bak"), c.path("r2.anchor"))
	r = c.must(ExitIntegrity, "contain", "verify", "--action", "raise-retention", "--receiver-key", k1, "--receiver-key", k2)
	if !strings.Contains(r.stdout, "epoch_below_installed") {
		t.Fatalf("verify after restore: %s", r)
	}
}

// Ensure contain over served receivers: r1 over https with the
// coordinator's admin certificate, r2 over its admin unix socket; both
// acknowledge, verify, and take the successor once the claim is
// reconciled.
func TestContain_CLIServed(t *testing.T) {
	c := ledgerWithReceivers(t)
	c.pki("t")
	c.clientCert("t", "operator", spiffeOperator)
	sock := filepath.Join(socketDir(t), "admin.sock")
	addrs := map[string]string{}
	for _, r := range []string{"r1", "r2"} {
		recv := []string{"--db", c.path(r + ".db"), "--anchor", c.path(r + ".anchor"), "--key", c.path(r + ".key")}
		c.must(ExitOK, append([]string{"init", "--id", "recv-" + r, "--no-recovery-key"}, recv...)...)
		c.must(ExitOK, append([]string{"scope", "create", "--scope", fixtureScope}, recv...)...)
		c.must(ExitOK, append([]string{"target", "create", "--scope", fixtureScope, "--target", fixtureScope,
			"--value-file", filepath.Join(fixtureDir, "value.json")}, recv...)...)
		args := append([]string{"--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
			"--client-ca", c.path("t-ca.crt"), "--admin", spiffeOperator}, recv...)
		if r == "r2" {
			args = append(args, "--admin-socket", sock, "--admin-uid", fmt.Sprint(os.Getuid()))
		}
		rn := c.serve(args...)
		addrs[r] = "https://" + rn.addrs.Listen
	}
	addrs["r2"] = "unix://" + sock
	for _, r := range []string{"r1", "r2"} {
		c.must(ExitOK, "ledger", "receiver", "add", "--name", r, "--server", addrs[r], "--receiver-id", "recv-"+r,
			"--receiver-pub", c.path(r+".key.pub"), "--operator", "op")
	}
	c.must(ExitOK, "request", "build", "--action", "raise-retention", "--target", fixtureScope,
		"--patch-file", filepath.Join(fixtureDir, "patch.json"), "--out", c.path("req.cbor"))
	c.must(ExitOK, "ledger", "approve", "--action", "raise-retention", "--request", c.path("req.cbor"), "--approver", "alice",
		"--boundary", "r1:"+fixtureScope, "--boundary", "r2:"+fixtureScope)
	// The ledger knows the workers by the identities the receivers
	// authenticate: their SPIFFE IDs.
	claimA := c.json(ExitOK, "ledger", "claim", "--action", "raise-retention", "--worker", spiffeWorker+"a")["claim"].(string)
	claimB := c.json(ExitOK, "ledger", "takeover", "--action", "raise-retention", "--operator", "op", "--worker", spiffeWorker+"b",
		"--reason", "worker-a paused")["claim"].(string)
	tlsArgs := []string{"--tls-cert", c.path("t-operator.crt"), "--tls-key", c.path("t-operator.key"), "--tls-ca", c.path("t-ca.crt")}

	rec := c.json(ExitOK, append([]string{"contain", "--action", "raise-retention", "--reason", "worker-a paused"}, tlsArgs...)...)
	if rec["state"] != "full" {
		t.Fatalf("contain: %v", rec)
	}
	for _, b := range rec["boundaries"].([]any) {
		if b := b.(map[string]any); b["result"] != "acknowledged" || b["installed_epoch"] != 2.0 || b["checkpoint"] == nil {
			t.Fatalf("boundary: %v", b)
		}
	}
	c.must(ExitOK, append([]string{"contain", "verify", "--action", "raise-retention"}, tlsArgs...)...)
	c.must(ExitOK, "ledger", "reconcile", "--claim", claimA, "--operator", "op", "--outcome", "failed")
	act := c.json(ExitOK, append([]string{"contain", "activate", "--action", "raise-retention", "--executor", spiffeWorker + "b",
		"--claim", claimB, "--request", c.path("req.cbor"), "--decision", "review-7"}, tlsArgs...)...)
	if a := act["activated"].([]any); len(a) != 2 {
		t.Fatalf("activate: %v", act)
	}
	st := c.json(ExitOK, append([]string{"status", "--server", addrs["r1"], "--scope", fixtureScope}, tlsArgs...)...)
	if g := st["scopes"].([]any)[0].(map[string]any)["grant"].(map[string]any); g["claim"] != claimB || g["epoch"] != 2.0 {
		t.Fatalf("r1: %v", st)
	}
}

// Ensure contain alternate: a boundary that cannot acknowledge, recorded as
// contained by another path, makes the state full_with_alternate (exit 0
// on the rerun, never "full"), and the successor is activated only at the
// acknowledged boundary.
func TestContain_CLIAlternate(t *testing.T) {
	c, claimA, claimB := containSetup(t)
	k1 := "r1=" + c.path("r1.key")
	c.must(ExitPartial, "contain", "--action", "raise-retention", "--reason", "worker-a paused", "--receiver-key", k1)
	c.must(ExitUsage, "contain", "alternate", "--action", "raise-retention", "--boundary", "r2", "--operator", "op")
	rec := c.json(ExitOK, "contain", "alternate", "--action", "raise-retention", "--boundary", "r2", "--operator", "op",
		"--reason", "r2 cut off at the network by the firewall team")
	b := rec["boundaries"].([]any)[1].(map[string]any)
	if rec["state"] != "full_with_alternate" || b["result"] != "alternate" || b["alternate"].(map[string]any)["operator"] != "op" {
		t.Fatalf("alternate: %v", rec)
	}
	if got := c.json(ExitOK, "contain", "--action", "raise-retention", "--reason", "worker-a paused", "--receiver-key", k1); got["state"] != "full_with_alternate" {
		t.Fatalf("rerun: %v", got)
	}
	c.must(ExitOK, "ledger", "reconcile", "--claim", claimA, "--operator", "op", "--outcome", "succeeded")
	act := c.json(ExitOK, "contain", "activate", "--action", "raise-retention", "--executor", "worker-b", "--claim", claimB,
		"--request", c.path("req.cbor"), "--decision", "review-7", "--receiver-key", k1)
	na := act["not_activated"].([]any)
	if len(act["activated"].([]any)) != 1 || len(na) != 1 || na[0].(map[string]any)["code"] != "alternate" {
		t.Fatalf("activate: %v", act)
	}
	if st := c.scopeAt("r2"); st["grant"] != nil {
		t.Fatalf("r2 activated though contained by an alternate: %v", st)
	}
}
