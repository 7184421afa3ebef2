package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/etcdtest"
	"github.com/kvfence/kvfence/kvfence"
)

// etcdReceiver starts the receiver's etcd cluster and, apart from it, the
// anchor's, points KVFENCE_ETCD and KVFENCE_ANCHOR at them and sets up the
// fixture receiver. It returns a client of the receiver's cluster.
func (c *cli) etcdReceiver() (*etcdtest.Cluster, *clientv3.Client) {
	c.t.Helper()
	ec := etcdtest.Start(c.t)
	c.env[envEtcd] = strings.Join(ec.Endpoints(), ",")
	c.env[envAnchor] = etcdAnchor(c.t, "/kvfence-test/anchor")
	c.receiver()
	return ec, ec.Client(c.t)
}

// openWriter opens the receiver that c's environment names, as the
// commands that write open it (commonFlags.openWriter), and closes it when
// the test ends.
func (c *cli) openWriter() *kvfence.Receiver {
	c.t.Helper()
	fs := newFlagSet("test")
	cf := commonFlags{name: "test"}
	cf.register(fs, withDB|withKey)
	if err := parseFlags(fs, func() {}, nil, 0); err != nil {
		c.t.Fatal(err)
	}
	cf.resolve(fs, func(k string) string { return c.env[k] })
	r, err := cf.openWriter(nil)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { r.Close() })
	return r
}

// snapshot returns every key and value under prefix.
func snapshot(t *testing.T, cli *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	kv := make(map[string]string, len(resp.Kvs))
	for _, p := range resp.Kvs {
		kv[string(p.Key)] = string(p.Value)
	}
	return kv
}

// restore replaces everything under prefix with kv, as restoring an older
// etcd snapshot would.
func restore(t *testing.T, cli *clientv3.Client, prefix string, kv map[string]string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	for k, v := range kv {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
}

// Ensure that every command runs the receiver on etcd with --etcd (here
// KVFENCE_ETCD) and its anchor on another cluster: init, scope, target,
// activate, submit, hold (the stale envelope then denied), status, observe
// and verify-chain; that nothing is written to a file; and that a restored
// copy of the prefix from before the hold is refused by the anchor (exit 4)
// until the recovery admission re-admits it, every scope held at a new
// epoch.
func TestEtcdEngineWalkthrough(t *testing.T) {
	c := newCLI(t)
	_, cli := c.etcdReceiver()
	prefix := "/kvfence/"
	if len(snapshot(t, cli, prefix)) == 0 {
		t.Fatalf("nothing under %s after init", prefix)
	}
	c.activate("worker-a", "claim-a", "a.cbor")
	before := snapshot(t, cli, prefix)
	out := c.json(0, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	if out["outcome"] != "applied" || out["revision"].(float64) != 2 {
		t.Fatalf("A's submit: %v", out)
	}
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "worker-a stalled")
	out = c.json(ExitDenied, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	if out["outcome"] != "denied" || out["reason"] != "receiver_held" {
		t.Fatalf("A after the hold: %v", out)
	}
	c.activate("worker-b", "claim-b", "b.cbor")
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "again")
	out = c.json(ExitDenied, "submit", "--as", "worker-b", "--envelope", c.path("b.cbor"))
	if out["outcome"] != "denied" {
		t.Fatalf("B after the hold: %v", out)
	}
	out = c.json(0, "observe", "target", fixtureScope)
	if out["revision"].(float64) != 2 {
		t.Fatalf("target: %v", out)
	}
	st := c.json(0, "status")
	if s := st["scopes"].([]any)[0].(map[string]any); s["mode"] != "held" || s["epoch"].(float64) != 3 {
		t.Fatalf("status: %v", st)
	}
	out = c.json(0, "verify-chain", "--pub", c.path("receiver.key.pub"))
	if out["ok"] != true {
		t.Fatalf("verify-chain: %v", out)
	}
	if r := c.must(0, "observe", "events"); !strings.Contains(r.stdout, "worker-a stalled") {
		t.Fatalf("events lack the hold:\n%s", r.stdout)
	}
	if files, _ := filepath.Glob(c.path("*.db")); len(files) != 0 {
		t.Fatalf("the etcd receiver wrote files: %v", files)
	}

	// The prefix restored from before A's write and the holds: refused.
	restore(t, cli, prefix, before)
	r := c.must(ExitIntegrity, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	if !strings.Contains(r.stderr, "rollback detected") {
		t.Fatalf("submit on the restored prefix: %s", r)
	}
	c.must(ExitIntegrity, "status")
	out = c.json(ExitIntegrity, "verify-chain", "--pub", c.path("receiver.key.pub"))
	if out["problem"] != "rollback_detected" {
		t.Fatalf("verify-chain of the restored prefix: %v", out)
	}
	restored := snapshot(t, cli, prefix)
	if fmt.Sprint(restored) != fmt.Sprint(before) {
		t.Fatal("a refused command wrote under the prefix")
	}
	adm := c.path("restore.adm")
	c.must(0, "admission", "new", "--recovery-key", c.path("recovery.key"), "--reason", "restored", "--out", adm)
	out = c.json(0, "recover", "--admission", adm, "--recovery-pub", c.path("recovery.key.pub"))
	if s := out["scopes"].([]any)[0].(map[string]any); s["mode"] != "held" || s["epoch"].(float64) <= 3 {
		t.Fatalf("recover: %v", out)
	}
	out = c.json(ExitDenied, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	if out["outcome"] != "denied" {
		t.Fatalf("A after recovery: %v", out)
	}
	c.must(0, "verify-chain", "--pub", c.path("receiver.key.pub"))
}

// Ensure that --etcd-prefix (and KVFENCE_ETCD_PREFIX) keeps receivers apart
// on one cluster: a second receiver under another prefix is its own, and
// the default prefix holds only the first.
func TestEtcdEnginePrefix(t *testing.T) {
	c := newCLI(t)
	_, cli := c.etcdReceiver()
	c.env[envEtcdPrefix] = "/team-b/receiver/"
	c.env[envAnchor] = etcdAnchor(t, "/kvfence-test/anchor-b")
	r := c.must(ExitError, "status")
	if !strings.Contains(r.stderr, "not initialized") && !strings.Contains(r.stderr, "not initialised") {
		t.Fatalf("status on an empty prefix: %s", r)
	}
	c.must(0, "init", "--id", "receiver-b", "--recovery-pub", c.path("recovery.key.pub"))
	c.must(0, "scope", "create", "--scope", "b-only")
	st := c.json(0, "status")
	if scopes := st["scopes"].([]any); len(scopes) != 1 || scopes[0].(map[string]any)["scope"] != "b-only" {
		t.Fatalf("status of receiver-b: %v", st)
	}
	if len(snapshot(t, cli, "/team-b/receiver/")) == 0 {
		t.Fatal("nothing under /team-b/receiver/")
	}
	st = c.json(0, "status", "--etcd-prefix", "/kvfence/", "--anchor", "")
	if scopes := st["scopes"].([]any); len(scopes) != 1 || scopes[0].(map[string]any)["scope"] != fixtureScope {
		t.Fatalf("status of the first receiver: %v", st)
	}
}

// Ensure that the etcd flags are checked before anything is opened: --db
// with --etcd, a bad URL or prefix, TLS or a prefix without --etcd, and an
// anchor on the receiver's own cluster are usage errors of every command
// that takes --db, and nothing is created.
func TestEtcdEngineUsage(t *testing.T) {
	c := newCLI(t)
	c.must(0, "keygen", "--out", c.path("receiver.key"))
	c.env[envKey] = c.path("receiver.key")
	c.env[envAnchor] = c.path("receiver.anchor")
	commands := [][]string{
		{"init", "--id", "r"},
		{"scope", "create", "--scope", "s"},
		{"target", "create", "--scope", "s", "--target", "t", "--value", "v"},
		{"activate", "--scope", "s", "--executor", "w", "--claim", "c", "--request", c.path("req.cbor")},
		{"hold", "--scope", "s", "--reason", "r"},
		{"submit", "--as", "w", "--envelope", c.path("a.cbor")},
		{"status"},
		{"observe", "events"},
		{"observe", "target", "t"},
		{"recover", "--admission", c.path("adm"), "--recovery-pub", c.path("receiver.key.pub")},
		{"admission", "new", "--recovery-key", c.path("receiver.key"), "--reason", "r", "--out", c.path("adm")},
		{"verify-chain", "--pub", c.path("receiver.key.pub")},
		{"serve", "--listen", "127.0.0.1:0"},
	}
	ep := "http://127.0.0.1:2379"
	for _, tc := range []struct {
		name, want string
		env        map[string]string
		flags      []string
	}{
		{"db and etcd", "--db and --etcd", nil, []string{"--db", c.path("r.db"), "--etcd", ep}},
		{"db flag and etcd env", "--db and --etcd", map[string]string{envEtcd: ep}, []string{"--db", c.path("r.db")}},
		{"no scheme", "want http://HOST:PORT", nil, []string{"--etcd", "127.0.0.1:2379"}},
		{"a path", "only the scheme and HOST:PORT", nil, []string{"--etcd", ep + "/v3"}},
		{"tls over http", "use https://", nil, []string{"--etcd", ep, "--etcd-ca", c.path("ca.pem")}},
		{"tls without etcd", "go with --etcd", nil, []string{"--db", c.path("r.db"), "--etcd-cert", c.path("c.pem")}},
		{"prefix without etcd", "--etcd-prefix goes with --etcd", nil, []string{"--db", c.path("r.db"), "--etcd-prefix", "/x/"}},
		{"prefix env without etcd", "--etcd-prefix goes with --etcd", map[string]string{envEtcdPrefix: "/x/"}, []string{"--db", c.path("r.db")}},
		{"root prefix", "--etcd-prefix", nil, []string{"--etcd", ep, "--etcd-prefix", "/"}},
		{"prefix without slash", "--etcd-prefix", nil, []string{"--etcd", ep, "--etcd-prefix", "/kvfence"}},
		{"prefix with space", "--etcd-prefix", nil, []string{"--etcd", ep, "--etcd-prefix", "/a b/"}},
		{"prefix dotdot", "--etcd-prefix", nil, []string{"--etcd", ep, "--etcd-prefix", "/a/../"}},
		{"max txn ops below etcd's default", "--etcd-max-txn-ops 64", nil, []string{"--etcd", ep, "--etcd-max-txn-ops", "64"}},
		{"anchor on the receiver's cluster", "separate cluster", nil,
			[]string{"--etcd", ep + ",http://127.0.0.1:12379", "--anchor", "etcd://127.0.0.1:12379/kvfence/anchor"}},
	} {
		for _, args := range commands {
			saved := map[string]string{}
			for k, v := range tc.env {
				saved[k] = c.env[k]
				c.env[k] = v
			}
			r := c.must(ExitUsage, append(append([]string{}, args...), tc.flags...)...)
			if !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Errorf("%s: %q: %s", tc.name, args, r)
			}
			for k, v := range saved {
				c.env[k] = v
			}
		}
	}
	if files, _ := filepath.Glob(c.path("*")); len(files) != 2 { // the key pair
		t.Fatalf("refused commands created files: %v", files)
	}
	r := c.must(ExitUsage, "admission", "new", "--recovery-key", c.path("receiver.key"), "--reason", "r", "--out",
		c.path("adm"), "--lost-anchor", "--etcd", ep)
	if !strings.Contains(r.stderr, "--lost-anchor is not available with --etcd") {
		t.Errorf("admission new --lost-anchor --etcd: %s", r)
	}
	// --server leaves the store to the server.
	r = c.must(ExitUsage, "status", "--server", "unix:///nonexistent.sock", "--etcd", ep)
	if !strings.Contains(r.stderr, "--etcd does not go with --server") {
		t.Errorf("status --server --etcd: %s", r)
	}
}

// Ensure that a cluster that does not answer fails a command within the
// request bound (exit 1) instead of hanging, and that an unknown outcome
// and exhausted conflicts exit 1 and 5 with messages that say what they
// are.
func TestEtcdEngineFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs in the full test command (go test without -short)")
	}
	// It waits out the request timeout (10 s) against a stopped cluster,
	// beside the other parallel tests: it shares nothing with them (own
	// clusters, own directory, environment passed to Main).
	t.Parallel()
	c := newCLI(t)
	ec, _ := c.etcdReceiver()
	ec.HardStop(0)
	began := time.Now()
	r := c.must(ExitError, "status", "--anchor", "")
	if d := time.Since(began); d > etcdRequestTimeout+5*time.Second {
		t.Errorf("status took %v against a stopped cluster", d)
	}
	if r.stdout != "" || !strings.Contains(r.stderr, "Error:") {
		t.Errorf("status against a stopped cluster: %s", r)
	}
	for _, tc := range []struct {
		err  error
		code int
		msg  string
	}{
		{fmt.Errorf("%w: %w", kvfence.ErrOutcomeUnknown, engine.ErrOutcomeUnknown), ExitError, "outcome unknown"},
		{fmt.Errorf("%w: %w", kvfence.ErrStorageBusy, engine.ErrConflict), ExitBusy, "conflict"},
	} {
		if got := exitCode(tc.err); got != tc.code {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.code)
		}
		if !strings.Contains(tc.err.Error(), tc.msg) {
			t.Errorf("%v does not say %q", tc.err, tc.msg)
		}
	}
	if h := hint(fmt.Errorf("x: %w", kvfence.ErrOutcomeUnknown)); !strings.Contains(h, "outcome is unknown") {
		t.Errorf("the unknown outcome's hint: %q", h)
	}
}

// Ensure that --etcd-max-txn-ops lets the incident button cover more
// scopes than one transaction of etcd's default size holds: with the
// default, hold --all of 70 scopes is refused with nothing held; told the
// cluster's larger --max-txn-ops, it holds them all at once.
func TestEtcdEngineMaxTxnOps(t *testing.T) {
	skipShort(t)
	c := newCLI(t)
	ec := etcdtest.NewCluster(t, etcdtest.Config{MaxTxnOps: 2048})
	c.env[envEtcd] = strings.Join(ec.Endpoints(), ",")
	c.env[envAnchor] = etcdAnchor(c.t, "/kvfence-test/anchor")
	c.receiver()
	// The 70 open scopes are set up through one receiver opened as the
	// commands open theirs: each command would open its own, and an open
	// replays the whole chain, so 210 commands would cost a quadratic
	// replay that has nothing to do with hold --all.
	value, err := os.ReadFile(filepath.Join(fixtureDir, "value.json"))
	if err != nil {
		t.Fatal(err)
	}
	r0 := c.openWriter()
	admin := localAdmin(r0)
	for i := range 70 {
		s := fmt.Sprintf("s%02d", i)
		if _, err := admin.CreateScope(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CreateTarget(t.Context(), s, s+"/t", value); err != nil {
			t.Fatal(err)
		}
		c.must(0, "request", "build", "--action", "a", "--target", s+"/t",
			"--patch-file", filepath.Join(fixtureDir, "patch.json"), "--out", c.path(s+".cbor"))
		req, err := os.ReadFile(c.path(s + ".cbor"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Activate(t.Context(), kvfence.ActivateRequest{Scope: s, Executor: "w", Claim: "c", Request: req}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r0.Close(); err != nil {
		t.Fatal(err)
	}
	r := c.run("hold", "--all", "--reason", "incident")
	if r.code == 0 {
		t.Fatalf("hold --all of 70 scopes in etcd's default transaction size: %s", r)
	}
	if st := c.json(0, "status", "--scope", "s00"); st["scopes"].([]any)[0].(map[string]any)["mode"] != "open" {
		t.Fatalf("a refused hold --all held a scope: %v", st)
	}
	c.must(0, "hold", "--all", "--reason", "incident", "--etcd-max-txn-ops", "2048")
	for _, s := range []string{"s00", "s69"} {
		if st := c.json(0, "status", "--scope", s); st["scopes"].([]any)[0].(map[string]any)["mode"] != "held" {
			t.Fatalf("hold --all --etcd-max-txn-ops left %s open: %v", s, st)
		}
	}
}

// Ensure that the ledger runs on etcd too (--etcd, here KVFENCE_LEDGER_ETCD)
// with its anchor on another cluster: init, approve, claim, show, events and
// verify-chain; that a prefix put back to its content from before the claim
// is refused by the anchor (exit 4) and hands out no second claim; and that
// --ledger with --etcd is a usage error.
func TestEtcdEngineLedger(t *testing.T) {
	c := newCLI(t)
	ec := etcdtest.Start(t)
	cli := ec.Client(t)
	c.must(ExitOK, "keygen", "--out", c.path("ledger.key"))
	c.env[envLedgerEtcd] = strings.Join(ec.Endpoints(), ",")
	c.env[envLedgerAnchor] = etcdAnchor(t, "/kvfence-test/ledger-anchor-etcd")
	c.env[envLedgerKey] = c.path("ledger.key")
	r := c.must(ExitUsage, "ledger", "init", "--id", "ledger-1", "--ledger", c.path("ledger.db"))
	if !strings.Contains(r.stderr, "--ledger and --etcd") {
		t.Fatalf("ledger init with --ledger and --etcd: %s", r)
	}
	c.must(ExitOK, "ledger", "init", "--id", "ledger-1")
	c.must(ExitOK, "request", "build", "--action", "act", "--target", "cm/backup", "--set", "45", "--out", c.path("req.cbor"))
	c.must(ExitOK, "ledger", "approve", "--action", "act", "--request", c.path("req.cbor"), "--approver", "alice")
	before := snapshot(t, cli, defaultLedgerPrefix)
	if len(before) == 0 {
		t.Fatalf("nothing under %s", defaultLedgerPrefix)
	}
	c.must(ExitOK, "ledger", "claim", "--action", "act", "--worker", "worker-a")
	if show := c.json(ExitOK, "ledger", "show", "--action", "act"); !strings.Contains(fmt.Sprint(show), "worker-a") {
		t.Fatalf("ledger show after the claim: %v", show)
	}
	if ev := c.json(ExitOK, "ledger", "events"); len(ev["events"].([]any)) < 3 {
		t.Fatalf("ledger events: %v", ev)
	}
	c.must(ExitOK, "ledger", "verify-chain", "--pub", c.path("ledger.key.pub"))
	restore(t, cli, defaultLedgerPrefix, before)
	c.must(ExitIntegrity, "ledger", "claim", "--action", "act", "--worker", "worker-c")
	if v := c.json(ExitIntegrity, "ledger", "verify-chain", "--pub", c.path("ledger.key.pub")); v["problem"] != "rollback_detected" {
		t.Fatalf("ledger verify-chain of the restored prefix: %v", v)
	}
	if files, _ := filepath.Glob(c.path("ledger.db*")); len(files) != 0 {
		t.Fatalf("the ledger on etcd wrote files: %v", files)
	}
}
