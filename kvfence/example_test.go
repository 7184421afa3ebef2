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

// A worker's grant stops working the moment an administrator holds its
// scope, even before the replacement has written anything.
func Example() {
	dir, err := os.MkdirTemp("", "kvfence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "receiver.db")
	// The anchor lives apart from the database, in a place its own
	// administrator keeps; it is how a restored old database is caught.
	anchor := audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	// The recovery key is made and kept apart from the receiver: only its
	// public half is recorded, and only its holder can re-admit the
	// database after a restore or a lost anchor.
	recoveryPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "example", Key: key, Anchor: anchor,
		RecoveryKey: recoveryPub}); err != nil {
		log.Fatal(err)
	}
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	admin := r.Admin() // keep for administrators; workers only get Submit

	const scope = "configmap/prod/backup-policy"
	_, err = admin.CreateScope(ctx, scope)
	must(err)
	_, err = admin.CreateTarget(ctx, scope, scope, []byte(`{"data":{"retention_days":"30"}}`))
	must(err)

	req, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: "raise-retention", Target: scope,
		Patch: []byte(`[{"op":"replace","path":"/data/retention_days","value":"45"}]`)})
	must(err)
	grant, err := admin.Activate(ctx, kvfence.ActivateRequest{Scope: scope, Executor: "worker-a", Claim: "claim-1", Request: req})
	must(err)
	env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: scope, Epoch: grant.Epoch, Grant: grant.ID,
		Executor: "worker-a", Claim: "claim-1", Request: req})
	must(err)

	// Worker A pauses; its lease expires; the administrator holds the scope.
	_, err = admin.Hold(ctx, kvfence.HoldRequest{Scopes: []string{scope}, Reason: "worker-a lease expired"})
	must(err)

	// A resumes with everything that was valid before the pause.
	res, err := r.Submit(ctx, "worker-a", env)
	must(err)
	fmt.Println(res.Outcome, res.Reason)
	t, err := r.Target(scope)
	must(err)
	fmt.Println(t.Revision, string(t.Value))
	// Output:
	// denied receiver_held
	// 1 {"data":{"retention_days":"30"}}
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
