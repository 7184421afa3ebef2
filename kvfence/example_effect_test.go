package kvfence_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
)

// An embedder keeps its own records (here an order book) in the fence's
// write transaction: the effect runs only for an applied write, and its
// records commit with the target's value, the receipt and the audit entry,
// or not at all. An effect's error is the worker's denial.
func ExampleReceiver_Submit_effect() {
	dir, err := os.MkdirTemp("", "kvfence-effect")
	must(err)
	defer os.RemoveAll(dir)
	path, anchor := filepath.Join(dir, "receiver.db"), audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	must(kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "example", Key: key, Anchor: anchor}))

	// The effect: deterministic over its input and what it reads, and
	// touching nothing but tx (it may run more than once).
	orders := kvfence.Effect{Buckets: []string{"app_orders"}, Apply: func(tx kvfence.EffectTx, in kvfence.EffectInput) error {
		if string(in.Value) == "" {
			return errors.New("an empty order")
		}
		return tx.Put("app_orders", []byte(in.Action), in.Value)
	}}
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor, Effects: map[string]kvfence.Effect{"orders": orders}})
	must(err)
	defer r.Close()
	ctx, admin := context.Background(), r.Admin()
	_, err = admin.CreateScope(ctx, "shop/orders")
	must(err)
	_, err = admin.CreateTargetSpec(ctx, kvfence.TargetSpec{Scope: "shop/orders", Name: "orders/latest",
		Kind: kvfence.TargetFunc, Effect: "orders"})
	must(err)

	submit := func(worker, action, value string) kvfence.Result {
		v := []byte(value)
		req, err := kvfence.EncodeRequest(&kvfence.Request{V: kvfence.WireVersion, Action: action, Target: "orders/latest", Set: &v})
		must(err)
		if st, _ := r.Status("shop/orders"); st.Mode == kvfence.ModeOpen {
			_, err = admin.Hold(ctx, kvfence.HoldRequest{Scopes: []string{"shop/orders"}, Reason: "next worker"})
			must(err)
		}
		g, err := admin.Activate(ctx, kvfence.ActivateRequest{Scope: "shop/orders", Executor: worker, Claim: "c-" + action, Request: req})
		must(err)
		env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: kvfence.WireVersion, Scope: "shop/orders", Epoch: g.Epoch,
			Grant: g.ID, Executor: worker, Claim: "c-" + action, Request: req})
		must(err)
		res, err := r.Submit(ctx, worker, env)
		must(err)
		return res
	}
	res := submit("worker-a", "order-1", `{"sku":"A7","qty":2}`)
	fmt.Println(res.Outcome)
	got, err := r.AppGet("app_orders", []byte("order-1"))
	must(err)
	fmt.Printf("%s\n", got)
	res = submit("worker-b", "order-2", "")
	fmt.Println(res.Outcome, res.Reason, res.Detail)
	got, err = r.AppGet("app_orders", []byte("order-2"))
	must(err)
	fmt.Println(got == nil)
	// Output:
	// applied
	// {"sku":"A7","qty":2}
	// denied precondition_failed effect refused: an empty order
	// true
}
