package main

import (
	"context"
	"errors"
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
	c.env[envEtcdUser], c.env[envEtcdPasswordFile] = "worker-a", c.path("worker-a.password")
	c.serveRefused("permission denied", serveArgs...)
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
		name, user, file, want string
	}{
		{"no user", "", "", "user name is empty"},
		{"the receiver's user", "kvfence-receiver", c.path("receiver.password"), "permission denied"},
		{"a worker's user", "worker-a", c.path("worker-a.password"), "permission denied"},
		{"a wrong password", "kvfence-ledger", c.path("receiver.password"), "authentication failed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c.env[envLedgerEtcdUser], c.env[envLedgerEtcdPasswordFile] = tt.user, tt.file
			start := time.Now()
			r := c.run(initArgs...)
			if r.code == 0 || !strings.Contains(r.stderr, tt.want) || strings.Contains(r.stderr, "outcome is unknown") {
				t.Fatalf("ledger init: %s; want a refusal saying %q", r, tt.want)
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
