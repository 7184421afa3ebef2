package main

import (
	"crypto/ed25519"
	"os"
	"testing"
)

// Ensure that witness trust refuses a receiver public key of small order
// (here the identity point): under it the signature R = identity, S = 0
// verifies for every message, so anyone could sign that receiver's
// checkpoints and move the witness's record of it.
func TestRedteamWitnessTrustSmallOrderKey(t *testing.T) {
	c := newCLI(t)
	c.must(0, "witness", "init", "--id", "witness.test/w1", "--key", c.path("w.key"), "--db", c.path("w.db"))
	weak := make(ed25519.PublicKey, ed25519.PublicKeySize)
	weak[0] = 1
	if err := os.WriteFile(c.path("weak.pub"), []byte(publicLine(weak)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := c.run("witness", "trust", "--db", c.path("w.db"), "--name", "victim", "--receiver-pub", c.path("weak.pub")); r.code == 0 {
		t.Errorf("witness trust accepted the identity point as a receiver key:\n%s", r)
	}
}
