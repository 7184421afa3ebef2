package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// names returns the key field of each object in list.
func names(list any, key string) []string {
	var out []string
	for _, e := range list.([]any) {
		out = append(out, fmt.Sprint(e.(map[string]any)[key]))
	}
	return out
}

// Ensure that scope list and target list list what exists, in text and
// JSON, and that target list --scope filters.
func TestScopeAndTargetList(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.must(0, "scope", "create", "--scope", "other", "--max-ttl", "1h")
	c.must(0, "target", "create", "--scope", "other", "--target", "other/t", "--value", "v")
	id := c.activate("worker-a", "claim-a", "a.cbor")

	out := c.json(0, "scope", "list")
	if got := strings.Join(names(out["scopes"], "scope"), ","); got != fixtureScope+",other" {
		t.Fatalf("scope list: %s", got)
	}
	first, second := out["scopes"].([]any)[0].(map[string]any), out["scopes"].([]any)[1].(map[string]any)
	if first["active_grant"] != id || first["grant_not_after"] == nil || first["grant_expired"] != false ||
		first["max_grant_ttl"] != "24h0m0s" || first["mode"] != "open" {
		t.Fatalf("scope list, open scope: %v", first)
	}
	if second["active_grant"] != "" || second["grant_not_after"] != nil || second["max_grant_ttl"] != "1h0m0s" ||
		out["max_grant_ttl"] != "24h0m0s" {
		t.Fatalf("scope list, held scope: %v (%v)", second, out["max_grant_ttl"])
	}
	if txt := c.must(0, "scope", "list").stdout; !strings.Contains(txt, id) || !strings.Contains(txt, "1h0m0s") {
		t.Fatalf("scope list text:\n%s", txt)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, fixtureScope + ",other/t"},
		{[]string{"--scope", "other"}, "other/t"},
		{[]string{"--scope", fixtureScope}, fixtureScope},
	} {
		out := c.json(0, append([]string{"target", "list"}, tc.args...)...)
		if got := strings.Join(names(out["targets"], "target"), ","); got != tc.want {
			t.Fatalf("target list %v: %s, want %s", tc.args, got, tc.want)
		}
	}
	out = c.json(0, "target", "list", "--scope", "other")
	if e := out["targets"].([]any)[0].(map[string]any); e["scope"] != "other" || e["revision"] != 1.0 || e["value_size"] != 1.0 ||
		e["value_sha256"] != "4c94485e0c21ae6c41ce1dfe7b6bfaceea5ab68e40a2476f50208e526f506080" {
		t.Fatalf("target list entry: %v", e)
	}
	if txt := c.must(0, "target", "list").stdout; !strings.Contains(txt, "other/t") || !strings.Contains(txt, "TARGET") {
		t.Fatalf("target list text:\n%s", txt)
	}
	if r := c.run("target", "list", "--scope", "nope"); r.code == 0 || !strings.Contains(r.stderr, "unknown scope") {
		t.Fatalf("target list of an unknown scope: %s", r)
	}
	c.must(ExitUsage, "target", "list", "--scope", "")
	c.must(ExitUsage, "scope", "nope")
	c.must(ExitUsage, "target")
}

// Ensure that target names are one namespace across the receiver: the
// help says so, and a name taken in another scope is refused naming it.
func TestTargetCreate_NamesAreReceiverWide(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.must(0, "scope", "create", "--scope", "other")
	r := c.run("target", "create", "--scope", "other", "--target", fixtureScope, "--value", "v")
	if r.code == 0 || !strings.Contains(r.stderr, "is a target of scope "+fixtureScope) {
		t.Fatalf("target create of a name another scope holds: %s", r)
	}
	if h := c.must(0, "help", "target", "create").stdout; !strings.Contains(h, "unique across the receiver") {
		t.Fatalf("target create help does not say names are receiver-wide:\n%s", h)
	}
}

// Ensure that observe grant shows a grant, that it and status say when
// it has expired, and that an unknown id is refused.
func TestObserveGrant(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	g := c.json(0, "activate", "--scope", fixtureScope, "--executor", "worker-a", "--claim", "claim-a",
		"--request", c.path("req.cbor"), "--decision", "CHG-1")
	id := g["grant"].(string)
	// The flag may come before the id.
	out := c.json(0, "observe", "grant", id)
	again := c.json(0, "observe", "grant", "--lock-timeout", "2s", id)
	for _, o := range []map[string]any{out, again} {
		if o["grant"] != id || o["executor"] != "worker-a" || o["claim"] != "claim-a" || o["action"] != "raise-retention" ||
			o["decision"] != "CHG-1" || o["audit_seq"] != g["audit_seq"] || o["audit_seq"] == 0.0 || o["expired"] != false ||
			o["not_after"] != g["not_after"] || o["created_at"] == nil || o["revoked_seq"] != 0.0 {
			t.Fatalf("observe grant: %v (activated %v)", o, g)
		}
	}
	if txt := c.must(0, "observe", "grant", id).stdout; !strings.Contains(txt, "worker-a") || strings.Contains(txt, "expired") {
		t.Fatalf("observe grant text:\n%s", txt)
	}
	st := c.json(0, "status")["scopes"].([]any)[0].(map[string]any)
	if sg := st["grant"].(map[string]any); sg["grant"] != id || sg["executor"] != "worker-a" || sg["expired"] != false {
		t.Fatalf("status grant: %v", st)
	}

	// A grant that has expired, by the receiver's clock.
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "next")
	g = c.json(0, "activate", "--scope", fixtureScope, "--executor", "worker-b", "--claim", "claim-b",
		"--request", c.path("req.cbor"), "--ttl", "1ms")
	time.Sleep(5 * time.Millisecond)
	if o := c.json(0, "observe", "grant", g["grant"].(string)); o["expired"] != true {
		t.Fatalf("observe grant after expiry: %v", o)
	}
	for _, args := range [][]string{{"observe", "grant", g["grant"].(string)}, {"status"}, {"scope", "list"}} {
		if txt := c.must(0, args...).stdout; !strings.Contains(txt, "(expired)") {
			t.Fatalf("%v does not say the grant expired:\n%s", args, txt)
		}
	}
	st = c.json(0, "status")["scopes"].([]any)[0].(map[string]any)
	if sg := st["grant"].(map[string]any); sg["expired"] != true || sg["executor"] != "worker-b" {
		t.Fatalf("status after expiry: %v", st)
	}
	if r := c.run("observe", "grant", strings.Repeat("0", 32)); r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("observe grant of an unknown id: %s", r)
	}
	c.must(ExitUsage, "observe", "grant")
	c.must(ExitUsage, "observe", "grant", id, id)
}

// Ensure that hold --all holds every open scope at once, reports the held
// ones, and that its flags are checked.
func TestHoldAll(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	c.must(0, "scope", "create", "--scope", "held")
	c.must(0, "scope", "create", "--scope", "open2")
	c.must(0, "target", "create", "--scope", "open2", "--target", "open2/t", "--value", "v")
	c.must(0, "request", "build", "--action", "x", "--target", "open2/t", "--set", "w", "--out", c.path("r2.cbor"))
	c.must(0, "activate", "--scope", "open2", "--executor", "w", "--claim", "c", "--request", c.path("r2.cbor"))

	out := c.json(0, "hold", "--all", "--reason", "incident 9")
	if got := strings.Join(names(out["scopes"], "scope"), ","); got != fixtureScope+",open2" {
		t.Fatalf("hold --all held %s", got)
	}
	if got := fmt.Sprint(out["already_held"]); got != "[held]" {
		t.Fatalf("hold --all already held %s", got)
	}
	for _, st := range c.json(0, "status")["scopes"].([]any) {
		if m := st.(map[string]any); m["mode"] != "held" || m["grant"] != nil {
			t.Fatalf("after hold --all: %v", m)
		}
	}
	c.must(ExitDenied, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	// Again: nothing open, nothing written.
	seq := c.json(0, "status")["audit_seq"]
	out = c.json(0, "hold", "--all", "--reason", "incident 9")
	if len(out["scopes"].([]any)) != 0 || len(out["already_held"].([]any)) != 3 || out["audit_seq"] != seq {
		t.Fatalf("second hold --all: %v", out)
	}
	if txt := c.must(0, "hold", "--all", "--reason", "again").stdout; !strings.Contains(txt, "nothing held") {
		t.Fatalf("hold --all with nothing open:\n%s", txt)
	}
	if n := c.json(0, "status")["audit_seq"]; n != seq {
		t.Fatalf("audit seq %v after a hold --all with nothing open, want %v", n, seq)
	}
	c.must(ExitUsage, "hold", "--all", "--scope", fixtureScope, "--reason", "r")
	c.must(ExitUsage, "hold", "--reason", "r")
	c.must(ExitUsage, "hold", "--all")
}

// Ensure that a grant lifetime over the maximum is refused with exit code
// 3 and writes nothing, and that the maximum is set at init and per scope.
func TestActivate_MaxTTL(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	before := c.must(0, "status", "--json").stdout
	r := c.must(ExitDenied, "activate", "--scope", fixtureScope, "--executor", "w", "--claim", "c",
		"--request", c.path("req.cbor"), "--ttl", "25h")
	if !strings.Contains(r.stderr, "over scope "+fixtureScope+"'s maximum of 24h0m0s") || !strings.Contains(r.stderr, "Try:") {
		t.Fatalf("activate over the maximum: %s", r)
	}
	if after := c.must(0, "status", "--json").stdout; after != before {
		t.Fatalf("a refused activation changed the state:\n%s\n---\n%s", before, after)
	}
	c.must(0, "activate", "--scope", fixtureScope, "--executor", "w", "--claim", "c", "--request", c.path("req.cbor"), "--ttl", "24h")
	c.must(ExitDenied, "scope", "create", "--scope", "wide", "--max-ttl", "25h")
	c.must(ExitUsage, "scope", "create", "--scope", "zero", "--max-ttl", "0s")
	if out := c.json(0, "scope", "create", "--scope", "narrow", "--max-ttl", "90m"); out["max_grant_ttl"] != "1h30m0s" {
		t.Fatalf("scope create --max-ttl: %v", out)
	}

	// A receiver initialised with a shorter maximum.
	d := t.TempDir()
	c.must(ExitUsage, "init", "--id", "r2", "--db", filepath.Join(d, "r.db"), "--anchor", filepath.Join(d, "r.anchor"), "--max-ttl", "0s")
	c.must(0, "init", "--id", "r2", "--db", filepath.Join(d, "r.db"), "--anchor", filepath.Join(d, "r.anchor"), "--max-ttl", "2h",
		"--recovery-pub", c.path("recovery.key.pub"))
	c.must(0, "scope", "create", "--scope", "s", "--db", filepath.Join(d, "r.db"), "--anchor", filepath.Join(d, "r.anchor"))
	out := c.json(0, "scope", "list", "--db", filepath.Join(d, "r.db"), "--anchor", filepath.Join(d, "r.anchor"))
	if out["max_grant_ttl"] != "2h0m0s" || out["scopes"].([]any)[0].(map[string]any)["max_grant_ttl"] != "2h0m0s" {
		t.Fatalf("scope list of a receiver with --max-ttl 2h: %v", out)
	}
}

// Ensure that the new commands work against a served receiver as they do
// locally: scope create --max-ttl, scope list, target list, observe grant
// and hold --all.
func TestServe_NewCommands(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	sock := filepath.Join(socketDir(t), "admin.sock")
	c.pki("t")
	rn := c.serve("--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
		"--client-ca", c.path("t-ca.crt"), "--admin-socket", sock, "--admin-uid", fmt.Sprint(os.Getuid()))
	srv := func(args ...string) []string { return append(args, "--server", "unix://"+sock) }
	if out := c.json(0, srv("scope", "create", "--scope", "other", "--max-ttl", "1h")...); out["max_grant_ttl"] != "1h0m0s" {
		t.Fatalf("served scope create --max-ttl: %v", out)
	}
	c.must(ExitDenied, srv("scope", "create", "--scope", "wide", "--max-ttl", "48h")...)
	c.must(0, srv("target", "create", "--scope", "other", "--target", "other/t", "--value", "v")...)
	g := c.json(0, srv("activate", "--scope", fixtureScope, "--executor", "w", "--claim", "c", "--request", c.path("req.cbor"))...)
	c.must(0, "request", "build", "--action", "x", "--target", "other/t", "--set", "w", "--out", c.path("r2.cbor"))
	c.must(ExitDenied, srv("activate", "--scope", "other", "--executor", "w", "--claim", "c", "--request", c.path("r2.cbor"), "--ttl", "2h")...)
	remote := map[string]string{}
	for name, args := range map[string][]string{
		"scope list":  {"scope", "list", "--json"},
		"target list": {"target", "list", "--scope", "other", "--json"},
		"grant":       {"observe", "grant", g["grant"].(string), "--json"},
	} {
		remote[name] = c.must(0, srv(args...)...).stdout
	}
	hold := c.json(0, srv("hold", "--all", "--reason", "incident")...)
	if got := strings.Join(names(hold["scopes"], "scope"), ","); got != fixtureScope || fmt.Sprint(hold["already_held"]) != "[other]" {
		t.Fatalf("served hold --all: %v", hold)
	}
	if code := rn.wait(t); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	// Locally, before the hold, these were the same; the receiver-wide
	// maximum is only known locally.
	var sl map[string]any
	if err := json.Unmarshal([]byte(remote["scope list"]), &sl); err != nil || sl["max_grant_ttl"] != "" ||
		strings.Join(names(sl["scopes"], "max_grant_ttl"), ",") != "24h0m0s,1h0m0s" ||
		strings.Join(names(sl["scopes"], "active_grant"), ",") != g["grant"].(string)+"," {
		t.Fatalf("served scope list: %v", sl)
	}
	if got := c.must(0, "target", "list", "--scope", "other", "--json").stdout; got != remote["target list"] {
		t.Fatalf("local target list differs from the served one:\n%s\n---\n%s", got, remote["target list"])
	}
	var og map[string]any
	if err := json.Unmarshal([]byte(remote["grant"]), &og); err != nil || og["grant"] != g["grant"] || og["executor"] != "w" ||
		og["audit_seq"] != g["audit_seq"] {
		t.Fatalf("served observe grant: %v", og)
	}
}

// Ensure that the command groups show each subcommand's help and refuse
// an unknown one.
func TestHelp_Lists(t *testing.T) {
	c := newCLI(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"help", "scope"}, []string{"kvfence scope create", "kvfence scope list"}},
		{[]string{"help", "target"}, []string{"kvfence target create", "kvfence target list"}},
		{[]string{"help", "scope", "list"}, []string{"kvfence scope list"}},
		{[]string{"help", "target", "list"}, []string{"kvfence target list [--scope S]"}},
		{[]string{"help", "hold"}, []string{"kvfence hold --all --reason R"}},
		{[]string{"help", "observe"}, []string{"kvfence observe grant ID"}},
		{[]string{"help"}, []string{"scope list", "target list", "--all"}},
	} {
		r := c.must(0, tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("%v does not show %q:\n%s", tc.args, w, r.stdout)
			}
		}
	}
	for _, args := range [][]string{{"scope", "list", "-h"}, {"target", "list", "-h"}, {"scope", "-h"}} {
		if r := c.must(0, args...); !strings.Contains(r.stderr, "Usage:") {
			t.Errorf("%v:\n%s", args, r.stderr)
		}
	}
	if r := c.must(ExitUsage, "scope", "remove"); !strings.Contains(r.stderr, "unknown subcommand (want create or list)") {
		t.Errorf("scope remove: %s", r)
	}
}
