package kvfence_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
)

// exampleScope is the scope, and the name of its one target, that the
// examples below protect.
const exampleScope = "configmap/prod/backup-policy"

// exampleReceiver is a receiver initialised in a temporary directory, with
// exampleScope and its target created, and what worker-a holds once an
// administrator has activated a grant for it.
type exampleReceiver struct {
	dir    string
	path   string
	anchor audit.FileAnchor
	key    ed25519.PrivateKey
	r      *kvfence.Receiver
	admin  *kvfence.Admin
	// grant and envelope are worker-a's, for request; zero until activate.
	request  []byte
	grant    kvfence.Grant
	envelope []byte
}

// newExampleReceiver initialises and opens a receiver with exampleScope and
// its target, and encodes the approved request. A fixed key keeps the
// examples' output stable; a real receiver's key comes from keyfile.
func newExampleReceiver() *exampleReceiver {
	dir, err := os.MkdirTemp("", "kvfence-example")
	if err != nil {
		log.Fatal(err)
	}
	x := &exampleReceiver{dir: dir, path: filepath.Join(dir, "receiver.db"),
		anchor: audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")},
		key:    ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))}
	// Only the public half of the separately held recovery key is given;
	// a fixed one, like the fixed receiver key, keeps the output stable.
	recovery := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	must(kvfence.Init(x.path, &kvfence.InitOptions{ReceiverID: "example", Key: x.key, Anchor: x.anchor,
		RecoveryKey: recovery.Public().(ed25519.PublicKey)}))
	x.open()
	ctx := context.Background()
	_, err = x.admin.CreateScope(ctx, exampleScope)
	must(err)
	_, err = x.admin.CreateTarget(ctx, exampleScope, exampleScope, []byte(`{"data":{"retention_days":"30"}}`))
	must(err)
	x.request, err = kvfence.EncodeRequest(&kvfence.Request{V: kvfence.WireVersion, Action: "raise-retention",
		Target: exampleScope, Patch: []byte(`[{"op":"replace","path":"/data/retention_days","value":"45"}]`)})
	must(err)
	return x
}

// open opens the receiver with its anchor and key.
func (x *exampleReceiver) open() {
	r, err := kvfence.Open(x.path, &kvfence.Options{Key: x.key, Anchor: x.anchor})
	must(err)
	x.r, x.admin = r, r.Admin()
}

// activate opens the scope with a grant for worker-a and builds the
// envelope worker-a submits.
func (x *exampleReceiver) activate() {
	var err error
	x.grant, err = x.admin.Activate(context.Background(), kvfence.ActivateRequest{Scope: exampleScope,
		Executor: "worker-a", Claim: "claim-1", Request: x.request})
	must(err)
	x.envelope = x.envelopeAt(x.grant.Epoch)
}

// envelopeAt is worker-a's envelope claiming epoch.
func (x *exampleReceiver) envelopeAt(epoch uint64) []byte {
	env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: kvfence.WireVersion, Scope: exampleScope, Epoch: epoch,
		Grant: x.grant.ID, Executor: "worker-a", Claim: "claim-1", Request: x.request})
	must(err)
	return env
}

// close closes the receiver, if it is open, and removes its directory.
func (x *exampleReceiver) close() {
	if x.r != nil {
		x.r.Close()
	}
	os.RemoveAll(x.dir)
}

// Submit takes the caller's identity from the embedding application, never
// from the envelope. An identical retry of an applied action changes
// nothing, and the same envelope from another caller is denied.
func ExampleReceiver_Submit() {
	x := newExampleReceiver()
	defer x.close()
	x.activate()
	ctx := context.Background()

	res, err := x.r.Submit(ctx, "worker-a", x.envelope)
	must(err)
	fmt.Println(res.Outcome, "revision", res.Revision)

	res, err = x.r.Submit(ctx, "worker-a", x.envelope) // a retry after a lost answer
	must(err)
	fmt.Println(res.Outcome, "revision", res.Revision)

	res, err = x.r.Submit(ctx, "worker-b", x.envelope) // worker-a's envelope, another caller
	must(err)
	fmt.Println(res.Outcome, res.Reason)

	t, err := x.r.Target(exampleScope)
	must(err)
	fmt.Println(string(t.Value))
	// Output:
	// applied revision 2
	// already_applied revision 2
	// denied executor_mismatch
	// {"data":{"retention_days":"45"}}
}

// A hold advances the scope's epoch and clears its grant in one
// transaction. The superseded worker is denied whether it sends its old
// envelope or copies the new epoch into it, and whether or not the
// replacement has written yet.
func ExampleAdmin_Hold() {
	x := newExampleReceiver()
	defer x.close()
	x.activate()
	ctx := context.Background()

	h, err := x.admin.Hold(ctx, kvfence.HoldRequest{Scopes: []string{exampleScope}, Reason: "worker-a lease expired"})
	must(err)
	for _, s := range h.Scopes {
		fmt.Printf("%s: epoch %d -> %d\n", s.Scope, s.PreviousEpoch, s.Epoch)
	}

	// The replacement is activated at the new epoch.
	value := []byte(`{"data":{"retention_days":"60"}}`)
	request, err := kvfence.EncodeRequest(&kvfence.Request{V: kvfence.WireVersion, Action: "raise-retention-b",
		Target: exampleScope, Set: &value})
	must(err)
	_, err = x.admin.Activate(ctx, kvfence.ActivateRequest{Scope: exampleScope, Executor: "worker-b", Claim: "claim-2",
		Request: request})
	must(err)

	for _, env := range [][]byte{x.envelope, x.envelopeAt(h.Scopes[0].Epoch)} {
		res, err := x.r.Submit(ctx, "worker-a", env)
		must(err)
		fmt.Println("worker-a at epoch", res.Epoch, res.Outcome, res.Reason)
	}
	// Output:
	// configmap/prod/backup-policy: epoch 1 -> 2
	// worker-a at epoch 1 denied stale_or_unknown_epoch
	// worker-a at epoch 2 denied inactive_grant
}

// Activate mints a grant bound to the exact request bytes and opens the held
// scope with it. Epoch makes it a compare-and-swap against a hold the
// approver did not see; an open scope must be held before another grant.
func ExampleAdmin_Activate() {
	x := newExampleReceiver()
	defer x.close()
	ctx := context.Background()

	g, err := x.admin.Activate(ctx, kvfence.ActivateRequest{Scope: exampleScope, Executor: "worker-a",
		Claim: "claim-1", Request: x.request, Epoch: 1, TTL: 10 * time.Minute, Decision: "change-1234"})
	must(err)
	fmt.Println("epoch", g.Epoch, "executor", g.Executor, "action", g.Action)
	fmt.Println("binds the request:", g.RequestSHA256 == kvfence.RequestDigest(x.request))
	fmt.Println("valid for", g.NotAfter.Sub(g.NotBefore))
	st, err := x.r.Status(exampleScope)
	must(err)
	fmt.Println(st.Mode, "active grant is the new one:", st.ActiveGrant == g.ID)

	_, err = x.admin.Activate(ctx, kvfence.ActivateRequest{Scope: exampleScope, Executor: "worker-b",
		Claim: "claim-2", Request: x.request})
	fmt.Println("second activation refused:", errors.Is(err, kvfence.ErrNotHeld))
	// Output:
	// epoch 1 executor worker-a action raise-retention
	// binds the request: true
	// valid for 10m0s
	// open active grant is the new one: true
	// second activation refused: true
}

// A new scope starts held at epoch 1: nothing is authorised in it until an
// administrator activates a grant.
func ExampleAdmin_CreateScope() {
	x := newExampleReceiver()
	defer x.close()

	st, err := x.admin.CreateScope(context.Background(), "configmap/prod/other")
	must(err)
	fmt.Println(st.Scope, "epoch", st.Epoch, st.Mode, "active grant:", st.ActiveGrant == "")

	_, err = x.admin.CreateScope(context.Background(), "configmap/prod/other")
	fmt.Println("created twice:", errors.Is(err, kvfence.ErrScopeExists))
	// Output:
	// configmap/prod/other epoch 1 held active grant: true
	// created twice: true
}

// A target belongs to one scope and starts at revision 1.
func ExampleAdmin_CreateTarget() {
	x := newExampleReceiver()
	defer x.close()

	t, err := x.r.Target(exampleScope)
	must(err)
	fmt.Println(t.Name, "in", t.Scope, "revision", t.Revision, string(t.Value))

	_, err = x.admin.CreateTarget(context.Background(), "configmap/prod/unknown", "t", []byte("v"))
	fmt.Println("in an unknown scope:", errors.Is(err, kvfence.ErrUnknownScope))
	// Output:
	// configmap/prod/backup-policy in configmap/prod/backup-policy revision 1 {"data":{"retention_days":"30"}}
	// in an unknown scope: true
}

// Status keeps stale-authority denials apart from other denials, with the
// time of the latest, so that an operator can tell a superseded worker from
// a misconfigured one.
func ExampleReceiver_Status() {
	x := newExampleReceiver()
	defer x.close()
	x.activate()
	ctx := context.Background()
	_, err := x.admin.Hold(ctx, kvfence.HoldRequest{Scopes: []string{exampleScope}, Reason: "incident"})
	must(err)
	_, err = x.r.Submit(ctx, "worker-a", x.envelope)
	must(err)

	st, err := x.r.Status(exampleScope)
	must(err)
	fmt.Println("epoch", st.Epoch, st.Mode)
	fmt.Println("stale rejections", st.StaleRejections, "last one recorded:", !st.LastStaleRejectionAt.IsZero())
	fmt.Println("receiver_held denials", st.Denials[kvfence.ReasonReceiverHeld])
	fmt.Println("hold committed after it was requested:", !st.HoldCommittedAt.Before(st.HoldRequestedAt))
	// Output:
	// epoch 2 held
	// stale rejections 1 last one recorded: true
	// receiver_held denials 1
	// hold committed after it was requested: true
}

// Every state change and every decision is an entry of the audit chain,
// written in the same transaction.
func ExampleReceiver_Events() {
	x := newExampleReceiver()
	defer x.close()
	x.activate()
	ctx := context.Background()
	_, err := x.admin.Hold(ctx, kvfence.HoldRequest{Scopes: []string{exampleScope}, Reason: "incident"})
	must(err)
	_, err = x.r.Submit(ctx, "worker-a", x.envelope)
	must(err)

	must(x.r.Events(1, func(e kvfence.Event) bool {
		line := fmt.Sprintf("%d %s epoch %d", e.Seq, e.Kind, e.Epoch)
		if e.Outcome != "" {
			line += " " + e.Outcome + " " + e.Reason
		}
		fmt.Println(line)
		return true
	}))
	// Output:
	// 1 init epoch 0
	// 2 scope_created epoch 1
	// 3 target_created epoch 1
	// 4 activate epoch 1
	// 5 hold epoch 2
	// 6 submit epoch 1 denied receiver_held
}

// Open refuses a database that is older than its anchor: here, a copy taken
// while worker-a's grant was active, put back after the hold that
// superseded it. Opened, the copy would accept the old grant again.
func ExampleOpen_rollbackDetected() {
	x := newExampleReceiver()
	defer x.close()
	x.activate()
	x.r.Close()
	backup, err := os.ReadFile(x.path)
	must(err)

	x.open()
	_, err = x.admin.Hold(context.Background(), kvfence.HoldRequest{Scopes: []string{exampleScope}, Reason: "incident"})
	must(err)
	x.r.Close()
	must(os.WriteFile(x.path, backup, 0o600)) // the restore

	_, err = kvfence.Open(x.path, &kvfence.Options{Key: x.key, Anchor: x.anchor})
	fmt.Println("rollback detected:", errors.Is(err, kvfence.ErrRollbackDetected))
	fmt.Println("integrity error:", kvfence.IsIntegrityError(err))
	x.r = nil // a recovery admission is the only way back for the copy
	// Output:
	// rollback detected: true
	// integrity error: true
}

// VerifyChain checks every link of the chain against the anchor, replays
// the scopes' fence state, and checks the state digest, without changing
// anything; problems are in the report, not in the error.
func ExampleVerifyChain() {
	x := newExampleReceiver()
	defer x.close()
	x.activate()
	_, err := x.r.Submit(context.Background(), "worker-a", x.envelope)
	must(err)
	x.r.Close()
	x.r = nil

	rep, err := kvfence.VerifyChain(x.path, kvfence.VerifyOptions{Anchor: x.anchor,
		PublicKey: x.key.Public().(ed25519.PublicKey)})
	must(err)
	fmt.Println(rep.Problem, "entries", rep.Entries, "anchored at", rep.Anchor.Seq)
	// Output:
	// ok entries 5 anchored at 5
}

// A request is canonical CBOR; the decoder accepts exactly one spelling of
// it, so the digest a grant binds names exactly one request.
func ExampleEncodeRequest() {
	value := []byte(`{"data":{"retention_days":"45"}}`)
	req, err := kvfence.EncodeRequest(&kvfence.Request{V: kvfence.WireVersion, Action: "raise-retention",
		Target: exampleScope, Set: &value})
	must(err)
	back, err := kvfence.DecodeRequest(req, 0)
	must(err)
	fmt.Println(back.Action, back.Target, string(*back.Set))

	_, err = kvfence.DecodeRequest(append(req, 0), 0) // one trailing byte
	fmt.Println("trailing byte refused:", errors.Is(err, kvfence.ErrMalformedRequest))
	// Output:
	// raise-retention configmap/prod/backup-policy {"data":{"retention_days":"45"}}
	// trailing byte refused: true
}

// A running receiver verifies its own chain, state and anchor while it
// serves, from one read transaction. The answer is its own word; a copy
// verified elsewhere with VerifyChain is the independent check.
func ExampleReceiver_VerifyOnline() {
	x := newExampleReceiver()
	defer x.close()
	x.activate()
	rep, err := x.r.VerifyOnline(context.Background())
	must(err)
	fmt.Println(rep.Problem, "head", rep.Head.Seq, "anchor", rep.Anchor.Seq)
	// Output:
	// ok head 4 anchor 4
}

// A long task keeps its grant by extension instead of a new activation:
// the end moves to now plus the TTL, never past the activation plus the
// scope's maximum (24h by default), and never once a hold has fenced the
// grant.
func ExampleAdmin_ExtendGrant() {
	x := newExampleReceiver()
	defer x.close()
	x.activate()
	ctx := context.Background()

	g, err := x.admin.ExtendGrant(ctx, kvfence.ExtendRequest{Grant: x.grant.ID, TTL: time.Hour})
	must(err)
	fmt.Println("valid for another", g.NotAfter.Sub(x.r.Now()).Round(time.Minute))

	_, err = x.admin.ExtendGrant(ctx, kvfence.ExtendRequest{Grant: x.grant.ID, TTL: 25 * time.Hour})
	fmt.Println(errors.Is(err, kvfence.ErrTTLTooLong))

	_, err = x.admin.Hold(ctx, kvfence.HoldRequest{Scopes: []string{exampleScope}, Reason: "lease lost"})
	must(err)
	_, err = x.admin.ExtendGrant(ctx, kvfence.ExtendRequest{Grant: x.grant.ID, TTL: time.Hour})
	fmt.Println(errors.Is(err, kvfence.ErrGrantNotActive))
	// Output:
	// valid for another 1h0m0s
	// true
	// true
}
