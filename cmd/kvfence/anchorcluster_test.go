package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvfence/kvfence/internal/clusterid"
	"github.com/kvfence/kvfence/internal/etcdtest"
)

// clusterState returns every key of the cluster with its value, and the
// cluster's revision, which any write moves.
func clusterState(t *testing.T, cli *clientv3.Client) (map[string]string, int64) {
	t.Helper()
	resp, err := cli.Get(context.Background(), "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	kv := make(map[string]string, len(resp.Kvs))
	for _, p := range resp.Kvs {
		kv[string(p.Key)] = string(p.Value)
	}
	return kv, resp.Header.Revision
}

// clusterID returns the ID of the cluster cli reaches.
func clusterID(t *testing.T, cli *clientv3.Client) string {
	t.Helper()
	resp, err := cli.Get(context.Background(), "x", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return clusterid.Format(resp.Header.ClusterId)
}

// Ensure that an etcd anchor on the receiver's own cluster is refused by
// every command that opens both, with exit 2 and nothing written on that
// cluster, however the member's address is spelled: the check compares the
// clusters' IDs, not the addresses' text.
func TestEtcdAnchorOnOwnClusterSpellings(t *testing.T) {
	c := newCLI(t)
	ec, cli := c.etcdReceiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	c.pki("t")
	port := ec.Endpoints()[0][strings.LastIndexByte(ec.Endpoints()[0], ':')+1:]
	commands := [][]string{
		{"init", "--id", "r2", "--etcd-prefix", "/fresh/", "--recovery-pub", c.path("recovery.key.pub")},
		{"scope", "create", "--scope", "s2"},
		{"hold", "--scope", fixtureScope, "--reason", "r"},
		{"submit", "--as", "worker-a", "--envelope", c.path("a.cbor")},
		{"status"},
		{"observe", "events"},
		{"verify-chain", "--pub", c.path("receiver.key.pub")},
		{"admission", "new", "--recovery-key", c.path("recovery.key"), "--reason", "r", "--out", c.path("adm")},
		{"serve", "--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
			"--client-ca", c.path("t-ca.crt"), "--admin", spiffeOperator},
	}
	for _, host := range []string{"localhost", "LOCALHOST", "127.0.0.1"} {
		anchor := "etcd://" + host + ":" + port + "/kvfence-test/anchor"
		for _, args := range commands {
			before, rev := clusterState(t, cli)
			r := c.must(ExitUsage, append(append([]string{}, args...), "--anchor", anchor)...)
			if !strings.Contains(r.stderr, "separate") || r.stdout != "" {
				t.Errorf("%s: %q: %s", host, args, r)
			}
			if after, rev2 := clusterState(t, cli); rev2 != rev || len(after) != len(before) {
				t.Fatalf("%s: %q wrote on the receiver's cluster: revision %d -> %d", host, args, rev, rev2)
			}
		}
	}
	// The receiver goes on with its own, separate anchor.
	c.must(0, "status")
}

// Ensure that init records the anchor's cluster, and that any other
// cluster answering for the anchor is refused (exit 4) even when it holds
// the receiver's own current anchor, while the recorded one is accepted.
func TestEtcdAnchorClusterChanged(t *testing.T) {
	c := newCLI(t)
	_, cli := c.etcdReceiver()
	anchor := c.env[envAnchor]
	out := c.json(0, "status")
	if out["anchor_checked"] != true {
		t.Fatalf("status: %v", out)
	}
	// Another cluster with the anchor's key holding the same, genuine anchor.
	other := etcdtest.Start(t)
	ocli := other.Client(t)
	sc, err := loadEtcdAnchor(t, anchor)
	if err != nil {
		t.Fatal(err)
	}
	text, err := sc.MarshalAnchor()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ocli.Put(context.Background(), "/kvfence-test/anchor", string(text)); err != nil {
		t.Fatal(err)
	}
	moved := "etcd://" + strings.TrimPrefix(other.Endpoints()[0], "http://") + "/kvfence-test/anchor"
	for _, args := range [][]string{
		{"status"},
		{"scope", "create", "--scope", "s2"},
		{"verify-chain", "--pub", c.path("receiver.key.pub")},
		{"hold", "--scope", fixtureScope, "--reason", "r"},
	} {
		before, rev := clusterState(t, ocli)
		r := c.must(ExitIntegrity, append(append([]string{}, args...), "--anchor", moved)...)
		if !strings.Contains(r.stderr, "another cluster answers for the anchor") || !strings.Contains(r.stderr, clusterID(t, ocli)) {
			t.Errorf("%q on another cluster: %s", args, r)
		}
		if after, rev2 := clusterState(t, ocli); rev2 != rev || len(after) != len(before) {
			t.Fatalf("%q wrote to the other cluster", args)
		}
		// Naming the other cluster does not override the record.
		c.must(ExitIntegrity, append(append([]string{}, args...), "--anchor", moved,
			"--anchor-etcd-cluster-id", clusterID(t, ocli))...)
	}
	c.must(0, "status")
	c.must(0, "verify-chain", "--pub", c.path("receiver.key.pub"))

	// init checks a stated anchor cluster before it writes anything.
	fresh := "etcd://" + strings.TrimPrefix(other.Endpoints()[0], "http://") + "/fresh-anchor"
	c.must(ExitIntegrity, "init", "--id", "r3", "--etcd-prefix", "/r3/", "--anchor", fresh,
		"--recovery-pub", c.path("recovery.key.pub"), "--anchor-etcd-cluster-id", "1234")
	if len(snapshot(t, cli, "/r3/")) != 0 || len(snapshot(t, ocli, "/fresh-anchor")) != 0 {
		t.Fatal("init with another stated anchor cluster wrote")
	}
	out = c.json(0, "init", "--id", "r3", "--etcd-prefix", "/r3/", "--anchor", fresh,
		"--recovery-pub", c.path("recovery.key.pub"), "--anchor-etcd-cluster-id", clusterID(t, ocli))
	if out["anchor_cluster_id"] != clusterID(t, ocli) {
		t.Fatalf("init printed anchor cluster %v, want %s", out["anchor_cluster_id"], clusterID(t, ocli))
	}
}

// Ensure that a receiver that records no anchor cluster (initialised
// before the record existed; here the record is removed) is refused on an
// etcd anchor (exit 2) until --anchor-etcd-cluster-id names the anchor's
// cluster, and that a wrong one is refused (exit 4): a missing record is
// never "any cluster will do".
func TestEtcdAnchorClusterUnrecorded(t *testing.T) {
	c := newCLI(t)
	_, cli := c.etcdReceiver()
	resp, err := cli.Get(context.Background(), "/kvfence/meta/anchor_cluster")
	if err != nil || len(resp.Kvs) != 1 || len(resp.Kvs[0].Value) != 16 {
		t.Fatalf("init recorded no anchor cluster: %v, %v", resp, err)
	}
	recorded := string(resp.Kvs[0].Value)
	if _, err := cli.Delete(context.Background(), "/kvfence/meta/anchor_cluster"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"verify-chain", "--pub", c.path("receiver.key.pub")},
		{"scope", "create", "--scope", "s2"}} {
		r := c.must(ExitUsage, args...)
		if !strings.Contains(r.stderr, "records no anchor cluster") || !strings.Contains(r.stderr, "--anchor-etcd-cluster-id") {
			t.Errorf("%q without a record: %s", args, r)
		}
		c.must(ExitIntegrity, append(append([]string{}, args...), "--anchor-etcd-cluster-id", "1234")...)
	}
	c.must(0, "status", "--anchor-etcd-cluster-id", recorded)
	c.must(0, "scope", "create", "--scope", "s2", "--anchor-etcd-cluster-id", strings.TrimLeft(recorded, "0"))
	c.must(ExitUsage, "status", "--anchor-etcd-cluster-id", "0x12")
	c.must(ExitUsage, "status", "--anchor-etcd-cluster-id", recorded, "--anchor", c.path("file.anchor"))
}

// tcpProxy forwards every connection on a new loopback port to target,
// as a load balancer or an etcd proxy in front of a cluster would; it
// returns the proxy's HOST:PORT.
func tcpProxy(t *testing.T, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	return l.Addr().String()
}

// blackHole accepts connections and never answers: a cluster that does not
// say its ID. It returns its HOST:PORT.
func blackHole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	t.Cleanup(func() {
		l.Close()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return l.Addr().String()
}

// Ensure that other ways to reach the receiver's own cluster are refused
// too (exit 2, nothing written): another member's client URL, 0.0.0.0, a
// trailing-dot host name, and a TCP proxy in front of the cluster; and
// that an anchor address whose cluster never says its ID fails the command
// (never "apart"), with nothing written either.
func TestEtcdAnchorOwnClusterOtherRoutes(t *testing.T) {
	skipShort(t)
	// Mostly waiting on the black hole: it runs beside the other
	// parallel tests, sharing nothing with them (own clusters, own
	// directory, environment passed to Main).
	t.Parallel()
	c := newCLI(t)
	ec := etcdtest.NewCluster(t, etcdtest.Config{Members: 3})
	cli := ec.Client(t)
	eps := ec.Endpoints()
	c.env[envEtcd] = eps[0] // the receiver names one member only
	c.env[envAnchor] = etcdAnchor(t, "/kvfence-test/anchor")
	c.receiver()
	hp := func(ep string) string { return strings.TrimPrefix(ep, "http://") }
	port0 := hp(eps[0])[strings.LastIndexByte(hp(eps[0]), ':')+1:]
	for _, tc := range []struct {
		name, host string
		code       int
		want       string
	}{
		{"another member", hp(eps[2]), ExitUsage, "separate"},
		{"all addresses", "0.0.0.0:" + port0, ExitUsage, "separate"},
		{"trailing dot", "localhost.:" + port0, ExitUsage, "bad address"}, // refused before any lookup
		{"proxy", tcpProxy(t, hp(eps[1])), ExitUsage, "separate"},
		{"no answer", blackHole(t), ExitError, "Error:"},
	} {
		anchor := "etcd://" + tc.host + "/kvfence-test/anchor"
		cmds := [][]string{
			{"init", "--id", "r2", "--etcd-prefix", "/fresh/", "--recovery-pub", c.path("recovery.key.pub")},
			{"status"},
			{"scope", "create", "--scope", "s2"},
		}
		for i := range cmds {
			cmds[i] = append(cmds[i], "--anchor", anchor)
		}
		// The commands run at once: against the black hole each waits out
		// the anchor's dial timeout, and one after the other they would
		// wait three times as long. A write by any of them still moves
		// the cluster's revision between the two looks.
		before, rev := clusterState(t, cli)
		for i, r := range c.runAll(cmds) {
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("%s: %q: got %s, want exit %d saying %q", tc.name, cmds[i], r, tc.code, tc.want)
			}
		}
		if after, rev2 := clusterState(t, cli); rev2 != rev || len(after) != len(before) {
			t.Fatalf("%s: one of %q wrote on the receiver's cluster", tc.name, cmds)
		}
	}
}

// runAll runs the program once for each of cmds, all at once, and returns
// their results in the order of cmds.
func (c *cli) runAll(cmds [][]string) []result {
	c.t.Helper()
	out := make([]result, len(cmds))
	var wg sync.WaitGroup
	for i, args := range cmds {
		wg.Go(func() {
			var stdout, stderr bytes.Buffer
			m := Main{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
				Getenv: func(k string) string { return c.env[k] }, Now: c.now}
			code := m.Run(context.Background(), args)
			out[i] = result{code: code, stdout: stdout.String(), stderr: stderr.String()}
		})
	}
	wg.Wait()
	return out
}

// Ensure that the ledger on etcd refuses an anchor on its own cluster
// however spelled (exit 2, nothing written), and that a stated anchor
// cluster (--anchor-etcd-cluster-id) holds its anchor's answers (exit 4 for
// another one).
func TestEtcdAnchorLedgerOwnCluster(t *testing.T) {
	c := newCLI(t)
	ec := etcdtest.Start(t)
	cli := ec.Client(t)
	port := ec.Endpoints()[0][strings.LastIndexByte(ec.Endpoints()[0], ':')+1:]
	c.must(0, "keygen", "--out", c.path("ledger.key"))
	c.env[envLedgerEtcd] = ec.Endpoints()[0]
	c.env[envLedgerKey] = c.path("ledger.key")
	before, rev := clusterState(t, cli)
	r := c.must(ExitUsage, "ledger", "init", "--id", "ledger-1", "--anchor", "etcd://localhost:"+port+"/ledger-anchor")
	if !strings.Contains(r.stderr, "separate") {
		t.Errorf("ledger init with the anchor on its own cluster: %s", r)
	}
	if after, rev2 := clusterState(t, cli); rev2 != rev || len(after) != len(before) {
		t.Fatal("a refused ledger init wrote on its cluster")
	}
	anchor := etcdAnchor(t, "/ledger-anchor")
	c.env[envLedgerAnchor] = anchor
	c.must(0, "ledger", "init", "--id", "ledger-1")
	c.must(ExitIntegrity, "ledger", "show", "--anchor-etcd-cluster-id", "1234")
	c.must(0, "ledger", "verify-chain", "--pub", c.path("ledger.key.pub"))
}
