package ledger

import (
	"errors"
	"testing"
	"time"
)

// Ensure that a witnessed ledger still opens with its witnesses after
// one honest open without them (a command run without
// $KVFENCE_LEDGER_WITNESS). Scenario: the anchor alone is put back from
// before a cosigned approval; the open without witnesses moves it up by
// signing the head again (update with no entry) at the size the witnesses
// cosigned, with a later time; every open with witnesses is then a fork,
// for ever. anchorStoreHead reuses the store's checkpoint; the refresh
// without witnesses does not.
func TestRedteamQ_LedgerOpenWithoutWitnessesResignsCosignedSize(t *testing.T) {
	w := newWitnessed(t)
	l := w.open()
	approve(t, l, "before")
	l.Close()
	anchorCopy := w.anchor.Path + ".backup"
	copyFile(t, anchorCopy, w.anchor.Path)
	l = w.open()
	approve(t, l, "after")
	l.Close()
	copyFile(t, w.anchor.Path, anchorCopy)
	w.clock.Advance(time.Minute)
	l, err := Open(w.path, w.fixture.opts())
	if err != nil {
		t.Fatalf("open without witnesses after the anchor alone was restored: %v", err)
	}
	l.Close()
	l, err = Open(w.path, w.opts())
	if err != nil {
		t.Fatalf("open with witnesses after an honest open without them: %v", err)
	}
	l.Close()
}

// Ensure that a resumed claim (the worker claims again after a restart)
// is returned only once K witnesses cosigned a checkpoint covering the
// claim. Scenario: two of three witnesses are down; the worker's claim
// commits and is anchored but not cosigned (ErrNotAcknowledged); the
// worker retries, Claim finds its own live claim and returns it with
// Resumed set, writing nothing, so no round runs: the worker holds a
// claim no witness has seen, and a restore of file and anchor from
// before it (which the witnesses cannot catch) hands the action to
// another worker as well.
func TestRedteamQ_LedgerResumedClaimAcknowledgedWithoutCosign(t *testing.T) {
	w := newWitnessed(t)
	l := w.open()
	defer func() { l.Close() }()
	approve(t, l, "act-1")
	w.down(0, 1)
	defer w.up()
	req := ClaimRequest{Action: "act-1", Worker: "worker-a"}
	if _, err := l.Claim(ctx, req); !errors.Is(err, ErrNotAcknowledged) {
		t.Fatalf("claim with one witness of three up: %v, want ErrNotAcknowledged", err)
	}
	c, err := l.Claim(ctx, req)
	if err != nil {
		return // refused: holds up
	}
	head := l.Head().Seq
	l.Close()
	w.up()
	if n := atLeast(w.sizes(), head); n < 2 {
		t.Fatalf("claim %s returned (resumed %v) with %d witnesses at the head %d (sizes %v)", c.Ref, c.Resumed, n, head, w.sizes())
	}
	l = w.open()
}
