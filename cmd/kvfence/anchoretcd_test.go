package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/audit/etcdanchor"
	"github.com/kvfence/kvfence/internal/etcdtest"
)

// etcdAnchor starts a single-member etcd cluster and returns the --anchor
// address of key on it.
func etcdAnchor(t *testing.T, key string) string {
	t.Helper()
	c := etcdtest.Start(t)
	var hosts []string
	for _, ep := range c.Endpoints() {
		hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
	}
	return "etcd://" + strings.Join(hosts, ",") + key
}

// loadEtcdAnchor reads the anchor at addr.
func loadEtcdAnchor(t *testing.T, addr string) (audit.SignedCheckpoint, error) {
	t.Helper()
	a, err := etcdanchor.ParseAddress(addr)
	if err != nil {
		t.Fatal(err)
	}
	s, err := etcdanchor.Open(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.LoadContext(ctx)
}

// Ensure that init, submit and hold work with the anchor in an etcd key,
// which moves forward with every commit and is never a file, and that a
// restored database file is refused by that anchor (exit 4) with nothing
// written, while the current database goes on.
func TestEtcdAnchorWalkthrough(t *testing.T) {
	c := newCLI(t)
	anchor := etcdAnchor(t, "/kvfence-test/anchor")
	c.env[envAnchor] = anchor
	c.rolledBack() // init, scope, target, activate, hold, submit, restore
	if matches, _ := filepath.Glob(c.path("*anchor*")); len(matches) != 0 {
		t.Fatalf("an etcd anchor left files: %v", matches)
	}
	if _, err := os.Stat("etcd:"); !os.IsNotExist(err) {
		t.Fatalf("an etcd anchor was taken for a path: %v", err)
	}
	before, err := loadEtcdAnchor(t, anchor)
	if err != nil || before.Receiver != "lab-receiver" {
		t.Fatalf("the etcd anchor after the walkthrough: %+v, %v", before, err)
	}

	r := c.must(ExitIntegrity, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	if !strings.Contains(r.stderr, "rollback detected") || !strings.Contains(r.stderr, rollbackHint) {
		t.Errorf("submit against the restored database: %s", r)
	}
	c.must(ExitIntegrity, "status")
	c.must(ExitIntegrity, "hold", "--scope", fixtureScope, "--reason", "r")
	out := c.json(ExitIntegrity, "verify-chain", "--pub", c.path("receiver.key.pub"))
	if out["problem"] != "rollback_detected" || out["anchor_seq"].(float64) != float64(before.Seq) {
		t.Fatalf("verify-chain of the restored database: %v; anchor at seq %d", out, before.Seq)
	}
	if after, err := loadEtcdAnchor(t, anchor); err != nil || after != before {
		t.Fatalf("a refused command changed the etcd anchor: %+v, %v", after, err)
	}

	// The current database agrees with the anchor: B's retry is answered
	// from its receipt, and a hold moves the anchor on.
	copyFile(t, c.path("receiver.db.newer"), c.env[envDB])
	out = c.json(0, "submit", "--as", "worker-b", "--envelope", c.path("b.cbor"))
	if out["outcome"] != "already_applied" {
		t.Fatalf("B's retry: %v", out)
	}
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "done")
	after, err := loadEtcdAnchor(t, anchor)
	if err != nil || after.Seq <= before.Seq {
		t.Fatalf("the etcd anchor after a hold: %+v, %v (before seq %d)", after, err, before.Seq)
	}
	c.must(0, "verify-chain", "--pub", c.path("receiver.key.pub"))
	c.must(0, "status")
}

// Ensure that a bad etcd anchor, or an etcd TLS flag without one, is a usage
// error of every command that takes --anchor, before anything is opened or
// created.
func TestEtcdAnchorUsage(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	dbBefore := readFile(t, c.env[envDB])
	anchorBefore := readFile(t, c.env[envAnchor])
	commands := [][]string{
		{"init", "--id", "r2", "--db", c.path("r2.db")},
		{"scope", "create", "--scope", "s"},
		{"activate", "--scope", fixtureScope, "--executor", "w", "--claim", "c", "--request", c.path("req.cbor")},
		{"hold", "--scope", fixtureScope, "--reason", "r"},
		{"submit", "--as", "worker-a", "--envelope", c.path("a.cbor")},
		{"status"},
		{"observe", "events"},
		{"recover", "--admission", c.path("adm"), "--recovery-pub", c.path("recovery.key.pub")},
		{"admission", "new", "--recovery-key", c.path("recovery.key"), "--reason", "r", "--out", c.path("adm")},
		{"verify-chain", "--pub", c.path("receiver.key.pub")},
		{"serve", "--listen", "127.0.0.1:0"},
	}
	for _, tc := range []struct {
		name, want string
		flags      []string
	}{
		{"no key", "names no key", []string{"--anchor", "etcd://127.0.0.1:2379"}},
		{"no host", "names no HOST:PORT", []string{"--anchor", "etcd:///kvfence/anchor"}},
		{"one slash", "does not begin with", []string{"--anchor", "etcd:/127.0.0.1:2379/k"}},
		{"bad port", "port", []string{"--anchor", "etcd://127.0.0.1:0/k"}},
		{"credentials", "user information", []string{"--anchor", "etcd://u:p@127.0.0.1:2379/k"}},
		{"cert without key", "go together", []string{"--anchor", "etcd://127.0.0.1:2379/k", "--anchor-etcd-cert", c.path("c.pem")}},
		{"tls for a file", "go with --anchor etcd://", []string{"--anchor-etcd-ca", c.path("ca.pem")}},
	} {
		for _, args := range commands {
			r := c.must(ExitUsage, append(append([]string{}, args...), tc.flags...)...)
			if !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Errorf("%s: %q: %s", tc.name, args, r)
			}
		}
	}
	if _, err := os.Stat(c.path("r2.db")); !os.IsNotExist(err) {
		t.Fatalf("init with a bad anchor created a database: %v", err)
	}
	if _, err := os.Stat(c.path("adm")); !os.IsNotExist(err) {
		t.Fatalf("admission new with a bad anchor wrote: %v", err)
	}
	if string(readFile(t, c.env[envDB])) != string(dbBefore) || string(readFile(t, c.env[envAnchor])) != string(anchorBefore) {
		t.Fatal("a refused command changed the database or the anchor")
	}
}

// Ensure that the ledger takes its anchor in an etcd key too: init,
// approve and verify-chain work against it, a restored ledger file is
// refused (exit 4), and a bad address is a usage error that creates
// nothing.
func TestEtcdAnchorLedger(t *testing.T) {
	c := newCLI(t)
	anchor := etcdAnchor(t, "/kvfence-test/ledger-anchor")
	c.must(ExitOK, "keygen", "--out", c.path("ledger.key"))
	c.env[envLedger] = c.path("ledger.db")
	c.env[envLedgerAnchor] = anchor
	c.env[envLedgerKey] = c.path("ledger.key")
	r := c.must(ExitUsage, "ledger", "init", "--id", "ledger-1", "--anchor", "etcd://127.0.0.1:2379")
	if !strings.Contains(r.stderr, "names no key") {
		t.Errorf("ledger init with a bad anchor: %s", r)
	}
	if _, err := os.Stat(c.path("ledger.db")); !os.IsNotExist(err) {
		t.Fatalf("ledger init with a bad anchor created the ledger: %v", err)
	}
	c.must(ExitOK, "ledger", "init", "--id", "ledger-1")
	if a, err := loadEtcdAnchor(t, anchor); err != nil || a.Receiver != "ledger-1" {
		t.Fatalf("the ledger's etcd anchor: %+v, %v", a, err)
	}
	c.must(ExitOK, "request", "build", "--action", "act", "--target", "cm/backup", "--set", "45", "--out", c.path("req.cbor"))
	copyFile(t, c.path("ledger.db"), c.path("ledger.db.bak"))
	c.must(ExitOK, "ledger", "approve", "--action", "act", "--request", c.path("req.cbor"), "--approver", "alice")
	c.must(ExitOK, "ledger", "verify-chain", "--pub", c.path("ledger.key.pub"))
	copyFile(t, c.path("ledger.db.bak"), c.path("ledger.db"))
	c.must(ExitIntegrity, "ledger", "claim", "--action", "act", "--worker", "worker-a")
	c.must(ExitIntegrity, "ledger", "verify-chain", "--pub", c.path("ledger.key.pub"))
}
