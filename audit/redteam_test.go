package audit

import (
	"crypto/sha256"
	"testing"
)

// Ensure that a base record the chain does not confirm is not blamed on
// the anchor. Whoever can write the database alone can store a base
// record past the anchored seq, with entries that link to it; "the anchor
// names an archived entry, so an old anchor was put back" (anchor_stale)
// then points the operator at the anchor, which is current, instead of at
// the database, whose base no archive entry records (base_mismatch).
func TestRedteam_UnconfirmedBaseIsNotAnAnchorProblem(t *testing.T) {
	recs, head := testChain(t, 8)
	forged := Head{Seq: head.Seq + 1, Hash: sha256.Sum256([]byte("no such entry"))}
	baseRaw := mustMarshalBase(&Base{Seq: forged.Seq, Hash: forged.Hash})
	c := NewChain(forged)
	raw, _, err := c.Append(&Entry{At: t0, Kind: KindHold, Scope: "s", Epoch: 9, Note: "forged"})
	if err != nil {
		t.Fatal(err)
	}
	stored := []record{{SeqKey(forged.Seq + 1), raw}}
	r, err := Verify(VerifyOptions{Entries: entriesOf(stored), Anchor: anchorAt(t, recs, head.Seq),
		PublicKey: pubOf(receiverKey), Receiver: testReceiver, BaseRecord: baseRaw})
	if err != nil {
		t.Fatal(err)
	}
	if r.Problem != ProblemBaseMismatch {
		t.Fatalf("Verify = %s (%s), want %s: the base is the database's word alone", r.Problem, r.Detail, ProblemBaseMismatch)
	}
}
