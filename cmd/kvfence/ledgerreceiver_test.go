package main

import (
	"strings"
	"testing"
)

// ledgerWithReceivers is a ledger in the test's directory, named by the
// environment, and two receiver keys r1.key and r2.key.
func ledgerWithReceivers(t *testing.T) *cli {
	c := newCLI(t)
	for _, k := range []string{"ledger.key", "r1.key", "r2.key"} {
		c.must(ExitOK, "keygen", "--out", c.path(k))
	}
	c.env[envLedger] = c.path("ledger.db")
	c.env[envLedgerAnchor] = c.path("ledger.anchor")
	c.env[envLedgerKey] = c.path("ledger.key")
	c.must(ExitOK, "ledger", "init", "--id", "ledger-1")
	return c
}

// Ensure that ledger receiver add registers a served receiver and one on
// this host (its id read from the database, its key checked against it),
// that list shows them, and that each refusal exits as documented and
// writes nothing.
func TestLedgerReceiver_AddList(t *testing.T) {
	c := ledgerWithReceivers(t)
	add := func(args ...string) []string { return append([]string{"ledger", "receiver", "add"}, args...) }
	got := c.json(ExitOK, add("--name", "orders", "--server", "https://orders.example:8443", "--receiver-id", "recv-orders",
		"--receiver-pub", c.path("r1.key.pub"), "--operator", "op")...)
	if got["name"] != "orders" || got["receiver_id"] != "recv-orders" || got["server"] != "https://orders.example:8443" ||
		!strings.HasPrefix(got["public_key"].(string), "ssh-ed25519 ") || got["key_fingerprint"] == "" || got["added_by"] != "op" {
		t.Fatalf("receiver add = %v", got)
	}
	c.must(ExitOK, "init", "--db", c.path("r2.db"), "--anchor", c.path("r2.anchor"), "--key", c.path("r2.key"), "--id", "recv-local",
		"--no-recovery-key")
	head := c.json(ExitOK, "ledger", "show")["audit_seq"]
	for _, tc := range []struct {
		name string
		args []string
		exit int
		msg  string
	}{
		{"name taken", add("--name", "orders", "--server", "unix:///run/x.sock", "--receiver-id", "x", "--receiver-pub", c.path("r2.key.pub"),
			"--operator", "op"), ExitDenied, "already registered"},
		{"key pinned", add("--name", "other", "--server", "unix:///run/x.sock", "--receiver-id", "x", "--receiver-pub", c.path("r1.key.pub"),
			"--operator", "op"), ExitDenied, "could answer for each other"},
		{"http", add("--name", "n", "--server", "http://x:1", "--receiver-id", "x", "--receiver-pub", c.path("r2.key.pub"),
			"--operator", "op"), ExitError, "https or unix"},
		{"server and db", add("--name", "n", "--server", "https://x:1", "--db", c.path("r2.db"), "--receiver-pub", c.path("r2.key.pub"),
			"--operator", "op"), ExitUsage, "exactly one"},
		{"no receiver id", add("--name", "n", "--server", "https://x:1", "--receiver-pub", c.path("r2.key.pub"), "--operator", "op"),
			ExitUsage, "--receiver-id"},
		{"db without its anchor", add("--name", "n", "--db", c.path("r2.db"), "--receiver-pub", c.path("r2.key.pub"), "--operator", "op"),
			ExitUsage, "--receiver-anchor"},
		{"db with another key", add("--name", "local", "--db", c.path("r2.db"), "--receiver-anchor", c.path("r2.anchor"),
			"--receiver-pub", c.path("r1.key.pub"), "--operator", "op"), ExitError, "differs"},
		{"db with another id", add("--name", "local", "--db", c.path("r2.db"), "--receiver-anchor", c.path("r2.anchor"),
			"--receiver-id", "someone", "--receiver-pub", c.path("r2.key.pub"), "--operator", "op"), ExitUsage, "recv-local"},
		{"server with a receiver anchor", add("--name", "n", "--server", "https://x:1", "--receiver-id", "x", "--receiver-anchor", c.path("r2.anchor"),
			"--receiver-pub", c.path("r2.key.pub"), "--operator", "op"), ExitUsage, "goes with --db"},
		{"db with an etcd anchor", add("--name", "n", "--db", c.path("r2.db"), "--receiver-anchor", anchorEtcdPrefix+"127.0.0.1:2379/a",
			"--receiver-pub", c.path("r2.key.pub"), "--operator", "op"), ExitUsage, "anchor file"},
		{"db whose anchor is not its own", add("--name", "n", "--db", c.path("r2.db"), "--receiver-anchor", c.path("ledger.anchor"),
			"--receiver-pub", c.path("r2.key.pub"), "--operator", "op"), ExitIntegrity, ""},
		{"no operator", add("--name", "n", "--server", "https://x:1", "--receiver-id", "x", "--receiver-pub", c.path("r2.key.pub")),
			ExitUsage, "--operator"},
	} {
		r := c.must(tc.exit, tc.args...)
		if !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%s: %s, want %q", tc.name, r, tc.msg)
		}
	}
	if again := c.json(ExitOK, "ledger", "show")["audit_seq"]; again != head {
		t.Fatalf("refusals moved the ledger's chain from %v to %v", head, again)
	}
	local := c.json(ExitOK, add("--name", "local", "--db", c.path("r2.db"), "--receiver-anchor", c.path("r2.anchor"),
		"--receiver-pub", c.path("r2.key.pub"), "--operator", "op")...)
	if local["receiver_id"] != "recv-local" || local["db"] != c.path("r2.db") || local["anchor"] != c.path("r2.anchor") {
		t.Fatalf("receiver add --db = %v", local)
	}
	list := c.json(ExitOK, "ledger", "receiver", "list")
	rs := list["receivers"].([]any)
	if len(rs) != 2 || rs[0].(map[string]any)["name"] != "local" || rs[1].(map[string]any)["name"] != "orders" {
		t.Fatalf("receiver list = %v", list)
	}
	if r := c.must(ExitOK, "ledger", "receiver", "list", "--json=false"); !strings.Contains(r.stdout, "recv-orders") ||
		!strings.Contains(r.stdout, "pinned key") {
		t.Fatalf("receiver list text:\n%s", r)
	}
	c.must(ExitUsage, "ledger", "receiver")
	c.must(ExitUsage, "ledger", "receiver", "remove")
}

// Ensure that relative paths are registered as absolute ones: contain
// reads the ledger from other directories, where they would name other
// files or none.
func TestLedgerReceiver_RelativePaths(t *testing.T) {
	c := ledgerWithReceivers(t)
	c.must(ExitOK, "init", "--db", c.path("r2.db"), "--anchor", c.path("r2.anchor"), "--key", c.path("r2.key"), "--id", "recv-local",
		"--no-recovery-key")
	t.Chdir(c.dir)
	rel := c.json(ExitOK, "ledger", "receiver", "add", "--name", "relative", "--db", "r2.db", "--receiver-anchor", "r2.anchor",
		"--receiver-pub", c.path("r2.key.pub"), "--operator", "op")
	if rel["db"] != c.path("r2.db") || rel["anchor"] != c.path("r2.anchor") {
		t.Fatalf("receiver add with relative paths = %v", rel)
	}
}

// Ensure that ledger approve --boundary records the boundaries, which show
// prints, and refuses a malformed or unregistered one.
func TestLedgerApprove_Boundaries(t *testing.T) {
	c := ledgerWithReceivers(t)
	c.must(ExitOK, "ledger", "receiver", "add", "--name", "orders", "--server", "https://orders.example:8443", "--receiver-id", "ro",
		"--receiver-pub", c.path("r1.key.pub"), "--operator", "op")
	approve := func(action string, bounds ...string) []string {
		args := []string{"ledger", "approve", "--action", action, "--request-sha256", strings.Repeat("ab", 32), "--approver", "alice"}
		for _, b := range bounds {
			args = append(args, "--boundary", b)
		}
		return args
	}
	c.must(ExitUsage, approve("a", "orders")...)
	c.must(ExitUsage, approve("a", ":payments")...)
	c.must(ExitUsage, approve("a", "orders:")...)
	if r := c.must(ExitDenied, approve("a", "orders:payments", "nobody:x")...); !strings.Contains(r.stderr, "unknown receiver") ||
		!strings.Contains(r.stderr, "receiver add") {
		t.Fatalf("unregistered boundary: %s", r)
	}
	c.must(ExitError, approve("a", "orders:payments", "orders:payments")...)
	got := c.json(ExitOK, approve("a", "orders:payments", "orders:ledger:eu")...)
	bs := got["boundaries"].([]any)
	if len(bs) != 2 || bs[1].(map[string]any)["scope"] != "ledger:eu" || bs[0].(map[string]any)["receiver"] != "orders" {
		t.Fatalf("approve --boundary = %v", got)
	}
	none := c.json(ExitOK, approve("b")...)
	if bs, ok := none["boundaries"].([]any); !ok || len(bs) != 0 {
		t.Fatalf("approve without boundaries = %v", none)
	}
	show := c.json(ExitOK, "ledger", "show", "--action", "a")
	appr := show["actions"].([]any)[0].(map[string]any)["approval"].(map[string]any)
	if len(appr["boundaries"].([]any)) != 2 {
		t.Fatalf("show = %v", show)
	}
	if r := c.must(ExitOK, "ledger", "show", "--json=false"); !strings.Contains(r.stdout, "orders:payments orders:ledger:eu") {
		t.Fatalf("show text:\n%s", r)
	}
}
