package witness_test

import (
	"testing"
	"time"

	"github.com/kvfence/kvfence/witness"
)

// Scenario (a network attacker, no key): the receiver recovered once
// with admission A1 while this witness was down; A1 named it at its
// latest (size 8), and A1 travelled to the other witnesses with the
// checkpoints that name it. The operator later recovered again with A2,
// decided against what the witnesses hold now: this witness still at
// size 8. Before the receiver shows A2 to this witness, the attacker
// replays A1, long expired, with a checkpoint of A1's superseded chain.
// The witness does not check expiry and takes it; A2 then no longer names
// its latest, and the witness is stuck on a chain the recovery key
// abandoned: it refuses the receiver's current chain for good (a witness
// taken out of every quorum by a replay, without any key), until yet
// another admission names its new position.
//
// Ensure that a superseded, expired admission replayed to a witness does
// not keep it from the recovery key's current decision.
func TestRedteamR_ExpiredAdmissionReplayStrandsWitness(t *testing.T) {
	f := newRecFixture(t, true)
	old := f.now.Add(-48 * time.Hour)
	a1Chain := newTree(t, "a1-chain", 0)
	a1 := rtAdmission(t, old, a1Chain, 4, f.named)
	a1Note := rtNote(t, f, a1Chain, 6, a1)
	a2Chain := newTree(t, "a2-chain", 0)
	a2 := rtAdmission(t, f.now, a2Chain, 4, f.named)
	a2Note := rtNote(t, f, a2Chain, 5, a2)

	_, replayErr := f.w.RecoverCheckpoint(witness.RecoverCheckpointRequest{Admission: a1, Proof: a1Chain.proof(t, 4, 6), SignedNote: a1Note})
	_, err := f.w.RecoverCheckpoint(witness.RecoverCheckpointRequest{Admission: a2, Proof: a2Chain.proof(t, 4, 5), SignedNote: a2Note})
	st, _ := f.store.Log(f.origin)
	if err != nil || st.Size != 5 || st.Root != a2Chain.root(t, 5) {
		t.Fatalf("replayed expired admission A1 (signed 48h ago): %v; the current admission A2 after it: %v; the witness holds size %d (want A2's chain at 5)",
			replayErr, err, st.Size)
	}
}
