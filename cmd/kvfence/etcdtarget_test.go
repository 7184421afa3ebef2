package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Ensure that, on etcd, target create --kind etcd --target-key makes the key the
// target: the key holds the value as any etcd client reads it, a submit
// whose expect_revision is the key's mod revision applies and moves the
// key to the result's revision, observe target shows the kind, the key
// and the key's live mod revision (a write outside the fence shows there
// and makes a request with the old revision precondition_failed), and
// keys that alias the receiver's or the ledger's records are refused.
func TestEtcdTargetKind(t *testing.T) {
	c := newCLI(t)
	_, cli := c.etcdReceiver()
	ctx := context.Background()
	value, err := os.ReadFile(filepath.Join(fixtureDir, "value.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := c.json(0, "target", "create", "--scope", fixtureScope, "--target", "policy", "--kind", "etcd", "--target-key", "/app/policy",
		"--value-file", filepath.Join(fixtureDir, "value.json"))
	resp, err := cli.Get(ctx, "/app/policy")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != string(value) {
		t.Fatalf("the key after create: %v %v", resp, err)
	}
	created := resp.Kvs[0].ModRevision
	if out["kind"] != "etcd" || out["key"] != "/app/policy" || out["revision"].(float64) != float64(created) {
		t.Fatalf("target create: %v; key at %d", out, created)
	}
	c.must(0, "request", "build", "--action", "etcd-raise", "--target", "policy", "--expect-revision", strconv.FormatInt(created, 10),
		"--patch-file", filepath.Join(fixtureDir, "patch.json"), "--out", c.path("etcd-req.cbor"))
	g := c.json(0, "activate", "--scope", fixtureScope, "--executor", "worker-a", "--claim", "claim-a", "--request", c.path("etcd-req.cbor"))
	c.must(0, "envelope", "build", "--scope", fixtureScope, "--epoch", jsonNum(g["epoch"]), "--grant", g["grant"].(string),
		"--executor", "worker-a", "--claim", "claim-a", "--request", c.path("etcd-req.cbor"), "--out", c.path("etcd.cbor"))
	out = c.json(0, "submit", "--as", "worker-a", "--envelope", c.path("etcd.cbor"))
	resp, err = cli.Get(ctx, "/app/policy")
	if err != nil || out["outcome"] != "applied" || out["revision"].(float64) != float64(resp.Kvs[0].ModRevision) ||
		!strings.Contains(string(resp.Kvs[0].Value), `"45"`) {
		t.Fatalf("submit: %v; key %v %v", out, resp.Kvs, err)
	}
	if _, err := cli.Put(ctx, "/app/policy", `{"data":{"retention_days":"60"}}`); err != nil {
		t.Fatal(err)
	}
	resp, _ = cli.Get(ctx, "/app/policy")
	out = c.json(0, "observe", "target", "policy")
	if out["kind"] != "etcd" || out["key"] != "/app/policy" || out["revision"].(float64) != float64(resp.Kvs[0].ModRevision) ||
		out["writes"].(float64) != 2 || !strings.Contains(out["value"].(string), `"60"`) {
		t.Fatalf("observe target: %v", out)
	}
	if r := c.must(0, "observe", "target", "policy"); !strings.Contains(r.stdout, "/app/policy") || !strings.Contains(r.stdout, "etcd") {
		t.Fatalf("observe target:\n%s", r.stdout)
	}

	for _, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"without --key", []string{"--kind", "etcd"}, ExitUsage, "needs --target-key"},
		{"--key without the kind", []string{"--target-key", "/app/x"}, ExitUsage, "--kind etcd only"},
		{"an unknown kind", []string{"--kind", "bogus"}, ExitUsage, "one of internal, etcd or kubernetes"},
		{"the receiver's prefix", []string{"--kind", "etcd", "--target-key", "/kvfence/targets/x"}, ExitError, "reserved"},
		{"the ledger's prefix", []string{"--kind", "etcd", "--target-key", "/kvfence-ledger/claims/x"}, ExitError, "reserved"},
		{"another target's key", []string{"--kind", "etcd", "--target-key", "/app/policy"}, ExitDenied, "in use"},
		{"a blank in the key", []string{"--kind", "etcd", "--target-key", "/app/a b"}, ExitError, "printable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"target", "create", "--scope", fixtureScope, "--target", "refused", "--value", "v"}, tt.args...)
			if r := c.must(tt.code, args...); !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("stderr %q, want %q", r.stderr, tt.want)
			}
		})
	}
	c.must(0, "verify-chain", "--pub", c.path("receiver.key.pub"))
}

// Ensure that a receiver in a database file refuses --kind etcd with a
// usage error that says why, and creates nothing.
func TestEtcdTargetKindNeedsEtcd(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	r := c.must(ExitUsage, "target", "create", "--scope", fixtureScope, "--target", "policy", "--kind", "etcd", "--target-key", "/app/policy", "--value", "v")
	if !strings.Contains(r.stderr, "needs the etcd engine") {
		t.Fatalf("stderr %q", r.stderr)
	}
	c.must(ExitDenied, "observe", "target", "policy")
}
