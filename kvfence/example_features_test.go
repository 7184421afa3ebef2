package kvfence_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
)

// examplesReceiver initialises a receiver in a temporary directory with
// one scope and target per name; cleanup removes it.
func examplesReceiver(names ...string) (r *kvfence.Receiver, cleanup func()) {
	dir, err := os.MkdirTemp("", "kvfence-example")
	if err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(dir, "receiver.db")
	anchor := audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	// Only the public half of the separately held recovery key is given.
	recoveryPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "example", Key: key, Anchor: anchor,
		RecoveryKey: recoveryPub}); err != nil {
		log.Fatal(err)
	}
	if r, err = kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor}); err != nil {
		log.Fatal(err)
	}
	for _, n := range names {
		if _, err := r.Admin().CreateScope(context.Background(), n); err != nil {
			log.Fatal(err)
		}
		if _, err := r.Admin().CreateTarget(context.Background(), n, n, []byte(`{"replicas":2}`)); err != nil {
			log.Fatal(err)
		}
	}
	return r, func() { r.Close(); os.RemoveAll(dir) }
}

// A request that replaces a target's value, only while the target is still
// at the revision the approver reviewed.
func ExampleSetRequest() {
	req, err := kvfence.EncodeRequest(kvfence.SetRequest("scale-to-3", "deploy/web", []byte(`{"replicas":3}`)).
		WithExpectRevision(7))
	if err != nil {
		log.Fatal(err)
	}
	back, err := kvfence.DecodeRequest(req, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(back.Action, back.Target, string(*back.Set), *back.ExpectRevision)
	// Output:
	// scale-to-3 deploy/web {"replicas":3} 7
}

// A request that applies a JSON Patch to a target's value; Submit applies
// it to the value the target has when the request is decided.
func ExamplePatchRequest() {
	r, cleanup := examplesReceiver("deploy/web")
	defer cleanup()
	ctx := context.Background()
	req, err := kvfence.EncodeRequest(kvfence.PatchRequest("scale-to-3", "deploy/web",
		[]byte(`[{"op":"replace","path":"/replicas","value":3}]`)).WithExpectValue([]byte(`{"replicas":2}`)))
	if err != nil {
		log.Fatal(err)
	}
	g, err := r.Admin().Activate(ctx, kvfence.ActivateRequest{Scope: "deploy/web", Executor: "worker-a", Claim: "claim-1", Request: req})
	if err != nil {
		log.Fatal(err)
	}
	env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: kvfence.WireVersion, Scope: g.Scope, Epoch: g.Epoch, Grant: g.ID,
		Executor: "worker-a", Claim: "claim-1", Request: req})
	if err != nil {
		log.Fatal(err)
	}
	res, err := r.Submit(ctx, "worker-a", env)
	if err != nil {
		log.Fatal(err)
	}
	t, err := r.Target("deploy/web")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Outcome, t.Revision, string(t.Value))
	// Output:
	// applied 2 {"replicas":3}
}

// The incident button: every open scope is held in one transaction, and
// the scopes already held are reported.
func ExampleAdmin_HoldAll() {
	r, cleanup := examplesReceiver("deploy/api", "deploy/web")
	defer cleanup()
	ctx := context.Background()
	req, err := kvfence.EncodeRequest(kvfence.SetRequest("scale", "deploy/web", []byte(`{"replicas":3}`)))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := r.Admin().Activate(ctx, kvfence.ActivateRequest{Scope: "deploy/web", Executor: "worker-a", Claim: "claim-1", Request: req}); err != nil {
		log.Fatal(err)
	}
	res, err := r.Admin().HoldAll(ctx, "incident 42: stop every worker")
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range res.Scopes {
		fmt.Printf("held %s: epoch %d -> %d\n", s.Scope, s.PreviousEpoch, s.Epoch)
	}
	fmt.Println("already held:", res.AlreadyHeld)
	// Output:
	// held deploy/web: epoch 1 -> 2
	// already held: [deploy/api]
}
