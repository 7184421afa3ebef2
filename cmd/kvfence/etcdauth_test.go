package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kvfence/kvfence/internal/etcdtest"
)

// etcdAuthPasswords are the password files deploy/etcd/README.md names.
var etcdAuthPasswords = map[string]string{
	"root.password": "root-pw", "receiver.password": "receiver-pw", "worker-a.password": "worker-pw",
	"anchor-root.password": "anchor-root-pw", "anchor.password": "anchor-pw",
	"ledger.password": "ledger-pw", "ledger-anchor.password": "ledger-anchor-pw",
}

// authClusters starts the receiver's and the anchor's clusters and runs
// deploy/etcd/README.md's etcdctl lines on them, so that the document is
// what is tested. It writes each password file (0600) under c.dir and
// returns the clusters.
func (c *cli) authClusters() (receiver, anchor *etcdtest.Cluster) {
	c.t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "deploy", "etcd", "README.md"))
	if err != nil {
		c.t.Fatal(err)
	}
	receiver, anchor = etcdtest.Start(c.t), etcdtest.Start(c.t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := etcdtest.ApplyEtcdctl(ctx, string(doc), map[string]*clientv3.Client{
		"RECEIVER_ETCD": receiver.Client(c.t), "ANCHOR_ETCD": anchor.Client(c.t)}, etcdAuthPasswords)
	if err != nil {
		c.t.Fatalf("deploy/etcd/README.md: %v", err)
	}
	if n < 12 {
		c.t.Fatalf("deploy/etcd/README.md: only %d etcdctl commands ran", n)
	}
	for name, pw := range etcdAuthPasswords {
		if err := os.WriteFile(c.path(name), []byte(pw+"\n"), 0o600); err != nil {
			c.t.Fatal(err)
		}
	}
	return receiver, anchor
}

// authClient connects to cluster ec as user with password ("" for none).
func authClient(t *testing.T, ec *etcdtest.Cluster, user, password string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), DialTimeout: 5 * time.Second,
		Username: user, Password: password, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Ensure that, set up as deploy/etcd/README.md says, the receiver runs on
// etcd with auth on both clusters (init, scope, target, activate, submit,
// hold, the stale envelope denied, verify-chain), and that a worker's own
// etcd credentials are refused on every write path around the fence: a
// put, a delete and a transaction on the receiver's prefix, the anchor
// key and the application's prefix, which it may only read.
func TestEtcdAuth_ReceiverWorksWorkerRefused(t *testing.T) {
	c := newCLI(t)
	rc, ac := c.authClusters()
	c.env[envEtcd] = strings.Join(rc.Endpoints(), ",")
	c.env[envEtcdUser], c.env[envEtcdPasswordFile] = "kvfence-receiver", c.path("receiver.password")
	c.env[envAnchor] = "etcd://" + strings.TrimPrefix(ac.Endpoints()[0], "http://") + "/kvfence/anchor"
	c.env[envAnchorEtcdUser], c.env[envAnchorEtcdPasswordFile] = "kvfence-receiver", c.path("anchor.password")
	c.receiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	if out := c.json(0, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor")); out["outcome"] != "applied" {
		t.Fatalf("A's submit: %v", out)
	}
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "worker-a stalled")
	c.json(ExitDenied, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	c.must(0, "verify-chain", "--pub", c.path("receiver.key.pub"))

	// The worker's own credentials: reads of the application's keys work,
	// and every write around the fence is refused by etcd.
	root := authClient(t, rc, "root", etcdAuthPasswords["root.password"])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := root.Put(ctx, "/app/config", "v1"); err != nil {
		t.Fatal(err)
	}
	w := authClient(t, rc, "worker-a", etcdAuthPasswords["worker-a.password"])
	if r, err := w.Get(ctx, "/app/config"); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the worker cannot read the application's keys: %v", err)
	}
	before := snapshot(t, root, "/kvfence/")
	for _, tt := range []struct {
		name string
		op   func() error
	}{
		{"put on the receiver's prefix", func() error { _, err := w.Put(ctx, "/kvfence/control/"+fixtureScope, "x"); return err }},
		{"delete of the receiver's prefix", func() error { _, err := w.Delete(ctx, "/kvfence/", clientv3.WithPrefix()); return err }},
		{"txn on the receiver's prefix", func() error {
			_, err := w.Txn(ctx).Then(clientv3.OpPut("/kvfence/meta/x", "x")).Commit()
			return err
		}},
		{"read of the receiver's prefix", func() error { _, err := w.Get(ctx, "/kvfence/", clientv3.WithPrefix()); return err }},
		{"put on the application's prefix", func() error { _, err := w.Put(ctx, "/app/config", "v2"); return err }},
		{"delete on the application's prefix", func() error { _, err := w.Delete(ctx, "/app/config"); return err }},
		{"txn on the application's prefix", func() error {
			_, err := w.Txn(ctx).Then(clientv3.OpPut("/app/config", "v2")).Commit()
			return err
		}},
	} {
		if err := tt.op(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("worker's %s: %v, want permission denied", tt.name, err)
		}
	}
	if after := snapshot(t, root, "/kvfence/"); len(after) != len(before) {
		t.Fatalf("the receiver's prefix changed under the worker's refused writes: %d keys, then %d", len(before), len(after))
	}
	if r, err := root.Get(ctx, "/app/config"); err != nil || string(r.Kvs[0].Value) != "v1" {
		t.Fatalf("the application's key changed: %v %v", r, err)
	}
	// On the anchor's cluster the worker has no user at all.
	wa, err := clientv3.New(clientv3.Config{Endpoints: ac.Endpoints(), DialTimeout: 5 * time.Second,
		Username: "worker-a", Password: etcdAuthPasswords["worker-a.password"], Logger: zap.NewNop()})
	if err == nil {
		defer wa.Close()
		_, err = wa.Put(ctx, "/kvfence/anchor", "x")
	}
	if !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Fatalf("worker's put on the anchor key: %v, want authentication failed", err)
	}
	// Nor may the receiver's anchor user write anything but the anchor.
	ra := authClient(t, ac, "kvfence-receiver", etcdAuthPasswords["anchor.password"])
	if _, err := ra.Put(ctx, "/kvfence/anchor2", "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("the anchor user's put beside the anchor key: %v, want permission denied", err)
	}
}

// Ensure that a wrong password, no credentials and a half-given pair are
// clear errors, soon, with nothing written: never a hang, never a fallback
// to an unauthenticated connection.
func TestEtcdAuth_BadCredentials(t *testing.T) {
	c := newCLI(t)
	rc, ac := c.authClusters()
	c.env[envEtcd] = strings.Join(rc.Endpoints(), ",")
	c.env[envAnchor] = "etcd://" + strings.TrimPrefix(ac.Endpoints()[0], "http://") + "/kvfence/anchor"
	c.env[envAnchorEtcdUser], c.env[envAnchorEtcdPasswordFile] = "kvfence-receiver", c.path("anchor.password")
	c.env[envKey] = c.path("receiver.key")
	c.must(0, "keygen", "--out", c.path("receiver.key"))
	c.must(0, "keygen", "--out", c.path("recovery.key"))
	if err := os.WriteFile(c.path("wrong.password"), []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.path("open.password"), []byte("receiver-pw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	initArgs := []string{"init", "--id", "r", "--recovery-pub", c.path("recovery.key.pub")}
	for _, tt := range []struct {
		name, user, file string
		code             int
		want             string
	}{
		{"wrong password", "kvfence-receiver", c.path("wrong.password"), ExitError, "authentication failed"},
		{"unknown user", "nobody", c.path("receiver.password"), ExitError, "authentication failed"},
		{"no credentials", "", "", ExitError, "user name"},
		{"user without password file", "kvfence-receiver", "", ExitUsage, "go together"},
		{"password file readable by others", "kvfence-receiver", c.path("open.password"), ExitUsage, "accessible by group or others"},
		{"missing password file", "kvfence-receiver", c.path("missing.password"), ExitUsage, "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c.env[envEtcdUser], c.env[envEtcdPasswordFile] = tt.user, tt.file
			start := time.Now()
			r := c.run(initArgs...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("init: exit %d, want %d with %q: %s", r.code, tt.code, tt.want, r.stderr)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Fatalf("init took %v to fail", d)
			}
			for _, pw := range etcdAuthPasswords {
				if strings.Contains(r.stderr, pw) {
					t.Fatalf("the error quotes a password: %s", r.stderr)
				}
			}
		})
	}
	root := authClient(t, rc, "root", etcdAuthPasswords["root.password"])
	if kv := snapshot(t, root, "/kvfence/"); len(kv) != 0 {
		t.Fatalf("refused inits wrote %d keys", len(kv))
	}
}
