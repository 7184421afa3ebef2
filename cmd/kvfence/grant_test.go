package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Ensure that grant extend moves the active grant's end, locally and with
// --server over the admin socket, prints the new end in --json, and is
// refused with exit code 3 and its code after a hold, past the maximum and
// for an unknown grant, writing nothing.
func TestGrantExtend(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	id := c.activate("w", "c", "env.cbor")
	before := time.Now()
	out := c.json(0, "grant", "extend", "--grant", id, "--ttl", "2h")
	na, err := time.Parse(time.RFC3339Nano, fmt.Sprint(out["not_after"]))
	if err != nil || out["grant"] != id || na.Before(before.Add(2*time.Hour)) || na.After(time.Now().Add(2*time.Hour)) || out["created_at"] == nil {
		t.Fatalf("grant extend --json: %v", out)
	}
	if og := c.json(0, "observe", "grant", id); og["not_after"] != out["not_after"] {
		t.Fatalf("observe grant after the extension: %v, extension said %v", og["not_after"], out["not_after"])
	}
	if ev := c.must(0, "observe", "events", "--kind", "grant_extended").stdout; !strings.Contains(ev, id) {
		t.Fatalf("observe events --kind grant_extended:\n%s", ev)
	}

	status := c.must(0, "status", "--json").stdout
	for _, tc := range []struct {
		args []string
		code int
		json string
	}{
		{[]string{"--grant", id, "--ttl", "25h"}, ExitDenied, "ttl_too_long"},
		{[]string{"--grant", "00000000000000000000000000000000", "--ttl", "1h"}, ExitDenied, "grant_not_active"},
		{[]string{"--grant", id, "--ttl", "1m"}, ExitError, "invalid_window"},
		{[]string{"--grant", id}, ExitUsage, "usage"},
		{[]string{"--ttl", "1h"}, ExitUsage, "usage"},
		{[]string{"--grant", id, "--ttl", "-1h"}, ExitUsage, "usage"},
	} {
		r := c.must(tc.code, append([]string{"grant", "extend", "--json"}, tc.args...)...)
		if !strings.Contains(r.stdout, `"code": "`+tc.json+`"`) {
			t.Errorf("grant extend %v: %s, want code %s", tc.args, r, tc.json)
		}
	}
	if got := c.must(0, "status", "--json").stdout; got != status {
		t.Fatalf("a refused extension changed the state:\n%s\n---\n%s", status, got)
	}

	sock := filepath.Join(socketDir(t), "admin.sock")
	c.pki("t")
	rn := c.serve("--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
		"--client-ca", c.path("t-ca.crt"), "--admin-socket", sock, "--admin-uid", fmt.Sprint(os.Getuid()))
	srv := func(args ...string) []string { return append(args, "--server", "unix://"+sock) }
	served := c.json(0, srv("grant", "extend", "--grant", id, "--ttl", "3h")...)
	if served["grant"] != id || fmt.Sprint(served["not_after"]) <= fmt.Sprint(out["not_after"]) {
		t.Fatalf("served grant extend: %v", served)
	}
	c.must(0, srv("hold", "--scope", fixtureScope, "--reason", "lease lost")...)
	r := c.must(ExitDenied, srv("grant", "extend", "--json", "--grant", id, "--ttl", "4h")...)
	if !strings.Contains(r.stdout, `"code": "grant_not_active"`) || !strings.Contains(r.stderr, "Try:") {
		t.Fatalf("served grant extend after the hold: %s", r)
	}
	if code := rn.wait(t); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	c.must(ExitDenied, "grant", "extend", "--grant", id, "--ttl", "4h")
}
