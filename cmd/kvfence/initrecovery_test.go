package main

import (
	"os"
	"strings"
	"testing"
)

// Ensure that init requires a recovery key, or an explicit
// --no-recovery-key that says on stderr what it gives up: without either,
// or with both, it exits 2 and creates nothing, since a receiver without a
// recovery key can never be re-admitted after a restore.
func TestInitRecoveryKeyRequired(t *testing.T) {
	c := newCLI(t)
	c.must(0, "keygen", "--out", c.path("k"))
	c.must(0, "keygen", "--out", c.path("rk"))
	base := []string{"init", "--db", c.path("r.db"), "--anchor", c.path("r.anchor"), "--key", c.path("k"), "--id", "r"}
	for _, tc := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"neither", nil, "--recovery-pub FILE is required"},
		{"both", []string{"--recovery-pub", c.path("rk.pub"), "--no-recovery-key"}, "exclude each other"},
	} {
		r := c.must(ExitUsage, append(append([]string{}, base...), tc.extra...)...)
		if !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("%s: %s", tc.name, r)
		}
		for _, f := range []string{"r.db", "r.anchor"} {
			if _, err := os.Stat(c.path(f)); !os.IsNotExist(err) {
				t.Fatalf("%s: a refused init left %s: %v", tc.name, f, err)
			}
		}
	}
	r := c.must(0, append(append([]string{}, base...), "--no-recovery-key")...)
	if !strings.Contains(r.stderr, "no admission can re-admit it") {
		t.Errorf("--no-recovery-key said nothing of what it gives up: %s", r)
	}
	out := c.json(0, "init", "--db", c.path("r2.db"), "--anchor", c.path("r2.anchor"), "--key", c.path("k"), "--id", "r2",
		"--recovery-pub", c.path("rk.pub"))
	if out["recovery_key"] == nil {
		t.Errorf("init --recovery-pub recorded no recovery key: %v", out)
	}
}
