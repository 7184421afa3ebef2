package kvfence_test

import (
	"context"
	"fmt"
	"log"

	"github.com/kvfence/kvfence/kvfence"
)

// A hold with an ID can be repeated when its outcome is unknown (a lost
// answer, a timeout): the repeat returns the first hold's result and issues
// no new generation, even after a successor was activated. Each scope's
// acknowledgment is signed by the receiver and covered by the signed
// checkpoint the result carries, so a coordinator can check it offline
// with the receiver's public key.
func ExampleAdmin_Hold_idempotent() {
	r, cleanup := examplesReceiver("deploy/web")
	defer cleanup()
	ctx := context.Background()
	req := kvfence.HoldRequest{Scopes: []string{"deploy/web"}, Reason: "contain action-7", ID: "contain-action-7-web"}
	first, err := r.Admin().Hold(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	ack := first.Scopes[0].Ack
	if err := ack.Verify(r.PublicKey()); err != nil {
		log.Fatal(err)
	}
	if err := first.Checkpoint.Verify(r.PublicKey()); err != nil {
		log.Fatal(err)
	}
	if err := ack.CoveredBy(first.Checkpoint.Checkpoint); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("held %s: epoch %d -> %d, repeated %v\n", ack.Scope, ack.PreviousEpoch, ack.Epoch, first.Repeated)

	// A successor is activated at the installed epoch; then the hold's
	// caller, unsure whether it went through, repeats it.
	body, err := kvfence.EncodeRequest(kvfence.SetRequest("scale-to-3", "deploy/web", []byte(`{"replicas":3}`)))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := r.Admin().Activate(ctx, kvfence.ActivateRequest{Scope: "deploy/web", Executor: "worker-b",
		Claim: "claim-2", Request: body, Epoch: ack.Epoch}); err != nil {
		log.Fatal(err)
	}
	again, err := r.Admin().Hold(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	st, err := r.Status("deploy/web")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("repeat: epoch %d -> %d, repeated %v; scope now %s at epoch %d\n",
		again.Scopes[0].PreviousEpoch, again.Scopes[0].Epoch, again.Repeated, st.Mode, st.Epoch)
	// Output:
	// held deploy/web: epoch 1 -> 2, repeated false
	// repeat: epoch 1 -> 2, repeated true; scope now open at epoch 2
}
