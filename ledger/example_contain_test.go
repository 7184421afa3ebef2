package ledger_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/ledger"
)

// receiverSigns stands in for a receiver that committed a hold: it signs
// the hold's acknowledgment and the checkpoint that covers it, as a
// receiver's hold result carries them.
func receiverSigns(priv ed25519.PrivateKey, b ledger.BoundaryContainment, prev uint64, at time.Time) ledger.BoundaryContainment {
	cp := audit.Checkpoint{Root: audit.Hash{0x7e}, Receiver: "receiver-1", Seq: 12, Head: sha256.Sum256([]byte("head")), EpochHighWater: prev + 1, At: at.UnixNano()}
	sa, err := audit.SignHoldAck(priv, audit.HoldAck{Receiver: "receiver-1", Scope: b.Scope, HoldID: b.HoldID, PreviousEpoch: prev,
		Epoch: prev + 1, AuditSeq: 11, RequestedAt: at.UnixNano(), At: at.UnixNano(), CheckpointSeq: cp.Seq, CheckpointHead: cp.Head})
	if err != nil {
		log.Fatal(err)
	}
	sc, err := audit.Sign(priv, cp)
	if err != nil {
		log.Fatal(err)
	}
	b.Ack, _ = sa.Marshal()
	b.Checkpoint, _ = sc.Marshal()
	b.Result, b.PreviousEpoch, b.InstalledEpoch, b.AcknowledgedAt = ledger.BoundaryAcknowledged, prev, prev+1, at
	return b
}

// A containment holds an action at every boundary its approval names. Each
// boundary counts as contained only with an acknowledgment that verifies
// under the receiver's pinned key, and a successor is recorded only once
// every boundary is contained and the superseded claim is reconciled.
func ExampleLedger_BeginContainment() {
	x := newExampleLedger()
	defer x.close()
	ctx := context.Background()
	recvKey := ed25519.NewKeyFromSeed(sha256.New().Sum(nil))

	_, err := x.l.AddReceiver(ctx, ledger.AddReceiverRequest{Name: "orders", Server: "https://orders.example:8443",
		ReceiverID: "receiver-1", PublicKey: recvKey.Public().(ed25519.PublicKey), Operator: "op"})
	if err != nil {
		log.Fatal(err)
	}
	_, err = x.l.Approve(ctx, ledger.ApproveRequest{Action: "refund-42", RequestSHA256: sha256.Sum256([]byte("refund-42")),
		Approver: "alice", TTL: time.Hour, Boundaries: []ledger.Boundary{{Receiver: "orders", Scope: "payments"}}})
	if err != nil {
		log.Fatal(err)
	}
	a, _ := x.l.Claim(ctx, ledger.ClaimRequest{Action: "refund-42", Worker: "worker-a"})
	b, _ := x.l.Takeover(ctx, ledger.TakeoverRequest{Action: "refund-42", Operator: "op", Reason: "worker-a paused", Worker: "worker-b"})

	c, err := x.l.BeginContainment(ctx, "refund-42", "worker-a paused")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("begun:", c.State, c.Boundaries[0].Result)

	acked := receiverSigns(recvKey, c.Boundaries[0], 3, x.now)
	c, err = x.l.RecordBoundaries(ctx, c.ID, []ledger.BoundaryContainment{acked})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after the acknowledgment:", c.State, "installed epoch", c.Boundaries[0].InstalledEpoch)

	grant := ledger.SuccessorGrant{Receiver: "orders", Scope: "payments", Grant: "g-1", Epoch: 4, Executor: "worker-b",
		Claim: b.Ref, Decision: "successor-review-7"}
	_, err = x.l.RecordSuccessor(ctx, c.ID, []ledger.SuccessorGrant{grant})
	fmt.Println("successor before reconciling:", errors.Is(err, ledger.ErrNotReconciled))

	if _, err := x.l.Reconcile(ctx, a.Ref, "op", ledger.StateFailed); err != nil {
		log.Fatal(err)
	}
	c, err = x.l.RecordSuccessor(ctx, c.ID, []ledger.SuccessorGrant{grant})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("successor:", c.Successor[0].Grant, "at epoch", c.Successor[0].Epoch)
	// Output:
	// begun: none pending
	// after the acknowledgment: full installed epoch 4
	// successor before reconciling: true
	// successor: g-1 at epoch 4
}
