package ledger

import (
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/kvfence/kvfence/audit"
)

// Ensure that a superseded claim marked reconciled by editing its record in
// the file, with no reconcile in the audit chain, does not let a
// successor be recorded: reconciliation is a decision the chain records.
func TestRedteam20_ReconcileEditedIntoClaim(t *testing.T) {
	f, l, rs, old, c := containedFixture(t)
	var acks []BoundaryContainment
	for i, b := range c.Boundaries {
		acks = append(acks, rs[b.Receiver].ackFor(t, b, uint64(i)))
	}
	if got, err := l.RecordBoundaries(ctx, c.ID, acks); err != nil || got.State != ContainmentFull {
		t.Fatalf("acks: %+v, %v", got, err)
	}
	l.Close()
	editBucket(t, f.path, bucketClaims, old.Ref, func(raw []byte) []byte {
		var rec claimRecord
		if err := recordDec.Unmarshal(raw, &rec); err != nil {
			t.Fatal(err)
		}
		rec.State, rec.ReconciledBy, rec.ReconciledAt = StateFailed, "mallory", 1
		out, _ := recordEnc.Marshal(&rec)
		return out
	})
	l = f.open()
	defer l.Close()
	if err := l.CheckReconciled(old.Ref); !errors.Is(err, ErrNotReconciled) && !errors.Is(err, ErrContainmentTampered) {
		t.Fatalf("CheckReconciled of an edited claim: %v", err)
	}
	before := l.Head()
	g := SuccessorGrant{Receiver: "r1", Scope: "a", Grant: "g", Epoch: 1, Executor: "worker-b", Claim: "c-b", Decision: "d"}
	if _, err := l.RecordSuccessor(ctx, c.ID, []SuccessorGrant{g}); !errors.Is(err, ErrNotReconciled) && !errors.Is(err, ErrContainmentTampered) {
		t.Fatalf("successor after an edited reconcile: %v", err)
	}
	unchanged(t, l, before, "edited reconcile")
}

// Ensure that a claim reconciled through the ledger checks as reconciled,
// and one that is not, as not.
func TestRedteam20_CheckReconciled(t *testing.T) {
	_, l, _, old, _ := containedFixture(t)
	if err := l.CheckReconciled(old.Ref); !errors.Is(err, ErrNotReconciled) {
		t.Fatalf("uncertain claim: %v", err)
	}
	if _, err := l.Reconcile(ctx, old.Ref, "op", StateSucceeded); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckReconciled(old.Ref); err != nil {
		t.Fatalf("reconciled claim: %v", err)
	}
}

// Ensure that the receiver's own checkpoint signature does not pass for a
// hold acknowledgment: neither the checkpoint's bytes in the
// acknowledgment's place, nor an acknowledgment carrying a checkpoint's
// signature over the same key.
func TestRedteam20_CheckpointAsAcknowledgment(t *testing.T) {
	_, l, rs, _, c := containedFixture(t)
	b := c.Boundaries[0]
	good := rs["r1"].ackFor(t, b, 4)
	asAck := good
	asAck.Ack = good.Checkpoint
	sa, err := audit.ParseSignedHoldAck(good.Ack)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := audit.ParseSignedCheckpoint(good.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	sa.Signature = cp.Signature
	crossSig := good
	if crossSig.Ack, err = sa.Marshal(); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]BoundaryContainment{"checkpoint bytes": asAck, "checkpoint signature": crossSig} {
		before := l.Head()
		if _, err := l.RecordBoundaries(ctx, c.ID, []BoundaryContainment{r}); !errors.Is(err, ErrUnverifiedAcknowledgment) {
			t.Fatalf("%s as an acknowledgment: %v", name, err)
		}
		unchanged(t, l, before, name)
	}
}

// Ensure that a receiver's name holds no colon: a boundary is named
// RECEIVER:SCOPE, split at the first colon, so that receiver "eu:west"
// could never be named, and "eu:west:orders" would name scope
// "west:orders" of receiver "eu" instead.
func TestRedteam20_ReceiverNameWithSeparator(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	defer l.Close()
	before := l.Head()
	_, err := l.AddReceiver(ctx, AddReceiverRequest{Name: "eu:west", Server: "https://eu-west.example:8443", ReceiverID: "id-eu-west",
		PublicKey: keyFor("eu-west").Public().(ed25519.PublicKey), Operator: "op"})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("receiver named eu:west: %v, want ErrInvalidArgument", err)
	}
	unchanged(t, l, before, "receiver name with a colon")
}
