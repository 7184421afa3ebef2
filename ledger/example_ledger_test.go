package ledger_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/ledger"
)

// exampleLedger is a ledger in a temporary directory with one approved
// action, on a clock the example moves by hand.
type exampleLedger struct {
	dir    string
	path   string
	anchor audit.FileAnchor
	key    ed25519.PrivateKey
	now    time.Time
	l      *ledger.Ledger
}

// newExampleLedger initialises and opens a ledger and approves the action
// "raise-retention" for an hour.
func newExampleLedger() *exampleLedger {
	dir, err := os.MkdirTemp("", "ledger-example")
	if err != nil {
		log.Fatal(err)
	}
	x := &exampleLedger{dir: dir, path: filepath.Join(dir, "ledger.db"),
		anchor: audit.FileAnchor{Path: filepath.Join(dir, "ledger.anchor")},
		key:    ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)),
		now:    time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	if err := ledger.Init(x.path, &ledger.InitOptions{LedgerID: "ledger-1", Key: x.key, Anchor: x.anchor,
		Now: x.clock}); err != nil {
		log.Fatal(err)
	}
	x.open()
	_, err = x.l.Approve(context.Background(), ledger.ApproveRequest{Action: "raise-retention",
		RequestSHA256: sha256.Sum256([]byte("the exact approved request bytes")), Approver: "alice", TTL: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	return x
}

// clock is the ledger's clock.
func (x *exampleLedger) clock() time.Time { return x.now }

// open opens the ledger with its anchor, key and clock.
func (x *exampleLedger) open() {
	l, err := ledger.Open(x.path, &ledger.Options{Key: x.key, Anchor: x.anchor, Now: x.clock})
	if err != nil {
		log.Fatal(err)
	}
	x.l = l
}

// close closes the ledger and removes its directory.
func (x *exampleLedger) close() {
	x.l.Close()
	os.RemoveAll(x.dir)
}

// A worker that restarts and claims again gets its own claim back. Another
// worker cannot claim the action, not even after the first worker's lease
// has expired: only an operator's takeover moves a claim.
func ExampleLedger_Claim() {
	x := newExampleLedger()
	defer x.close()
	ctx := context.Background()

	a, err := x.l.Claim(ctx, ledger.ClaimRequest{Action: "raise-retention", Worker: "worker-a", Lease: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-a:", a.State, "generation", a.Generation, "resumed", a.Resumed)

	x.l.Close() // worker-a's process restarts
	x.open()
	again, err := x.l.Claim(ctx, ledger.ClaimRequest{Action: "raise-retention", Worker: "worker-a"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-a again:", again.State, "same claim", again.Ref == a.Ref, "resumed", again.Resumed)

	x.now = x.now.Add(time.Hour) // the lease has long expired
	_, err = x.l.Claim(ctx, ledger.ClaimRequest{Action: "raise-retention", Worker: "worker-b"})
	fmt.Println("worker-b refused:", errors.Is(err, ledger.ErrClaimed), "lease expired:", a.LeaseExpired(x.now))
	// Output:
	// worker-a: claimed generation 1 resumed false
	// worker-a again: claimed same claim true resumed true
	// worker-b refused: true lease expired: true
}

// A takeover supersedes the live claim, which stays uncertain until an
// operator finds out what its worker did and reconciles it.
func ExampleLedger_Takeover() {
	x := newExampleLedger()
	defer x.close()
	ctx := context.Background()

	a, err := x.l.Claim(ctx, ledger.ClaimRequest{Action: "raise-retention", Worker: "worker-a"})
	if err != nil {
		log.Fatal(err)
	}
	b, err := x.l.Takeover(ctx, ledger.TakeoverRequest{Action: "raise-retention", Operator: "op",
		Reason: "worker-a paused", Worker: "worker-b"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-b:", b.State, "generation", b.Generation)

	view, err := x.l.Action("raise-retention")
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range view.Claims {
		fmt.Println(c.Worker, c.State, "live:", c.Ref == view.Live)
	}

	_, err = x.l.Dispatch(ctx, a.Ref, "worker-a")
	fmt.Println("worker-a superseded:", errors.Is(err, ledger.ErrSuperseded))

	settled, err := x.l.Reconcile(ctx, a.Ref, "op", ledger.StateFailed)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-a reconciled:", settled.State, "by", settled.ReconciledBy)
	// Output:
	// worker-b: claimed generation 2
	// worker-a uncertain live: false
	// worker-b claimed live: true
	// worker-a superseded: true
	// worker-a reconciled: failed by op
}
