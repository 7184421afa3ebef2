package ledger_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/ledger"
)

// Example shows an approval, a claim, a second worker refused while the
// first holds the claim, and an operator's takeover.
func Example() {
	dir, _ := os.MkdirTemp("", "ledger-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ledger.db")
	anchor := audit.FileAnchor{Path: filepath.Join(dir, "ledger.anchor")} // administered apart from the file
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	if err := ledger.Init(path, &ledger.InitOptions{LedgerID: "ledger-1", Key: key, Anchor: anchor}); err != nil {
		panic(err)
	}
	l, err := ledger.Open(path, &ledger.Options{Key: key, Anchor: anchor})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	ctx := context.Background()
	request := []byte("the exact approved request bytes")
	l.Approve(ctx, ledger.ApproveRequest{Action: "raise-retention", RequestSHA256: sha256.Sum256(request), Approver: "alice", TTL: 3600e9})

	a, _ := l.Claim(ctx, ledger.ClaimRequest{Action: "raise-retention", Worker: "worker-a"})
	fmt.Println("worker-a:", a.State, "generation", a.Generation)

	_, err = l.Claim(ctx, ledger.ClaimRequest{Action: "raise-retention", Worker: "worker-b"})
	fmt.Println("worker-b refused:", errors.Is(err, ledger.ErrClaimed))

	b, _ := l.Takeover(ctx, ledger.TakeoverRequest{Action: "raise-retention", Operator: "op", Worker: "worker-b", Reason: "worker-a paused"})
	fmt.Println("worker-b:", b.State, "generation", b.Generation)

	_, err = l.Dispatch(ctx, a.Ref, "worker-a")
	fmt.Println("worker-a superseded:", errors.Is(err, ledger.ErrSuperseded))
	// Output:
	// worker-a: claimed generation 1
	// worker-b refused: true
	// worker-b: claimed generation 2
	// worker-a superseded: true
}
