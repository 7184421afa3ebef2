package main

import (
	"context"
	"errors"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Ensure that kvfence serve runs the receiver on etcd with auth from its
// variables alone (KVFENCE_ETCD_USER, KVFENCE_ETCD_PASSWORD_FILE and the
// anchor's): a worker's envelope is applied over the served API, the
// operator's hold is acknowledged, the stale envelope denied; and that,
// without a user, or with a worker's user, against the same
// auth-enabled clusters, serve is refused before it listens, with an
// error that says what is missing.
func TestEtcdAuth_Serve(t *testing.T) {
	c := newCLI(t)
	rc, ac := c.authClusters()
	c.env[envEtcd] = strings.Join(rc.Endpoints(), ",")
	c.env[envEtcdUser], c.env[envEtcdPasswordFile] = "kvfence-receiver", c.path("receiver.password")
	c.env[envAnchor] = "etcd://" + strings.TrimPrefix(ac.Endpoints()[0], "http://") + "/kvfence/anchor"
	c.env[envAnchorEtcdUser], c.env[envAnchorEtcdPasswordFile] = "kvfence-receiver", c.path("anchor.password")
	c.receiver()
	c.pki("t")
	c.clientCert("t", "operator", spiffeOperator)
	c.clientCert("t", "a", spiffeWorker+"a")
	serveArgs := []string{"--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
		"--client-ca", c.path("t-ca.crt"), "--admin", spiffeOperator}

	// Refused first, while nothing serves: no user, then a worker's.
	c.env[envEtcdUser], c.env[envEtcdPasswordFile] = "", ""
	c.serveRefused("user name is empty", serveArgs...)
	c.serveRefused("pass --etcd-user and --etcd-password-file (KVFENCE_ETCD_USER", serveArgs...) // the hint
	c.env[envEtcdUser], c.env[envEtcdPasswordFile] = "worker-a", c.path("worker-a.password")
	c.serveRefused("permission denied", serveArgs...)
	c.serveRefused("kvfence-receiver for the receiver's prefix", serveArgs...)
	c.env[envEtcdUser], c.env[envEtcdPasswordFile] = "kvfence-receiver", c.path("receiver.password")

	rn := c.serve(serveArgs...)
	url := "https://" + rn.addrs.Listen
	as := func(who string, args ...string) []string {
		return append(args, "--server", url, "--tls-cert", c.path("t-"+who+".crt"), "--tls-key", c.path("t-"+who+".key"),
			"--tls-ca", c.path("t-ca.crt"))
	}
	g := c.json(0, as("operator", "activate", "--scope", fixtureScope, "--executor", spiffeWorker+"a", "--claim", "claim-a",
		"--request", c.path("req.cbor"))...)
	c.must(0, "envelope", "build", "--scope", fixtureScope, "--epoch", jsonNum(g["epoch"]), "--grant", g["grant"].(string),
		"--executor", spiffeWorker+"a", "--claim", "claim-a", "--request", c.path("req.cbor"), "--out", c.path("a.cbor"))
	if out := c.json(0, as("a", "submit", "--envelope", c.path("a.cbor"))...); out["outcome"] != "applied" {
		t.Fatalf("A's submit over the served API: %v", out)
	}
	c.json(0, as("operator", "hold", "--scope", fixtureScope, "--reason", "worker-a stalled")...)
	if out := c.json(ExitDenied, as("a", "submit", "--envelope", c.path("a.cbor"))...); out["reason"] != "receiver_held" {
		t.Fatalf("A after the hold: %v", out)
	}
	if code := rn.wait(t); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, rn.stderr.String())
	}
	c.must(0, "verify-chain", "--pub", c.path("receiver.key.pub"))
}

// Ensure that the ledger runs on etcd with auth as its own user, from its
// own variables (KVFENCE_LEDGER_ETCD_USER and _PASSWORD_FILE, and
// KVFENCE_LEDGER_ANCHOR_ETCD_* for its anchor), on the receiver's cluster
// beside the receiver, set up by deploy/etcd/README.md: init, approve,
// claim and verify-chain work; without a user, with the receiver's user
// (whose role does not cover the ledger's prefix) or with a worker's,
// each is refused clearly with nothing written; and the receiver's
// variables do not stand in for the ledger's.
func TestEtcdAuth_Ledger(t *testing.T) {
	c := newCLI(t)
	rc, ac := c.authClusters()
	c.must(0, "keygen", "--out", c.path("ledger.key"))
	c.env[envLedgerEtcd] = strings.Join(rc.Endpoints(), ",")
	c.env[envLedgerAnchor] = "etcd://" + strings.TrimPrefix(ac.Endpoints()[0], "http://") + "/kvfence/ledger-anchor"
	c.env[envLedgerKey] = c.path("ledger.key")
	c.env[envLedgerAnchorEtcdUser], c.env[envLedgerAnchorEtcdPasswordFile] = "kvfence-ledger", c.path("ledger-anchor.password")
	// The receiver's variables, set as on a receiver's host, are not the
	// ledger's.
	c.env[envEtcdUser], c.env[envEtcdPasswordFile] = "kvfence-receiver", c.path("receiver.password")
	initArgs := []string{"ledger", "init", "--id", "ledger-1"}
	for _, tt := range []struct {
		name, user, file string
		want             []string // the error, and the hint that says what to do
	}{
		{"no user", "", "", []string{"user name is empty", "KVFENCE_LEDGER_ETCD_USER"}},
		{"the receiver's user", "kvfence-receiver", c.path("receiver.password"), []string{"permission denied", "kvfence-ledger for the ledger's"}},
		{"a worker's user", "worker-a", c.path("worker-a.password"), []string{"permission denied", "kvfence-ledger for the ledger's"}},
		{"a wrong password", "kvfence-ledger", c.path("receiver.password"), []string{"authentication failed", "password is wrong"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c.env[envLedgerEtcdUser], c.env[envLedgerEtcdPasswordFile] = tt.user, tt.file
			start := time.Now()
			r := c.run(initArgs...)
			if r.code != ExitError || strings.Contains(r.stderr, "outcome is unknown") {
				t.Fatalf("ledger init: %s; want exit 1, a definite refusal", r)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Fatalf("ledger init: %s; want a refusal saying %q", r, w)
				}
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Fatalf("ledger init took %v to fail", d)
			}
		})
	}
	root := authClient(t, rc, "root", etcdAuthPasswords["root.password"])
	if kv := snapshot(t, root, defaultLedgerPrefix); len(kv) != 0 {
		t.Fatalf("refused ledger inits wrote %d keys", len(kv))
	}
	aroot := authClient(t, ac, "root", etcdAuthPasswords["anchor-root.password"])
	if kv := snapshot(t, aroot, "/kvfence/ledger-anchor"); len(kv) != 0 {
		t.Fatalf("refused ledger inits wrote the ledger's anchor")
	}

	c.env[envLedgerEtcdUser], c.env[envLedgerEtcdPasswordFile] = "kvfence-ledger", c.path("ledger.password")
	c.must(0, initArgs...)
	c.must(0, "request", "build", "--action", "act", "--target", "cm/backup", "--set", "45", "--out", c.path("req.cbor"))
	c.must(0, "ledger", "approve", "--action", "act", "--request", c.path("req.cbor"), "--approver", "alice")
	c.must(0, "ledger", "claim", "--action", "act", "--worker", "worker-a")
	c.must(0, "ledger", "verify-chain", "--pub", c.path("ledger.key.pub"))
	if kv := snapshot(t, root, defaultLedgerPrefix); len(kv) == 0 {
		t.Fatalf("nothing under %s", defaultLedgerPrefix)
	}
	// The ledger's anchor user without the ledger's anchor variables: the
	// anchor's cluster wants a user too.
	c.env[envLedgerAnchorEtcdUser], c.env[envLedgerAnchorEtcdPasswordFile] = "", ""
	r := c.run("ledger", "claim", "--action", "act", "--worker", "worker-b")
	if r.code == 0 || !strings.Contains(r.stderr, "user name is empty") {
		t.Fatalf("ledger claim without the anchor's user: %s", r)
	}
	// A worker's credentials cannot read the ledger's records either.
	w := authClient(t, rc, "worker-a", etcdAuthPasswords["worker-a.password"])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.Get(ctx, defaultLedgerPrefix, clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("a worker's read of the ledger: %v; want permission denied", err)
	}
}

// Ensure that a receiver's commit refused by etcd auth is reported as a
// definite error (exit 1, never outcome_unknown, which would tell the
// operator to repeat a write that may have landed), with nothing written:
// a user whose role reads the receiver's prefix but may not write it
// opens the receiver and is refused at its hold's commit.
func TestEtcdAuth_RefusedCommitIsDefinite(t *testing.T) {
	c := newCLI(t)
	rc, ac := c.authClusters()
	c.env[envEtcd] = strings.Join(rc.Endpoints(), ",")
	c.env[envEtcdUser], c.env[envEtcdPasswordFile] = "kvfence-receiver", c.path("receiver.password")
	c.env[envAnchor] = "etcd://" + strings.TrimPrefix(ac.Endpoints()[0], "http://") + "/kvfence/anchor"
	c.env[envAnchorEtcdUser], c.env[envAnchorEtcdPasswordFile] = "kvfence-receiver", c.path("anchor.password")
	c.receiver()
	root := authClient(t, rc, "root", etcdAuthPasswords["root.password"])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := root.RoleAdd(ctx, "kvfence-reader"); err != nil {
		t.Fatal(err)
	}
	if _, err := root.RoleGrantPermission(ctx, "kvfence-reader", "/kvfence/", clientv3.GetPrefixRangeEnd("/kvfence/"),
		clientv3.PermissionType(clientv3.PermRead)); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserAdd(ctx, "auditor", "auditor-pw"); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserGrantRole(ctx, "auditor", "kvfence-reader"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.path("auditor.password"), []byte("auditor-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, root, "/kvfence/")
	c.env[envEtcdUser], c.env[envEtcdPasswordFile] = "auditor", c.path("auditor.password")
	c.must(0, "status") // it reads
	out := c.json(ExitError, "hold", "--scope", fixtureScope, "--reason", "auditor tries")
	if e := out["error"].(map[string]any); e["code"] == "outcome_unknown" || !strings.Contains(e["message"].(string), "refused the commit: etcdserver: permission denied") {
		t.Fatalf("hold as a read-only user: %v; want a definite permission denied", out)
	}
	if after := snapshot(t, root, "/kvfence/"); !maps.Equal(after, before) {
		t.Fatalf("the refused hold changed the receiver's prefix: %d keys, then %d", len(before), len(after))
	}
	c.env[envEtcdUser], c.env[envEtcdPasswordFile] = "kvfence-receiver", c.path("receiver.password")
	c.must(0, "verify-chain", "--pub", c.path("receiver.key.pub"))
}
