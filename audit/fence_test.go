package audit

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// Entries of a receiver's history for the replay tests, in the fields the
// receiver writes.
func created(scope string) *Entry { return &Entry{Kind: KindScopeCreated, Scope: scope, Epoch: 1} }
func activated(scope string, epoch uint64, grant string) *Entry {
	return &Entry{Kind: KindActivate, Scope: scope, Epoch: epoch, Grant: grant, Executor: "worker"}
}
func held(scope string, epoch uint64) *Entry {
	return &Entry{Kind: KindHold, Scope: scope, Epoch: epoch, Note: "reason: lease expired"}
}
func submitted(outcome, scope string, epoch uint64, grant string) *Entry {
	e := &Entry{Kind: KindSubmit, Outcome: outcome, Scope: scope, Epoch: epoch, Grant: grant, Executor: "worker", Action: "act"}
	if outcome == OutcomeDenied {
		e.Reason = "stale_or_unknown_epoch"
	}
	return e
}
func extended(scope string, epoch uint64, grant string) *Entry {
	return &Entry{Kind: KindGrantExtended, Scope: scope, Epoch: epoch, Grant: grant, Executor: "worker", Action: "act",
		Note: "not after 2026-01-01T00:30:00Z; was 2026-01-01T00:15:00Z; ttl 30m0s"}
}
func recovered(highWater uint64) *Entry {
	return &Entry{Kind: KindRecovered, Epoch: highWater, Note: "admitted"}
}

// chainOf links entries into a stored chain, one millisecond apart, after
// an init entry, and returns it with a checkpoint of its head.
func chainOf(t *testing.T, entries ...*Entry) ([]record, SignedCheckpoint) {
	t.Helper()
	c := NewChain(Head{})
	var recs []record
	for i, e := range append([]*Entry{{Kind: KindInit, Note: "receiver " + testReceiver}}, entries...) {
		e.At = t0 + int64(i)*1_000_000
		raw, _, err := c.Append(e)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, record{SeqKey(e.Seq), raw})
	}
	return recs, checkpointOf(t, receiverKey, testReceiver, recs, uint64(len(recs)))
}

// Ensure that Verify replays each scope's control state and reports an
// applied entry whose grant was not the scope's active grant at that
// point, naming the entry, the grant and the hold that superseded it; and
// that a history that keeps the fence verifies.
func TestVerify_FenceReplay(t *testing.T) {
	const s, s2 = "scope/a", "scope/b"
	type want struct {
		seq, hold   uint64 // 0: no violation
		recovery    bool
		activeGrant string
	}
	for _, tc := range []struct {
		name    string
		entries []*Entry
		want    want
	}{
		{"applied under the active grant", []*Entry{created(s), activated(s, 1, "g1"), submitted(OutcomeApplied, s, 1, "g1")}, want{}},
		{"successor applied after the hold", []*Entry{created(s), activated(s, 1, "g1"), held(s, 2), activated(s, 2, "g2"),
			submitted(OutcomeApplied, s, 2, "g2")}, want{}},
		{"applied while held", []*Entry{created(s), activated(s, 1, "g1"), held(s, 2), submitted(OutcomeApplied, s, 1, "g1")},
			want{seq: 5, hold: 4}},
		{"old grant applied after the successor's activation", []*Entry{created(s), activated(s, 1, "g1"), held(s, 2),
			activated(s, 2, "g2"), submitted(OutcomeApplied, s, 1, "g1")}, want{seq: 6, hold: 4, activeGrant: "g2"}},
		{"old grant with the new epoch", []*Entry{created(s), activated(s, 1, "g1"), held(s, 2),
			activated(s, 2, "g2"), submitted(OutcomeApplied, s, 2, "g1")}, want{seq: 6, hold: 4, activeGrant: "g2"}},
		{"active grant with another epoch", []*Entry{created(s), activated(s, 1, "g1"), submitted(OutcomeApplied, s, 2, "g1")},
			want{seq: 4, activeGrant: "g1"}},
		{"grant superseded two holds ago", []*Entry{created(s), activated(s, 1, "g1"), held(s, 2), activated(s, 2, "g2"),
			held(s, 3), activated(s, 3, "g3"), submitted(OutcomeApplied, s, 1, "g1")}, want{seq: 8, hold: 6, activeGrant: "g3"}},
		{"already_applied and denied after the hold change nothing", []*Entry{created(s), activated(s, 1, "g1"),
			submitted(OutcomeApplied, s, 1, "g1"), held(s, 2), submitted(OutcomeAlreadyApplied, s, 1, "g1"),
			submitted(OutcomeDenied, s, 1, "g1")}, want{}},
		{"never activated", []*Entry{created(s), submitted(OutcomeApplied, s, 1, "g1")}, want{seq: 3}},
		{"scope never created", []*Entry{submitted(OutcomeApplied, s, 1, "g1")}, want{seq: 2}},
		{"a hold of another scope", []*Entry{created(s), created(s2), activated(s, 1, "g1"), activated(s2, 1, "h1"),
			held(s, 2), submitted(OutcomeApplied, s2, 1, "h1")}, want{}},
		{"applied after a recovery", []*Entry{created(s), activated(s, 1, "g1"), recovered(1),
			submitted(OutcomeApplied, s, 1, "g1")}, want{seq: 5, hold: 4, recovery: true}},
		{"recovery holds every scope", []*Entry{created(s), created(s2), activated(s2, 1, "h1"), held(s, 2), recovered(2),
			submitted(OutcomeApplied, s2, 1, "h1")}, want{seq: 7, hold: 6, recovery: true}},
		{"activated again after a recovery", []*Entry{created(s), activated(s, 1, "g1"), recovered(1), activated(s, 2, "g2"),
			submitted(OutcomeApplied, s, 2, "g2")}, want{}},
		{"extended while active, then applied", []*Entry{created(s), activated(s, 1, "g1"), extended(s, 1, "g1"),
			submitted(OutcomeApplied, s, 1, "g1")}, want{}},
		{"extended after the hold", []*Entry{created(s), activated(s, 1, "g1"), held(s, 2), extended(s, 1, "g1")},
			want{seq: 5, hold: 4}},
		{"superseded grant extended", []*Entry{created(s), activated(s, 1, "g1"), held(s, 2), activated(s, 2, "g2"),
			extended(s, 1, "g1")}, want{seq: 6, hold: 4, activeGrant: "g2"}},
		{"extended after a recovery", []*Entry{created(s), activated(s, 1, "g1"), recovered(1), extended(s, 1, "g1")},
			want{seq: 5, hold: 4, recovery: true}},
		{"dispatched while held", []*Entry{created(s), activated(s, 1, "g1"), held(s, 2), submitted(OutcomeDispatching, s, 1, "g1")},
			want{seq: 5, hold: 4}},
		{"dispatched under the active grant, outcome after the hold", []*Entry{created(s), activated(s, 1, "g1"),
			submitted(OutcomeDispatching, s, 1, "g1"), held(s, 2), {Kind: "dispatch", Scope: s, Epoch: 1, Grant: "g1", Outcome: "applied"}}, want{}},
		{"the first of two violations", []*Entry{created(s), activated(s, 1, "g1"), held(s, 2),
			submitted(OutcomeApplied, s, 1, "g1"), submitted(OutcomeApplied, s, 1, "g1")}, want{seq: 5, hold: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, sc := chainOf(t, tc.entries...)
			r, err := Verify(VerifyOptions{Entries: entriesOf(recs), Anchor: memWith(t, sc), PublicKey: pubOf(receiverKey), Receiver: testReceiver})
			if err != nil {
				t.Fatal(err)
			}
			if r.Entries != uint64(len(recs)) {
				t.Fatalf("entries %d, want the whole chain (%d)", r.Entries, len(recs))
			}
			if tc.want.seq == 0 {
				if !r.OK() {
					t.Fatalf("Verify = %s: %s; want ok", r.Problem, r.Detail)
				}
				return
			}
			var fv *FenceViolationError
			if r.Problem != ProblemFenceViolation || !errors.Is(r.Err(), ErrFenceViolation) || !errors.As(r.Err(), &fv) {
				t.Fatalf("Verify = %s (%v); want fence_violation", r.Problem, r.Err())
			}
			e := tc.entries[tc.want.seq-2]
			got := want{seq: fv.Seq, hold: fv.Hold, recovery: fv.Recovery, activeGrant: fv.ActiveGrant}
			if got != tc.want || fv.Scope != e.Scope || fv.Grant != e.Grant || fv.Epoch != e.Epoch {
				t.Fatalf("violation %+v; want %+v for entry %+v", fv, tc.want, e)
			}
			verb := "applied"
			if e.Kind == KindGrantExtended {
				verb = "extended"
			}
			if fv.Kind != e.Kind {
				t.Errorf("violation kind %q, want %q", fv.Kind, e.Kind)
			}
			for _, part := range []string{"entry " + strconv.FormatUint(fv.Seq, 10) + " " + verb, `"` + fv.Grant + `"`, `"` + fv.Scope + `"`} {
				if !strings.Contains(r.Detail, part) {
					t.Errorf("detail %q lacks %s", r.Detail, part)
				}
			}
			if fv.Hold != 0 && !strings.Contains(r.Detail, "seq "+strconv.FormatUint(fv.Hold, 10)) {
				t.Errorf("detail %q does not name the hold at seq %d", r.Detail, fv.Hold)
			}
		})
	}
}

// Ensure that a chain with a fence violation still reports a damaged chain
// or a rollback first, since only an intact chain is evidence, and that
// NoFenceReplay, for chains that are not a receiver's, turns the replay off.
func TestVerify_FenceReplayOrderAndSwitch(t *testing.T) {
	var v chainCase
	for _, tc := range chainCases(t) {
		if tc.name == "fence_violation" {
			v = tc
		}
	}
	if v.recs == nil {
		t.Fatal("no fence_violation chain case")
	}
	opts := func(recs []record) VerifyOptions {
		return VerifyOptions{Entries: entriesOf(recs), Anchor: memWith(t, *v.anchor), PublicKey: pubOf(receiverKey), Receiver: testReceiver}
	}
	if r, _ := Verify(opts(v.recs)); r.Problem != ProblemFenceViolation {
		t.Fatalf("Verify = %s, want fence_violation", r.Problem)
	}
	if r, _ := Verify(opts(v.recs[:7])); r.Problem != ProblemRollbackDetected {
		t.Fatalf("cut before the anchor: %s, want rollback_detected", r.Problem)
	}
	if r, _ := Verify(opts(append(v.recs[:8:8], v.recs[9]))); r.Problem != ProblemSeqGap {
		t.Fatalf("entry 9 missing after the violation: %s, want seq_gap", r.Problem)
	}
	o := opts(v.recs)
	o.NoFenceReplay = true
	if r, _ := Verify(o); !r.OK() {
		t.Fatalf("NoFenceReplay: %s: %s", r.Problem, r.Detail)
	}
}
