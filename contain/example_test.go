package contain_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/contain"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
)

// Example contains an action at a receiver on this host after its
// worker paused, then activates the successor once the superseded claim
// is reconciled.
func Example() {
	dir, _ := os.MkdirTemp("", "contain-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	seed := func(b byte) ed25519.PrivateKey {
		s := make([]byte, ed25519.SeedSize)
		s[0] = b
		return ed25519.NewKeyFromSeed(s)
	}

	// A receiver with one scope and target, not kept open.
	rkey, db, ranchor := seed(1), filepath.Join(dir, "r1.db"), filepath.Join(dir, "r1.anchor")
	kvfence.Init(db, &kvfence.InitOptions{ReceiverID: "recv-1", Key: rkey, Anchor: audit.FileAnchor{Path: ranchor}})
	r, _ := kvfence.Open(db, &kvfence.Options{Key: rkey, Anchor: audit.FileAnchor{Path: ranchor}})
	r.Admin().CreateScope(ctx, "payments")
	r.Admin().CreateTarget(ctx, "payments", "limit", []byte("100"))
	r.Close()

	// The ledger: the receiver registered with its key pinned, the action
	// approved with its boundary, claimed by worker-a, taken over.
	lkey, lpath := seed(2), filepath.Join(dir, "ledger.db")
	lanchor := audit.FileAnchor{Path: filepath.Join(dir, "ledger.anchor")}
	ledger.Init(lpath, &ledger.InitOptions{LedgerID: "ledger-1", Key: lkey, Anchor: lanchor})
	l, _ := ledger.Open(lpath, &ledger.Options{Key: lkey, Anchor: lanchor})
	defer l.Close()
	l.AddReceiver(ctx, ledger.AddReceiverRequest{Name: "r1", DB: db, Anchor: ranchor, ReceiverID: "recv-1",
		PublicKey: rkey.Public().(ed25519.PublicKey), Operator: "alice"})
	v := []byte("200")
	req, _ := kvfence.EncodeRequest(&kvfence.Request{V: kvfence.WireVersion, Action: "raise-limit", Target: "limit", Set: &v})
	l.Approve(ctx, ledger.ApproveRequest{Action: "raise-limit", Request: req, Approver: "alice", TTL: time.Hour,
		Boundaries: []ledger.Boundary{{Receiver: "r1", Scope: "payments"}}})
	a, _ := l.Claim(ctx, ledger.ClaimRequest{Action: "raise-limit", Worker: "worker-a"})
	b, _ := l.Takeover(ctx, ledger.TakeoverRequest{Action: "raise-limit", Operator: "alice", Worker: "worker-b", Reason: "worker-a paused"})

	co, _ := contain.New(contain.Options{Ledger: l, Timeout: 5 * time.Second,
		Dial: func(ctx context.Context, r ledger.Receiver) (contain.Boundary, error) {
			return contain.Local(contain.LocalOptions{DB: r.DB, Anchor: r.Anchor, Key: rkey})
		}})
	rec, err := co.Contain(ctx, contain.ContainRequest{Action: "raise-limit", Reason: "worker-a paused", Operator: "alice"})
	fmt.Println(rec.State, rec.Boundaries[0].Result, rec.Boundaries[0].InstalledEpoch, err)

	_, err = co.Activate(ctx, contain.ActivateRequest{Action: "raise-limit", Executor: "worker-b", Claim: b.Ref, Request: req, Decision: "review-7"})
	fmt.Println("before reconcile:", err != nil)

	l.Reconcile(ctx, a.Ref, "alice", ledger.StateFailed)
	res, err := co.Activate(ctx, contain.ActivateRequest{Action: "raise-limit", Executor: "worker-b", Claim: b.Ref, Request: req, Decision: "review-7"})
	fmt.Println("activated:", len(res.Activated), "at epoch", res.Activated[0].Epoch, err)
	// Output:
	// full acknowledged 2 <nil>
	// before reconcile: true
	// activated: 1 at epoch 2 <nil>
}
