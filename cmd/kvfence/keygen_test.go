package main

import (
	"strings"
	"testing"

	"github.com/kvfence/kvfence/audit"
)

// Ensure that keygen and init print each key's SHA256 fingerprint in the
// form the anchor records for the key that signs it, as text and JSON.
func TestKeyFingerprints(t *testing.T) {
	c := newCLI(t)
	k := c.json(0, "keygen", "--out", c.path("k"))
	rk := c.must(0, "keygen", "--out", c.path("rk"))
	init := c.json(0, "init", "--db", c.path("r.db"), "--anchor", c.path("r.anchor"), "--key", c.path("k"), "--id", "r",
		"--recovery-pub", c.path("rk.pub"))
	sc, err := audit.FileAnchor{Path: c.path("r.anchor")}.Load()
	if err != nil {
		t.Fatal(err)
	}
	want := sc.Key.String()
	if !strings.HasPrefix(want, "SHA256:") || k["fingerprint"] != want || init["fingerprint"] != want {
		t.Errorf("anchor signed by %s; keygen printed %v, init %v", want, k["fingerprint"], init["fingerprint"])
	}
	var rkf string
	for _, line := range strings.Split(rk.stdout, "\n") {
		if f, ok := strings.CutPrefix(line, "fingerprint  "); ok {
			rkf = f
		}
	}
	if rkf == "" || rkf == want || init["recovery_fingerprint"] != rkf {
		t.Errorf("recovery key: keygen printed %q, init %v\n%s", rkf, init["recovery_fingerprint"], rk.stdout)
	}
	text := c.must(0, "init", "--db", c.path("r2.db"), "--anchor", c.path("r2.anchor"), "--key", c.path("k"), "--id", "r2",
		"--no-recovery-key").stdout
	if !strings.Contains(text, "fingerprint    "+want+"\n") {
		t.Errorf("init text lacks the fingerprint %s:\n%s", want, text)
	}
}
