package main

import (
	"os"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/internal/etcdtest"
)

// Ensure that an etcd user given for a cluster whose auth is off is
// refused, on every connection kvfence makes with a user (the receiver's
// engine, its anchor, the ledger's engine and the ledger's anchor, and
// serve), with exit 2, the code etcd_auth_off, an error that names the
// fix, and nothing written: etcd's client would otherwise drop the user
// and go on unauthenticated, on a cluster where every worker may write.
func TestEtcdAuth_UserForClusterWithoutAuth(t *testing.T) {
	c := newCLI(t)
	store, anchors := etcdtest.Start(t), etcdtest.Start(t)
	storeCli, anchorCli := store.Client(t), anchors.Client(t)
	if err := os.WriteFile(c.path("user.password"), []byte("some-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.must(0, "keygen", "--out", c.path("receiver.key"))
	c.must(0, "keygen", "--out", c.path("recovery.key"))
	c.must(0, "keygen", "--out", c.path("ledger.key"))
	etcdURL := strings.Join(store.Endpoints(), ",")
	anchorAt := func(key string) string {
		return "etcd://" + strings.TrimPrefix(anchors.Endpoints()[0], "http://") + key
	}
	initArgs := []string{"init", "--id", "r", "--recovery-pub", c.path("recovery.key.pub")}
	for _, tt := range []struct {
		name string
		env  map[string]string
		args []string
		flag string // the flag the error names
	}{
		{"receiver's engine", map[string]string{envEtcd: etcdURL, envEtcdUser: "kvfence-receiver",
			envEtcdPasswordFile: c.path("user.password"), envAnchor: c.path("r.anchor"), envKey: c.path("receiver.key")},
			initArgs, "--etcd-user"},
		{"receiver's anchor", map[string]string{envDB: c.path("r.db"), envAnchor: anchorAt("/kvfence/anchor"),
			envAnchorEtcdUser: "kvfence-receiver", envAnchorEtcdPasswordFile: c.path("user.password"), envKey: c.path("receiver.key")},
			initArgs, "--anchor-etcd-user"},
		{"ledger's engine", map[string]string{envLedgerEtcd: etcdURL, envLedgerEtcdUser: "kvfence-ledger",
			envLedgerEtcdPasswordFile: c.path("user.password"), envLedgerAnchor: c.path("l.anchor"), envLedgerKey: c.path("ledger.key")},
			[]string{"ledger", "init", "--id", "l"}, "--etcd-user"},
		{"ledger's anchor", map[string]string{envLedger: c.path("l.db"), envLedgerAnchor: anchorAt("/kvfence/ledger-anchor"),
			envLedgerAnchorEtcdUser: "kvfence-ledger", envLedgerAnchorEtcdPasswordFile: c.path("user.password"),
			envLedgerKey: c.path("ledger.key")},
			[]string{"ledger", "init", "--id", "l"}, "--anchor-etcd-user"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c.env = tt.env
			r := c.run(tt.args...)
			if r.code != ExitUsage || !strings.Contains(r.stderr, tt.flag+" kvfence-") ||
				!strings.Contains(r.stderr, "does not have auth enabled") || !strings.Contains(r.stderr, "deploy/etcd/README.md") {
				t.Fatalf("%s: %s; want exit 2 naming %s, the cluster without auth and the fix", strings.Join(tt.args, " "), r, tt.flag)
			}
			if out := c.json(ExitUsage, tt.args...); out["error"].(map[string]any)["code"] != "etcd_auth_off" {
				t.Fatalf("--json: %v; want the code etcd_auth_off", out)
			}
			for _, f := range []string{"r.db", "l.db"} {
				if _, err := os.Stat(c.path(f)); err == nil {
					t.Fatalf("a refused init created %s", f)
				}
			}
		})
	}
	if kv := snapshot(t, storeCli, "/"); len(kv) != 0 {
		t.Fatalf("refused commands wrote %d keys on the store's cluster", len(kv))
	}
	if kv := snapshot(t, anchorCli, "/"); len(kv) != 0 {
		t.Fatalf("refused commands wrote %d keys on the anchor's cluster", len(kv))
	}

	// serve: a receiver set up without a user, served with one.
	c.env = map[string]string{envEtcd: etcdURL, envAnchor: c.path("r.anchor"), envKey: c.path("receiver.key")}
	c.must(0, initArgs...)
	c.pki("t")
	c.env[envEtcdUser], c.env[envEtcdPasswordFile] = "kvfence-receiver", c.path("user.password")
	c.serveRefused("does not have auth enabled", "--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"),
		"--tls-key", c.path("t-server.key"), "--client-ca", c.path("t-ca.crt"), "--admin", spiffeOperator)
}
