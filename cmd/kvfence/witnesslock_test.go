package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/witness"
)

// Ensure that witness trust, run while another process (here the test,
// as witness serve would) holds the witness database, is refused quickly
// with the busy exit code and says to stop witness serve first.
func TestWitnessTrustWhileLocked(t *testing.T) {
	c := newCLI(t)
	c.must(0, "witness", "init", "--id", "witness.test/w1", "--key", c.path("w.key"), "--db", c.path("w.db"))
	c.must(0, "keygen", "--out", c.path("r.key"))
	st, err := witness.OpenStore(c.path("w.db"), witness.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start := time.Now()
	r := c.run("witness", "trust", "--db", c.path("w.db"), "--name", "r1", "--receiver-pub", c.path("r.key.pub"))
	if r.code != ExitBusy || !strings.Contains(r.stderr, "stop kvfence witness serve first") {
		t.Errorf("trust while the database is held: want exit %d saying to stop witness serve first\n%s", ExitBusy, r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusal took %v", d)
	}
}
