package main

import (
	"errors"
	"testing"

	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/witness"
)

// Scenario (an operator's slip, not an attacker): witness trust is given
// the receiver's own public key as --recovery-pub. TrustRecovery refuses
// it, and the command fails, but Trust ran before it in a transaction of
// its own: the witness now trusts the receiver, without a recovery key,
// and cosigns it from then on although the command said it failed. The
// operator who fixes the flag and runs trust again gets the recovery key
// recorded; one who gives up, thinking nothing changed, has a witness
// whose every later recovery of this receiver is refused.
//
// Ensure that a witness trust refused for its --recovery-pub changes
// nothing: the receiver is not trusted either.
func TestRedteamR_WitnessTrustHalfApplied(t *testing.T) {
	c := newCLI(t)
	c.must(0, "witness", "init", "--id", "witness.test/w1", "--key", c.path("w.key"), "--db", c.path("w.db"))
	c.must(0, "keygen", "--out", c.path("r.key"))
	rpub, err := keyfile.LoadPublic(c.path("r.key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	origin, _ := checkpoint.ReceiverOrigin("r1", rpub)
	r := c.run("witness", "trust", "--db", c.path("w.db"), "--name", "r1", "--receiver-pub", c.path("r.key.pub"),
		"--recovery-pub", c.path("r.key.pub"))
	if r.code == 0 {
		t.Fatalf("the receiver's own key accepted as its recovery key:\n%s", r)
	}
	st, err := witness.OpenStore(c.path("w.db"), witness.StoreOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Log(origin); !errors.Is(err, witness.ErrUnknownLog) {
		t.Fatalf("after a refused witness trust, the witness trusts the receiver anyway (log state: %v)", err)
	}
}
