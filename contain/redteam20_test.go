package contain_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"

	bolt "go.etcd.io/bbolt"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/contain"
	"github.com/kvfence/kvfence/engine/boltengine"

	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
)

// Ensure that a hold planted at a boundary with the id the containment
// will derive, and the reason it will give, before worker A's grant was
// activated there, is not taken for the containment's hold: the receiver
// repeats the planted hold's result, whose epoch A's grant was activated
// at, so A is not fenced by it. The boundary must not read acknowledged,
// and the containment must not read full while A's grant is open.
func TestRedteam20_PlantedHoldBeforeGrant(t *testing.T) {
	w := newWorld(t, 2)
	ctx := context.Background()
	w.beforeActivate = func(sc *scenario) {
		b := sc.bounds[0]
		id := ledger.HoldID(ledger.ContainmentID("ledger-1", sc.action, sc.claimA.Ref), b.Receiver, b.Scope)
		if _, err := w.byName[b.Receiver].r.Admin().Hold(ctx, kvfence.HoldRequest{Scopes: []string{b.Scope},
			Reason: "worker-a paused", ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	sc := w.newScenario(2)
	w.beforeActivate = nil
	b := sc.bounds[0]
	if st := w.status(b); st.Grant == nil || st.Grant.Claim != sc.claimA.Ref {
		t.Fatalf("setup: A's grant is not open at %s: %+v", b, st)
	}
	co := w.coordinator(testTimeout)
	rec := mustContain(t, co, sc)
	st := w.status(b)
	open := st.Grant != nil && st.Grant.Claim == sc.claimA.Ref
	if rec.Boundaries[0].Result == ledger.BoundaryAcknowledged || rec.State == ledger.ContainmentFull {
		t.Fatalf("containment %s, boundary %s %s at epoch %d, while A's grant is open there: %v", rec.State, b,
			rec.Boundaries[0].Result, rec.Boundaries[0].InstalledEpoch, open)
	}
	// A rerun neither acknowledges it nor issues a second generation.
	epoch := st.Epoch
	rec = mustContain(t, co, sc)
	if rec.State == ledger.ContainmentFull || w.status(b).Epoch != epoch {
		t.Fatalf("rerun: %s, epoch %d then %d", rec.State, epoch, w.status(b).Epoch)
	}
	w.reconcile(sc)
	if _, err := co.Activate(ctx, w.activateReq(sc)); err == nil {
		t.Fatal("successor activated while A's grant is open")
	}
	if g := w.successorGrants(sc); len(g) != 0 {
		t.Fatalf("successor grants at %v", g)
	}
}

// hostileReceipts is a receiver whose receipts answer is whatever the test
// makes it.
type hostileReceipts struct {
	contain.Boundary
	receipts func(scope string) ([]kvfence.Receipt, error)
}

func (h hostileReceipts) ReceiptsByClaim(ctx context.Context, scope, claim string) ([]kvfence.Receipt, error) {
	return h.receipts(scope)
}

// Ensure that a receiver's receipts answer is recorded only as names that
// print as what they are, and that an answer too large, or none, is not
// recorded as "no outstanding effects": the record says the effects were
// not listed.
func TestRedteam20_HostileReceipts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		receipts func(scope string) ([]kvfence.Receipt, error)
		want     int // effects recorded
	}{
		{"control characters", func(scope string) ([]kvfence.Receipt, error) {
			return []kvfence.Receipt{{Scope: scope, Action: "act\x1b[2J\u202e", Target: "t\n", AuditSeq: 3, At: time.Now()}}, nil
		}, 0},
		{"too many", func(scope string) ([]kvfence.Receipt, error) {
			rs := make([]kvfence.Receipt, ledger.MaxOutstanding+1)
			for i := range rs {
				rs[i] = kvfence.Receipt{Scope: scope, Action: fmt.Sprintf("a%d", i), Target: "t", AuditSeq: uint64(i + 1), At: time.Now()}
			}
			return rs, nil
		}, ledger.MaxOutstanding},
		{"failed", func(scope string) ([]kvfence.Receipt, error) { return nil, errors.New("connection reset") }, 0},
		{"other scope", func(scope string) ([]kvfence.Receipt, error) {
			return []kvfence.Receipt{{Scope: scope + "x", Action: "a", Target: "t", AuditSeq: 1}}, nil
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 1)
			sc := w.newScenario(1)
			co, err := contain.New(contain.Options{Ledger: w.l, Timeout: testTimeout,
				Dial: func(ctx context.Context, r ledger.Receiver) (contain.Boundary, error) {
					return hostileReceipts{contain.Embedded(w.byName[r.Name].r), tc.receipts}, nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			rec, err := co.Contain(context.Background(), contain.ContainRequest{Action: sc.action, Reason: "worker-a paused", Operator: "op"})
			if err != nil {
				t.Fatal(err)
			}
			b := rec.Boundaries[0]
			if b.Result != ledger.BoundaryAcknowledged || len(b.Outstanding) != tc.want {
				t.Fatalf("%s with %d effects", b.Result, len(b.Outstanding))
			}
			for _, e := range b.Outstanding {
				for _, s := range []string{e.Action, e.Target} {
					if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) }) {
						t.Fatalf("recorded effect name %q", s)
					}
				}
			}
			if b.ObservationError == "" {
				t.Fatalf("effects not listed, and the record does not say so: %+v", b)
			}
		})
	}
}

// reopenLedger closes the world's ledger, lets edit change its file, and
// opens it again.
func (w *world) reopenLedger(edit func(db *bolt.DB)) {
	t := w.t
	if err := w.l.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(w.lpath, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	edit(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	e, err := boltengine.OpenFile(w.lpath, boltengine.FileOptions{NoSync: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if w.l, err = ledger.OpenEngine(e, &ledger.Options{Key: w.lkey, Anchor: w.lanchor}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.l.Close() })
}

// Ensure that an approval whose request digest was edited in the ledger's
// file does not let the successor be activated with a request other than
// the one approved: nothing is activated anywhere.
func TestRedteam20_ApprovalDigestEdited(t *testing.T) {
	w := newWorld(t, 2)
	sc := w.newScenario(2)
	if rec := mustContain(t, w.coordinator(testTimeout), sc); rec.State != ledger.ContainmentFull {
		t.Fatalf("state %s", rec.State)
	}
	w.reconcile(sc)
	v := []byte("mallory's value")
	other, err := kvfence.EncodeRequest(&kvfence.Request{V: kvfence.WireVersion, Action: sc.action, Target: "t-1", Set: &v})
	if err != nil {
		t.Fatal(err)
	}
	w.reopenLedger(func(db *bolt.DB) {
		if err := db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("approvals"))
			raw := b.Get([]byte(sc.action))
			old, sum := sha256.Sum256(sc.request), sha256.Sum256(other)
			i := bytes.Index(raw, old[:])
			if i < 0 {
				return errors.New("approval has no request digest")
			}
			edited := append([]byte(nil), raw...)
			copy(edited[i:], sum[:])
			return b.Put([]byte(sc.action), edited)
		}); err != nil {
			t.Fatal(err)
		}
	})
	co := w.coordinator(testTimeout)
	req := w.activateReq(sc)
	req.Request = other
	if _, err := co.Activate(context.Background(), req); err == nil {
		t.Fatal("successor activated with a request the approval's entry does not name")
	}
	if g := w.successorGrants(sc); len(g) != 0 {
		t.Fatalf("successor grants at %v", g)
	}
}

// Ensure that a successor activated twice, or after a hold by someone
// else, never leaves a boundary open at an epoch other than the one the
// containment installed, and that contain rerun after activation issues
// no new generation.
func TestRedteam20_ActivateTwiceAndRaces(t *testing.T) {
	w := newWorld(t, 2)
	sc := w.newScenario(2)
	co := w.coordinator(testTimeout)
	rec := mustContain(t, co, sc)
	w.reconcile(sc)
	ctx := context.Background()
	if _, err := co.Activate(ctx, w.activateReq(sc)); err != nil {
		t.Fatal(err)
	}
	res, err := co.Activate(ctx, w.activateReq(sc))
	t.Logf("second activation: %v, %d activated", err, len(res.Activated))
	for i, b := range sc.bounds {
		st := w.status(b)
		if st.Epoch != rec.Boundaries[i].InstalledEpoch || st.Grant == nil || st.Grant.Claim != sc.claimB.Ref {
			t.Fatalf("%s after two activations: epoch %d (installed %d), grant %+v", b, st.Epoch, rec.Boundaries[i].InstalledEpoch, st.Grant)
		}
	}
	if again := mustContain(t, co, sc); again.State != ledger.ContainmentFull {
		t.Fatalf("rerun after activation: %s", again.State)
	}
	for i, b := range sc.bounds {
		if st := w.status(b); st.Epoch != rec.Boundaries[i].InstalledEpoch {
			t.Fatalf("%s: rerun moved the epoch to %d", b, st.Epoch)
		}
	}
	// Someone else holds boundary 0: a further activation is refused
	// there, and the successor's grant at boundary 1 is the only one open.
	b0 := sc.bounds[0]
	if _, err := w.byName[b0.Receiver].r.Admin().Hold(ctx, kvfence.HoldRequest{Scopes: []string{b0.Scope}, Reason: "other"}); err != nil {
		t.Fatal(err)
	}
	if _, err := co.Activate(ctx, w.activateReq(sc)); !errors.Is(err, contain.ErrActivationIncomplete) {
		t.Fatalf("activation after another hold: %v", err)
	}
	if st := w.status(b0); st.Grant != nil {
		t.Fatalf("%s open after another hold: %+v", b0, st.Grant)
	}
}

// hostileActivate is a receiver whose activation refusal is whatever the
// test makes it.
type hostileActivate struct {
	contain.Boundary
	err error
}

func (h hostileActivate) Activate(ctx context.Context, req kvfence.ActivateRequest) (kvfence.Grant, error) {
	return kvfence.Grant{}, h.err
}

// Ensure that a receiver's refusal of a successor's activation reaches the
// result, which the CLI prints, as printable and bounded text: a served
// receiver chooses its error's code and message.
func TestRedteam20_HostileActivateRefusal(t *testing.T) {
	w := newWorld(t, 1)
	sc := w.newScenario(1)
	if rec := mustContain(t, w.coordinator(testTimeout), sc); rec.State != ledger.ContainmentFull {
		t.Fatalf("state %s", rec.State)
	}
	w.reconcile(sc)
	hostile := &client.Error{Status: 409, Code: "epoch_mismatch\x1b[2J", Message: "\x1b]0;owned\x07\u202e" + strings.Repeat("x\n", 1<<15)}
	co, err := contain.New(contain.Options{Ledger: w.l, Timeout: testTimeout,
		Dial: func(ctx context.Context, r ledger.Receiver) (contain.Boundary, error) {
			return hostileActivate{contain.Embedded(w.byName[r.Name].r), hostile}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := co.Activate(context.Background(), w.activateReq(sc))
	if !errors.Is(err, contain.ErrActivationIncomplete) || len(res.NotActivated) != 1 {
		t.Fatalf("%v %+v", err, res)
	}
	o := res.NotActivated[0]
	bad := func(s string) bool {
		return len(s) > 1024 || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) })
	}
	if bad(o.Code) || bad(o.Error) {
		t.Fatalf("outcome code %q, error of %d bytes: %.80q", o.Code, len(o.Error), o.Error)
	}
}

// Ensure that one receiver cannot answer for another: a receiver
// registered under the id of another, with its own key, whose endpoint is
// in fact the other receiver's, gets that receiver's real, signed answer,
// which does not verify under its pinned key; the containment is not full.
func TestRedteam20_BoundaryAnswersForAnother(t *testing.T) {
	w := newWorld(t, 2)
	ctx := context.Background()
	r1 := w.byName["r1"]
	if _, err := w.l.AddReceiver(ctx, ledger.AddReceiverRequest{Name: "r1-alias", Server: "https://r1.example:8443",
		ReceiverID: "receiver-r1", PublicKey: key(77).Public().(ed25519.PublicKey), Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.l.AddReceiver(ctx, ledger.AddReceiverRequest{Name: "r1-again", Server: "https://r1.example:8443",
		ReceiverID: "receiver-r1", PublicKey: r1.priv.Public().(ed25519.PublicKey), Operator: "op"}); !errors.Is(err, ledger.ErrReceiverKeyPinned) {
		t.Fatalf("r1 registered again under another name: %v", err)
	}
	scope := "s-alias"
	if _, err := r1.r.Admin().CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	// The action names the alias, whose endpoint is r1.
	v := []byte("v")
	req, _ := kvfence.EncodeRequest(&kvfence.Request{V: kvfence.WireVersion, Action: "alias-act", Target: "t", Set: &v})
	if _, err := w.l.Approve(ctx, ledger.ApproveRequest{Action: "alias-act", Request: req, Approver: "alice", TTL: time.Hour,
		Boundaries: []ledger.Boundary{{Receiver: "r1-alias", Scope: scope}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.l.Claim(ctx, ledger.ClaimRequest{Action: "alias-act", Worker: "worker-a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.l.Takeover(ctx, ledger.TakeoverRequest{Action: "alias-act", Operator: "op", Worker: "worker-b", Reason: "x"}); err != nil {
		t.Fatal(err)
	}
	co, err := contain.New(contain.Options{Ledger: w.l, Timeout: testTimeout,
		Dial: func(ctx context.Context, r ledger.Receiver) (contain.Boundary, error) {
			return contain.Embedded(r1.r), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := co.Contain(ctx, contain.ContainRequest{Action: "alias-act", Reason: "x", Operator: "op"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != ledger.ContainmentNone || rec.Boundaries[0].Result != ledger.BoundaryUnverified {
		t.Fatalf("r1 answering for r1-alias: %s %+v", rec.State, rec.Boundaries[0])
	}
}

// Ensure that a hold planted between runs, with the id the record shows
// and the containment's reason, at a boundary the first run could not
// reach, and a grant for the superseded worker activated after it, do not
// read as that boundary's containment on the rerun.
func TestRedteam20_PlantedHoldBetweenRuns(t *testing.T) {
	w := newWorld(t, 2)
	ctx := context.Background()
	sc := w.newScenario(2)
	fs := w.installFaults(sc, faultNone, faultDown)
	co := w.coordinator(testTimeout)
	rec := mustContain(t, co, sc)
	if rec.State != ledger.ContainmentPartial {
		t.Fatalf("first run: %s", rec.State)
	}
	b := rec.Boundaries[1]
	r := w.byName[b.Receiver].r
	if _, err := r.Admin().Hold(ctx, kvfence.HoldRequest{Scopes: []string{b.Scope}, Reason: rec.Reason, ID: b.HoldID}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admin().Activate(ctx, kvfence.ActivateRequest{Scope: b.Scope, Executor: "worker-a", Claim: sc.claimA.Ref,
		Request: sc.request, Decision: "again"}); err != nil {
		t.Fatal(err)
	}
	fs[b.Receiver].set(faultNone)
	rec = mustContain(t, co, sc)
	if rec.State == ledger.ContainmentFull || rec.Boundaries[1].Result == ledger.BoundaryAcknowledged {
		t.Fatalf("rerun: %s, %s %s", rec.State, b.Receiver, rec.Boundaries[1].Result)
	}
}
