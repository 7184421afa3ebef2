package contain_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/contain"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
)

const testTimeout = 2 * time.Second

func mustContain(t *testing.T, co *contain.Coordinator, sc *scenario) ledger.Containment {
	t.Helper()
	rec, err := co.Contain(context.Background(), contain.ContainRequest{Action: sc.action, Reason: "worker-a paused", Operator: "op"})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func results(rec ledger.Containment) []ledger.BoundaryResult {
	var out []ledger.BoundaryResult
	for _, b := range rec.Boundaries {
		out = append(out, b.Result)
	}
	return out
}

// Ensure that a hold whose answer was lost is repeated, not reissued, on
// the rerun: every boundary's epoch advances once, the rerun
// acknowledges with the first hold's epoch, and a third run sends
// nothing.
func TestContain_RerunIssuesNoNewGeneration(t *testing.T) {
	w := newWorld(t, 2)
	sc := w.newScenario(2)
	fs := w.installFaults(sc, faultLost, faultSlowAfter)
	co := w.coordinator(200 * time.Millisecond)
	rec := mustContain(t, co, sc)
	if rec.State != ledger.ContainmentNone || rec.Boundaries[0].Result != ledger.BoundaryUnknown || rec.Boundaries[1].Result != ledger.BoundaryTimeout {
		t.Fatalf("first run: %s %v", rec.State, results(rec))
	}
	for _, f := range fs {
		f.set(faultNone)
	}
	rec = mustContain(t, co, sc)
	if rec.State != ledger.ContainmentFull {
		t.Fatalf("rerun: %s %v", rec.State, results(rec))
	}
	rec = mustContain(t, co, sc)
	for _, b := range rec.Boundaries {
		bd := ledger.Boundary{Receiver: b.Receiver, Scope: b.Scope}
		st := w.status(bd)
		if st.Epoch != sc.before[bd]+1 || b.InstalledEpoch != st.Epoch || b.PreviousEpoch != sc.before[bd] {
			t.Errorf("%v: epoch before %d, now %d, recorded %d -> %d", bd, sc.before[bd], st.Epoch, b.PreviousEpoch, b.InstalledEpoch)
		}
		if b.HoldRequestedAt.IsZero() || b.AcknowledgedAt.IsZero() {
			t.Errorf("%v: times not recorded: %+v", bd, b)
		}
	}
}

// Ensure that an acknowledgment that does not verify under the pinned key
// (re-signed by another receiver's key, its epochs changed, another
// scope's), or that the receiver's own key signed for another hold id (a
// replay from an earlier containment), or whose answer disagrees with it,
// is recorded as unverified, never acknowledged, and that the
// same hold, asked again of an honest answer, is acknowledged with the
// epoch the receiver really installed.
func TestContain_ForgedAcknowledgmentIsUnverified(t *testing.T) {
	for _, f := range []fault{faultForgedKey, faultForgedEpoch, faultForgedScope, faultUnsignedEpoch, faultReplayed} {
		t.Run(f.String(), func(t *testing.T) {
			w := newWorld(t, 2)
			sc := w.newScenario(1)
			fs := w.installFaults(sc, f)
			co := w.coordinator(testTimeout)
			rec := mustContain(t, co, sc)
			b := rec.Boundaries[0]
			if rec.State != ledger.ContainmentNone || b.Result != ledger.BoundaryUnverified || b.InstalledEpoch != 0 {
				t.Fatalf("forged: %s %+v", rec.State, b)
			}
			fs[sc.bounds[0].Receiver].set(faultNone)
			rec = mustContain(t, co, sc)
			b = rec.Boundaries[0]
			if rec.State != ledger.ContainmentFull || b.InstalledEpoch != sc.before[sc.bounds[0]]+1 {
				t.Fatalf("healed: %s %+v", rec.State, b)
			}
		})
	}
}

// Ensure that each way a hold can fail is recorded as what it is.
func TestContain_Results(t *testing.T) {
	w := newWorld(t, 5)
	sc := w.newScenario(5)
	w.installFaults(sc, faultDown, faultSlowBefore, faultLost, faultGarbled, faultNone)
	rec := mustContain(t, w.coordinator(200*time.Millisecond), sc)
	want := []ledger.BoundaryResult{ledger.BoundaryFailed, ledger.BoundaryTimeout, ledger.BoundaryUnknown, ledger.BoundaryUnknown,
		ledger.BoundaryAcknowledged}
	for i, b := range rec.Boundaries {
		if b.Result != want[i] {
			t.Errorf("boundary %d: %s (%s %s), want %s", i, b.Result, b.ErrorCode, b.Error, want[i])
		}
	}
	if rec.State != ledger.ContainmentPartial || rec.Boundaries[0].ErrorCode != "unreachable" {
		t.Fatalf("%s %+v", rec.State, rec.Boundaries[0])
	}
	// A receiver's error text is recorded printable and bounded.
	if e := rec.Boundaries[3].Error; len(e) > 512 || strings.ContainsAny(e, "\x1b\n\x00\u202e") || !strings.Contains(e, "garbage") {
		t.Fatalf("garbled error recorded as %q", e)
	}
}

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		err    error
		result ledger.BoundaryResult
		code   string
	}{
		{kvfence.ErrUnknownScope, ledger.BoundaryFailed, "unknown_scope"},
		{kvfence.ErrHoldIDConflict, ledger.BoundaryFailed, "hold_id_conflict"},
		{client.ErrOutcomeUnknown, ledger.BoundaryUnknown, "outcome_unknown"},
		{kvfence.ErrNotAcknowledged, ledger.BoundaryUnknown, "not_acknowledged"},
		{context.DeadlineExceeded, ledger.BoundaryTimeout, "timeout"},
		{client.ErrProtocol, ledger.BoundaryUnverified, "bad_answer"},
		{errors.New("connection reset"), ledger.BoundaryUnknown, "transport"},
	} {
		r, c := contain.Classify(tt.err)
		if r != tt.result || c != tt.code {
			t.Errorf("%v: %s %s, want %s %s", tt.err, r, c, tt.result, tt.code)
		}
	}
}

// Ensure that a successor is refused, with nothing activated anywhere,
// while the containment is partial, even with the claim reconciled.
func TestActivate_RefusedWhilePartial(t *testing.T) {
	w := newWorld(t, 3)
	sc := w.newScenario(3)
	w.installFaults(sc, faultNone, faultDown, faultNone)
	co := w.coordinator(testTimeout)
	if rec := mustContain(t, co, sc); rec.State != ledger.ContainmentPartial {
		t.Fatalf("%s %v", rec.State, results(rec))
	}
	w.reconcile(sc)
	_, err := co.Activate(context.Background(), w.activateReq(sc))
	if !errors.Is(err, ledger.ErrNotContained) {
		t.Fatalf("activate on partial: %v", err)
	}
	if got := w.successorGrants(sc); len(got) != 0 {
		t.Fatalf("successor activated at %v while partial", got)
	}
}

// Ensure that a successor is refused, with nothing activated anywhere,
// while the superseded claim is not reconciled, even when fully contained.
func TestActivate_RefusedUnreconciled(t *testing.T) {
	w := newWorld(t, 2)
	sc := w.newScenario(2)
	co := w.coordinator(testTimeout)
	if rec := mustContain(t, co, sc); rec.State != ledger.ContainmentFull {
		t.Fatalf("%s %v", rec.State, results(rec))
	}
	_, err := co.Activate(context.Background(), w.activateReq(sc))
	if !errors.Is(err, ledger.ErrNotReconciled) {
		t.Fatalf("activate unreconciled: %v", err)
	}
	if got := w.successorGrants(sc); len(got) != 0 {
		t.Fatalf("successor activated at %v before reconcile", got)
	}
}

// Ensure that the successor must be the action's live claim with the
// approved request: the superseded claim, or other bytes, are refused
// with nothing activated.
func TestActivate_RefusedNotSuccessor(t *testing.T) {
	w := newWorld(t, 1)
	sc := w.newScenario(1)
	co := w.coordinator(testTimeout)
	mustContain(t, co, sc)
	w.reconcile(sc)
	oldClaim := w.activateReq(sc)
	oldClaim.Claim = sc.claimA.Ref
	other := w.activateReq(sc)
	v := []byte("other")
	var err error
	if other.Request, err = kvfence.EncodeRequest(&kvfence.Request{V: kvfence.WireVersion, Action: sc.action, Target: fmt.Sprintf("t-%d", w.n),
		Set: &v}); err != nil {
		t.Fatal(err)
	}
	otherWorker := w.activateReq(sc)
	otherWorker.Executor = "worker-c"
	for name, req := range map[string]contain.ActivateRequest{"superseded claim": oldClaim, "other request": other,
		"executor other than the live claim's worker": otherWorker} {
		if _, err := co.Activate(context.Background(), req); !errors.Is(err, contain.ErrNotSuccessor) {
			t.Errorf("%s: %v", name, err)
		}
		if got := w.successorGrants(sc); len(got) != 0 {
			t.Fatalf("%s: activated at %v", name, got)
		}
		for _, b := range sc.bounds {
			if st := w.status(b); st.ActiveGrant != "" {
				t.Fatalf("%s: %v open under %s", name, b, st.ActiveGrant)
			}
		}
	}
}

// Ensure that a full containment with a reconciled claim activates the
// successor at every acknowledged boundary, at the installed epoch, with a
// decision that names the containment and the superseded claim, skips an
// alternate boundary, and records the grants.
func TestActivate_FullWithAlternate(t *testing.T) {
	w := newWorld(t, 3)
	sc := w.newScenario(3)
	w.installFaults(sc, faultNone, faultNone, faultDown)
	co := w.coordinator(testTimeout)
	mustContain(t, co, sc)
	rec, err := co.Alternate(context.Background(), ledger.AlternateRequest{Action: sc.action, Receiver: sc.bounds[2].Receiver,
		Operator: "op", Reason: "network path cut by the firewall team"})
	if err != nil || rec.State != ledger.ContainmentFullWithAlternate {
		t.Fatalf("alternate: %v %s", err, rec.State)
	}
	w.reconcile(sc)
	res, err := co.Activate(context.Background(), w.activateReq(sc))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Activated) != 2 || len(res.NotActivated) != 1 || res.NotActivated[0].Code != contain.CodeAlternate {
		t.Fatalf("%+v", res)
	}
	for _, g := range res.Activated {
		b := ledger.Boundary{Receiver: g.Receiver, Scope: g.Scope}
		st := w.status(b)
		if st.Grant == nil || st.Grant.ID != g.Grant || st.Epoch != sc.before[b]+1 || g.Epoch != st.Epoch {
			t.Errorf("%v: %+v, grant %+v", b, st, g)
		}
		if !strings.Contains(st.Grant.Decision, "review-7") || !strings.Contains(st.Grant.Decision, rec.ID) ||
			!strings.Contains(st.Grant.Decision, sc.claimA.Ref) {
			t.Errorf("decision %q does not name the review, the containment and the superseded claim", st.Grant.Decision)
		}
	}
	if got := w.successorGrants(sc); len(got) != 2 || got[0] != sc.bounds[0] || got[1] != sc.bounds[1] {
		t.Fatalf("successor at %v", got)
	}
	if len(res.Containment.Successor) != 2 {
		t.Fatalf("recorded %+v", res.Containment.Successor)
	}
}

// Ensure that a hold made after the containment makes that boundary's
// activation fail (the installed epoch is no longer current), and that
// the result says which boundaries took the grant.
func TestActivate_HeldSinceFails(t *testing.T) {
	w := newWorld(t, 2)
	sc := w.newScenario(2)
	co := w.coordinator(testTimeout)
	mustContain(t, co, sc)
	w.reconcile(sc)
	b := sc.bounds[1]
	if _, err := w.byName[b.Receiver].r.Admin().Hold(context.Background(), kvfence.HoldRequest{Scopes: []string{b.Scope}, Reason: "again"}); err != nil {
		t.Fatal(err)
	}
	res, err := co.Activate(context.Background(), w.activateReq(sc))
	if !errors.Is(err, contain.ErrActivationIncomplete) {
		t.Fatalf("%v", err)
	}
	if len(res.Activated) != 1 || res.Activated[0].Scope != sc.bounds[0].Scope || len(res.NotActivated) != 1 ||
		res.NotActivated[0].Code != "epoch_mismatch" {
		t.Fatalf("%+v", res)
	}
	if got := w.successorGrants(sc); len(got) != 1 || got[0] != sc.bounds[0] {
		t.Fatalf("successor at %v", got)
	}
}

// restored is a boundary whose receiver was restored from a backup taken
// before the containment: its scope reports the epoch before the hold.
type restored struct {
	contain.Boundary
	epoch uint64
}

func (r restored) Status(ctx context.Context, scope string) (kvfence.ScopeStatus, error) {
	st, err := r.Boundary.Status(ctx, scope)
	st.Epoch = r.epoch
	return st, err
}

// Ensure that Verify reports a receiver whose epoch is below the one the
// containment installed, and passes while it is not.
func TestVerify_EpochBelowInstalled(t *testing.T) {
	w := newWorld(t, 2)
	sc := w.newScenario(2)
	co := w.coordinator(testTimeout)
	mustContain(t, co, sc)
	res, err := co.Verify(context.Background(), sc.action)
	if err != nil || len(res.Checked) != 2 || !res.Checked[0].Reached {
		t.Fatalf("sound: %v %+v", err, res)
	}
	b := sc.bounds[1]
	dial := func(ctx context.Context, r ledger.Receiver) (contain.Boundary, error) {
		bd := contain.Embedded(w.byName[r.Name].r)
		if r.Name == b.Receiver {
			return restored{bd, sc.before[b]}, nil
		}
		return bd, nil
	}
	co2, err := contain.New(contain.Options{Ledger: w.l, Dial: dial, Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	res, err = co2.Verify(context.Background(), sc.action)
	if !errors.Is(err, contain.ErrVerifyMismatch) || len(res.Mismatches) != 1 || res.Mismatches[0].Kind != contain.MismatchEpoch ||
		res.Mismatches[0].Scope != b.Scope {
		t.Fatalf("restored: %v %+v", err, res.Mismatches)
	}
}

// Ensure that a recorded acknowledgment whose signature was corrupted, or
// whose record says other epochs than it signs, does not verify.
func TestVerifyStored_Corrupted(t *testing.T) {
	w := newWorld(t, 1)
	sc := w.newScenario(1)
	rec := mustContain(t, w.coordinator(testTimeout), sc)
	pinned, err := w.l.Receiver(sc.bounds[0].Receiver)
	if err != nil {
		t.Fatal(err)
	}
	b := rec.Boundaries[0]
	if err := contain.VerifyStored(b, pinned); err != nil {
		t.Fatalf("sound: %v", err)
	}
	sig := b
	sig.Ack = append([]byte(nil), b.Ack...)
	sig.Ack[len(sig.Ack)-1] ^= 1
	if err := contain.VerifyStored(sig, pinned); err == nil {
		t.Error("a corrupted signature verified")
	}
	other := pinned
	other.PublicKey = key(200).Public().(ed25519.PublicKey)
	if err := contain.VerifyStored(b, other); err == nil {
		t.Error("an acknowledgment verified under a key that is not the pinned one")
	}
}

// lying is a boundary that activates for real but reports a grant of
// another scope and epoch, and whose status cannot be read.
type lying struct{ contain.Boundary }

func (l lying) Status(ctx context.Context, scope string) (kvfence.ScopeStatus, error) {
	return kvfence.ScopeStatus{}, errors.New("status unavailable")
}

func (l lying) Activate(ctx context.Context, req kvfence.ActivateRequest) (kvfence.Grant, error) {
	g, err := l.Boundary.Activate(ctx, req)
	g.Scope, g.Epoch = "elsewhere", g.Epoch+7
	return g, err
}

// Ensure that a grant answer that names another scope or epoch than was
// asked is not recorded as the successor's grant when the receiver's
// status cannot show that the successor's grant is the one in force.
func TestActivate_GrantAnswerChecked(t *testing.T) {
	w := newWorld(t, 2)
	sc := w.newScenario(2)
	mustContain(t, w.coordinator(testTimeout), sc)
	w.reconcile(sc)
	dial := func(ctx context.Context, r ledger.Receiver) (contain.Boundary, error) {
		bd := contain.Embedded(w.byName[r.Name].r)
		if r.Name == sc.bounds[1].Receiver {
			return lying{bd}, nil
		}
		return bd, nil
	}
	co, err := contain.New(contain.Options{Ledger: w.l, Dial: dial, Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	res, err := co.Activate(context.Background(), w.activateReq(sc))
	if !errors.Is(err, contain.ErrActivationIncomplete) || len(res.NotActivated) != 1 || res.NotActivated[0].Code != "bad_answer" {
		t.Fatalf("%v %+v", err, res)
	}
	if s := res.Containment.Successor; len(s) != 1 || s[0].Receiver != sc.bounds[0].Receiver {
		t.Fatalf("recorded %+v", s)
	}
}

// Ensure that a hold id taken first at a receiver by another hold (same
// id, another reason) is not mistaken for the containment's: the boundary
// is failed with hold_id_conflict, and its epoch is not advanced again.
func TestContain_HoldIDTakenElsewhere(t *testing.T) {
	w := newWorld(t, 1)
	sc := w.newScenario(1)
	b := sc.bounds[0]
	id := ledger.HoldID(ledger.ContainmentID("ledger-1", sc.action, sc.claimA.Ref), b.Receiver, b.Scope)
	if _, err := w.byName[b.Receiver].r.Admin().Hold(context.Background(), kvfence.HoldRequest{Scopes: []string{b.Scope},
		Reason: "someone else's hold", ID: id}); err != nil {
		t.Fatal(err)
	}
	rec := mustContain(t, w.coordinator(testTimeout), sc)
	if got := rec.Boundaries[0]; rec.Boundaries[0].HoldID != id || got.Result != ledger.BoundaryFailed || got.ErrorCode != "hold_id_conflict" {
		t.Fatalf("%s %+v", rec.State, got)
	}
	if st := w.status(b); st.Epoch != sc.before[b]+1 {
		t.Fatalf("epoch %d, before %d", st.Epoch, sc.before[b])
	}
}

// Ensure that a rerun reads an acknowledged boundary again: a stale
// rejection the receiver made after the acknowledgment shows in the
// record, and a reading that fails says so instead of leaving an empty
// list of effects that would read as "none".
func TestContain_ObservesAcknowledgedBoundariesAgain(t *testing.T) {
	w := newWorld(t, 1)
	sc := w.newScenario(1)
	fs := w.installFaults(sc, faultNone)
	co := w.coordinator(testTimeout)
	rec := mustContain(t, co, sc)
	if rec.State != ledger.ContainmentFull || !rec.Boundaries[0].LastStaleRejectionAt.IsZero() || rec.Boundaries[0].ObservedAt.IsZero() {
		t.Fatalf("first run: %s %+v", rec.State, rec.Boundaries[0])
	}
	b := sc.bounds[0]
	env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: kvfence.WireVersion, Scope: b.Scope, Epoch: sc.before[b],
		Grant: strings.Repeat("0", 32), Executor: "worker-a", Claim: sc.claimA.Ref, Request: sc.request})
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.byName[b.Receiver].r.Submit(context.Background(), "worker-a", env)
	if err != nil || res.Outcome != kvfence.Denied {
		t.Fatalf("stale submit: %+v, %v", res, err)
	}
	rejected := w.status(b).LastStaleRejectionAt
	if rejected.IsZero() {
		t.Fatal("the receiver recorded no stale rejection")
	}
	rec = mustContain(t, co, sc)
	got := rec.Boundaries[0]
	if !got.LastStaleRejectionAt.Equal(rejected) || got.Attempts != 1 || got.ObservationError != "" {
		t.Fatalf("rerun: last stale rejection %v (receiver: %v), attempts %d, observation error %q", got.LastStaleRejectionAt,
			rejected, got.Attempts, got.ObservationError)
	}
	fs[b.Receiver].failReceipts = true
	rec = mustContain(t, co, sc)
	if got := rec.Boundaries[0]; got.ObservationError == "" || !got.LastStaleRejectionAt.Equal(rejected) ||
		rec.State != ledger.ContainmentFull {
		t.Fatalf("failed reading: %s %+v", rec.State, got)
	}
}

// lostActivation activates for real and then loses the answer.
type lostActivation struct{ contain.Boundary }

func (l lostActivation) Activate(ctx context.Context, req kvfence.ActivateRequest) (kvfence.Grant, error) {
	if _, err := l.Boundary.Activate(ctx, req); err != nil {
		return kvfence.Grant{}, err
	}
	return kvfence.Grant{}, fmt.Errorf("%w: connection reset after the request was sent", kvfence.ErrOutcomeUnknown)
}

// Ensure that activate can be repeated: a grant the ledger recorded is
// reported as activated and not asked for again, and a grant whose answer
// was lost is found at the receiver and recorded, instead of the repeat
// failing at a scope the successor already holds.
func TestActivate_Repeat(t *testing.T) {
	w := newWorld(t, 2)
	sc := w.newScenario(2)
	co := w.coordinator(testTimeout)
	mustContain(t, co, sc)
	w.reconcile(sc)
	lost := sc.bounds[1].Receiver
	w.mu.Lock()
	w.wrap = func(name string, b contain.Boundary) contain.Boundary {
		if name == lost {
			return lostActivation{b}
		}
		return b
	}
	w.mu.Unlock()
	res, err := co.Activate(context.Background(), w.activateReq(sc))
	if err != nil || len(res.Activated) != 2 || len(res.Containment.Successor) != 2 {
		t.Fatalf("first activate: %+v, %v", res, err)
	}
	first := map[string]string{}
	for _, g := range res.Activated {
		first[g.Receiver] = g.Grant
	}
	res, err = co.Activate(context.Background(), w.activateReq(sc))
	if err != nil || len(res.Activated) != 2 || len(res.NotActivated) != 0 {
		t.Fatalf("repeat: %+v, %v", res, err)
	}
	for _, g := range res.Activated {
		if first[g.Receiver] != g.Grant {
			t.Errorf("%s: repeat reports grant %s, first %s", g.Receiver, g.Grant, first[g.Receiver])
		}
		st := w.status(ledger.Boundary{Receiver: g.Receiver, Scope: g.Scope})
		if st.Grant == nil || st.Grant.ID != g.Grant {
			t.Errorf("%s: receiver has %+v, recorded %s", g.Receiver, st.Grant, g.Grant)
		}
	}
	// A receiver that cannot be reached on a repeat is not reported as
	// activated on the strength of the record: its grant may have been
	// superseded since.
	w.installFaults(sc, faultDown, faultNone)
	res, err = co.Activate(context.Background(), w.activateReq(sc))
	if !errors.Is(err, contain.ErrActivationIncomplete) || len(res.Activated) != 1 || len(res.NotActivated) != 1 ||
		res.NotActivated[0].Receiver != sc.bounds[0].Receiver {
		t.Fatalf("repeat with %s down: %+v, %v", sc.bounds[0].Receiver, res, err)
	}
}
