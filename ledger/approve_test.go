package ledger

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/kvfence/kvfence/audit"
)

// requestBytes encodes a set request for action as the receiver does
// (canonical CBOR), without importing the receiver.
func requestBytes(t testing.TB, action string) []byte {
	t.Helper()
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := em.Marshal(map[string]any{"v": 1, "action": action, "target": "cm/backup", "set": []byte("45")})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Ensure that Approve binds an approval to the action its request bytes
// name: another action is refused as ErrActionMismatch (a refusal), bytes
// that are not a request or a digest that is not theirs as
// ErrInvalidArgument, and none of them writes anything.
func TestApprove_ActionMustMatchRequest(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	defer l.Close()
	req := requestBytes(t, "act-3")
	head := l.Head()
	for _, tc := range []struct {
		name string
		ar   ApproveRequest
		want error
	}{
		{"another action", ApproveRequest{Action: "act-X", Request: req}, ErrActionMismatch},
		{"another action, digest given too", ApproveRequest{Action: "act-X", Request: req, RequestSHA256: sha256.Sum256(req)}, ErrActionMismatch},
		{"not a request", ApproveRequest{Action: "act-3", Request: []byte("act-3")}, ErrInvalidArgument},
		{"empty request", ApproveRequest{Action: "act-3", Request: []byte{}}, ErrInvalidArgument},
		{"digest of other bytes", ApproveRequest{Action: "act-3", Request: req, RequestSHA256: sha256.Sum256([]byte("other"))}, ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ar.Approver, tc.ar.TTL = "alice", time.Hour
			_, err := l.Approve(ctx, tc.ar)
			if !errors.Is(err, tc.want) || IsRefusal(err) != (tc.want == ErrActionMismatch) {
				t.Fatalf("Approve = %v, want %v", err, tc.want)
			}
			if tc.want == ErrActionMismatch && !strings.Contains(err.Error(), `"act-3"`) {
				t.Fatalf("the refusal does not name the request's action: %v", err)
			}
			if h := l.Head(); h != head {
				t.Fatalf("a refused approval moved the chain from %d to %d", head.Seq, h.Seq)
			}
			if _, err := l.Action(tc.ar.Action); !errors.Is(err, ErrNotFound) {
				t.Fatalf("a refused approval was recorded: %v", err)
			}
		})
	}
	a, err := l.Approve(ctx, ApproveRequest{Action: "act-3", Request: req, Approver: "alice", TTL: time.Hour})
	if err != nil || !a.ActionChecked || a.RequestSHA256 != sha256.Sum256(req) {
		t.Fatalf("Approve of the request's own action = %+v, %v", a, err)
	}
	// By digest alone the ledger cannot read the action, and says so.
	d, err := l.Approve(ctx, ApproveRequest{Action: "act-4", RequestSHA256: sha256.Sum256(req), Approver: "alice", TTL: time.Hour})
	if err != nil || d.ActionChecked {
		t.Fatalf("Approve by digest = %+v, %v; want an approval marked unchecked", d, err)
	}
	v, err := l.Action("act-3")
	if err != nil || !v.Approval.ActionChecked {
		t.Fatalf("stored approval = %+v, %v", v.Approval, err)
	}
}

// Ensure that a claim that is no longer live reports no lease, that a
// takeover's time stays the superseded claim's settled_at, and that a
// reconciliation records its own time.
func TestReconcile_RecordsItsTime(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	defer l.Close()
	approve(t, l, "act")
	old := mustClaim(t, l, "act", "worker-a")
	if old.LeaseExpiresAt.IsZero() {
		t.Fatalf("a live claim reports no lease: %+v", old)
	}
	f.clock.Advance(time.Minute)
	takeoverAt := f.clock.Now()
	nc, err := l.Takeover(ctx, TakeoverRequest{Action: "act", Operator: "op", Reason: "worker-a paused", Worker: "worker-b"})
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Hour)
	reconcileAt := f.clock.Now()
	r, err := l.Reconcile(ctx, old.Ref, "op", StateFailed)
	if err != nil {
		t.Fatal(err)
	}
	if !r.ReconciledAt.Equal(reconcileAt) || !r.SettledAt.Equal(takeoverAt) || !r.LeaseExpiresAt.IsZero() {
		t.Fatalf("reconciled claim: reconciled %s (want %s), settled %s (want %s), lease %s (want none)",
			r.ReconciledAt, reconcileAt, r.SettledAt, takeoverAt, r.LeaseExpiresAt)
	}
	if _, err := l.Dispatch(ctx, nc.Ref, "worker-b"); err != nil {
		t.Fatal(err)
	}
	done, err := l.Finish(ctx, nc.Ref, "worker-b", StateSucceeded)
	if err != nil || !done.LeaseExpiresAt.IsZero() || !done.ReconciledAt.IsZero() {
		t.Fatalf("finished claim = %+v, %v; want no lease and no reconciliation", done, err)
	}
	v, err := l.Action("act")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range v.Claims {
		if !c.LeaseExpiresAt.IsZero() || c.LeaseExpired(f.clock.Now()) {
			t.Fatalf("settled claim %s (%s) reports a lease: %s", c.Ref, c.State, c.LeaseExpiresAt)
		}
	}
	if !v.Claims[0].ReconciledAt.Equal(reconcileAt) {
		t.Fatalf("stored reconciled_at = %s, want %s", v.Claims[0].ReconciledAt, reconcileAt)
	}
}

// Ensure that Events lists the ledger's chain in order with the claim ref
// and generation, from a given seq on, and stops when told.
func TestEvents(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	defer l.Close()
	approve(t, l, "act")
	c := mustClaim(t, l, "act", "worker-a")
	var kinds []string
	var last Event
	if err := l.Events(0, func(e Event) bool { kinds = append(kinds, e.Entry.Kind); last = e; return true }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(kinds, ",") != "init,approve,claim" || last.Entry.Decision != c.Ref || last.Entry.Epoch != 1 ||
		last.Entry.Executor != "worker-a" || last.Hash != l.Head().Hash {
		t.Fatalf("events %v, last %+v", kinds, last.Entry)
	}
	var seqs []uint64
	if err := l.Events(2, func(e Event) bool { seqs = append(seqs, e.Entry.Seq); return len(seqs) < 1 }); err != nil || len(seqs) != 1 || seqs[0] != 2 {
		t.Fatalf("events since 2, first only: %v, %v", seqs, err)
	}
}

// Ensure that VerifyChain reports a sound ledger ok and a restored copy,
// another key and a missing anchor as the receiver's verify-chain would,
// without changing the file.
func TestVerifyChain(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	approve(t, l, "act")
	l.Close()
	backup := f.path + ".backup"
	copyFile(t, backup, f.path)
	l = f.open()
	mustClaim(t, l, "act", "worker-a")
	l.Close()
	pub := f.key.Public().(ed25519.PublicKey)
	other := ed25519.NewKeyFromSeed(sha256.New().Sum(nil)).Public().(ed25519.PublicKey)
	check := func(name string, path string, opts VerifyOptions, want audit.Problem) {
		t.Helper()
		before, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := VerifyChain(path, opts)
		if err != nil || rep.Problem != want {
			t.Fatalf("%s: %+v, %v; want %s", name, rep, err, want)
		}
		if after, _ := os.ReadFile(path); string(after) != string(before) {
			t.Fatalf("%s: VerifyChain changed the file", name)
		}
	}
	check("sound", f.path, VerifyOptions{Anchor: f.anchor, PublicKey: pub}, audit.ProblemOK)
	check("other key", f.path, VerifyOptions{Anchor: f.anchor, PublicKey: other}, audit.ProblemBadSignature)
	check("no anchor", f.path, VerifyOptions{Anchor: audit.FileAnchor{Path: f.anchor.Path + ".none"}, PublicKey: pub}, audit.ProblemAnchorMissing)
	check("restored copy", backup, VerifyOptions{Anchor: f.anchor, PublicKey: pub}, audit.ProblemRollbackDetected)
	if rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: pub}); err != nil || rep.Entries != 3 || rep.Head != rep.Anchor {
		t.Fatalf("sound ledger: %+v, %v; want 3 entries up to the anchor", rep, err)
	}
	if _, err := VerifyChain(f.path+".none", VerifyOptions{Anchor: f.anchor, PublicKey: pub}); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("missing file: %v, want ErrNotInitialized", err)
	}
}
