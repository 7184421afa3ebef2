package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that activate --assignment-out writes, locally, an assignment
// that client.LoadAssignment reads and whose envelope is applied, 0600;
// that an existing file is refused before any grant is minted; and that
// "-" is refused.
func TestActivate_AssignmentOutLocal(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	out := c.path("worker-a.json")
	g := c.json(0, "activate", "--scope", fixtureScope, "--executor", "worker-a", "--claim", "claim-a",
		"--request", c.path("req.cbor"), "--assignment-out", out)
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("assignment file: %v %v, want mode 0600", err, fi)
	}
	a, err := client.LoadAssignment(out)
	if err != nil {
		t.Fatal(err)
	}
	if a.Grant != g["grant"] || a.Scope != fixtureScope || a.Executor != "worker-a" || a.Claim != "claim-a" ||
		jsonNum(a.Epoch) != jsonNum(g["epoch"]) {
		t.Fatalf("assignment %+v does not match the grant %v", a, g)
	}
	env, err := a.Envelope()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.path("a.cbor"), env, 0o600); err != nil {
		t.Fatal(err)
	}
	if res := c.json(0, "submit", "--envelope", c.path("a.cbor"), "--as", "worker-a"); res["outcome"] != "applied" {
		t.Fatalf("submit of the loaded assignment: %v", res)
	}

	// An existing file: refused, and no grant minted.
	before := c.json(0, "status", "--scope", fixtureScope)
	r := c.run("activate", "--scope", fixtureScope, "--executor", "worker-b", "--claim", "claim-b",
		"--request", c.path("req.cbor"), "--assignment-out", out)
	if r.code == 0 || !strings.Contains(r.stderr, "--assignment-out") {
		t.Fatalf("activate over an existing file: %s", r)
	}
	if after := c.json(0, "status", "--scope", fixtureScope); jsonNum(after) != jsonNum(before) {
		t.Fatalf("a refused activate changed the scope:\nbefore %v\nafter  %v", before, after)
	}
	if a2, err := client.LoadAssignment(out); err != nil || a2.Grant != a.Grant {
		t.Fatalf("the existing file was changed: %+v %v", a2, err)
	}
	c.must(ExitUsage, "activate", "--scope", fixtureScope, "--executor", "worker-b", "--claim", "claim-b",
		"--request", c.path("req.cbor"), "--assignment-out", "-")
	// A refused activation (the scope is at another epoch) leaves no
	// file behind.
	if r := c.run("activate", "--scope", fixtureScope, "--executor", "worker-b", "--claim", "claim-b",
		"--request", c.path("req.cbor"), "--epoch", "99", "--assignment-out", c.path("b.json")); r.code == 0 {
		t.Fatalf("activate at a wrong epoch: %s", r)
	}
	if _, err := os.Stat(c.path("b.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed activate left its assignment file: %v", err)
	}
}

// Ensure that activate --server --assignment-out writes the assignment
// that a worker loads with client.LoadAssignment and client.LoadTLS and
// submits, applied.
func TestActivate_AssignmentOutServed(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.pki("t")
	c.clientCert("t", "operator", spiffeOperator)
	c.clientCert("t", "a", spiffeWorker+"a")
	rn := c.serve("--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
		"--client-ca", c.path("t-ca.crt"), "--admin", spiffeOperator)
	url := "https://" + rn.addrs.Listen
	out := c.path("worker-a.json")
	c.json(0, "activate", "--scope", fixtureScope, "--executor", spiffeWorker+"a", "--claim", "claim-a",
		"--request", c.path("req.cbor"), "--assignment-out", out, "--server", url,
		"--tls-cert", c.path("t-operator.crt"), "--tls-key", c.path("t-operator.key"), "--tls-ca", c.path("t-ca.crt"))
	a, err := client.LoadAssignment(out)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := client.LoadTLS(c.path("t-a.crt"), c.path("t-a.key"), c.path("t-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := client.New(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	res, err := w.SubmitAssignment(context.Background(), a)
	if err != nil || res.Outcome != kvfence.Applied {
		t.Fatalf("SubmitAssignment = %+v, %v", res, err)
	}
}
