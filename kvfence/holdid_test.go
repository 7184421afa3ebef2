package kvfence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/boltengine"
	"github.com/kvfence/kvfence/internal/defect"
	bolt "go.etcd.io/bbolt"
)

// holdReq is the request the idempotent-hold tests repeat.
func holdReq(id string, scopes ...string) HoldRequest {
	return HoldRequest{Scopes: scopes, Reason: "contain action-7", ID: id}
}

// holdOK holds and fails the test on an error.
func (f *fixture) holdOK(req HoldRequest) HoldResult {
	f.t.Helper()
	res, err := f.admin.Hold(f.ctx, req)
	if err != nil {
		f.t.Fatalf("Hold(%+v): %v", req, err)
	}
	return res
}

// latestRaw is the store's own newest signed checkpoint, as bytes.
func latestRaw(t testing.TB, r *Receiver) []byte {
	t.Helper()
	return rawGet(t, r, bucketCheckpoints, "latest")
}

// wantSameHold fails unless a repeat reports exactly what the first hold
// did, marked as a repeat.
func wantSameHold(t testing.TB, first, again HoldResult) {
	t.Helper()
	if !again.Repeated || first.Repeated {
		t.Fatalf("Repeated: first %v, again %v; want false, true", first.Repeated, again.Repeated)
	}
	if len(first.Scopes) != len(again.Scopes) {
		t.Fatalf("repeat held %d scopes, first %d", len(again.Scopes), len(first.Scopes))
	}
	for i := range first.Scopes {
		a, b := first.Scopes[i], again.Scopes[i]
		if a.Scope != b.Scope || a.PreviousEpoch != b.PreviousEpoch || a.Epoch != b.Epoch ||
			a.Ack.AuditSeq != b.Ack.AuditSeq || a.Ack.RequestedAt != b.Ack.RequestedAt || a.Ack.At != b.Ack.At || a.Ack.HoldID != b.Ack.HoldID {
			t.Fatalf("repeat scope %d = %+v, first %+v", i, b, a)
		}
	}
	if first.AuditSeq != again.AuditSeq || !first.HoldRequestedAt.Equal(again.HoldRequestedAt) || !first.HoldCommittedAt.Equal(again.HoldCommittedAt) {
		t.Fatalf("repeat = seq %d %v/%v, first seq %d %v/%v", again.AuditSeq, again.HoldRequestedAt, again.HoldCommittedAt,
			first.AuditSeq, first.HoldRequestedAt, first.HoldCommittedAt)
	}
}

// Ensure that a hold repeated with its ID returns the first result and
// writes nothing (no generation, no entry, not even a checkpoint), whatever
// happened to the scope in between: an activation (which the repeat must
// not cancel), a hold under another ID, or a hold without one.
func TestHoldID_RepeatReturnsFirst(t *testing.T) {
	for _, tc := range []struct {
		name    string
		between func(f *fixture)
		// open is whether the scope stays open after the repeat.
		open bool
	}{
		{"nothing", func(*fixture) {}, false},
		{"activated since", func(f *fixture) { f.activate("worker-b", "claim-2", f.patchRequest("act-b")) }, true},
		{"held by another id", func(f *fixture) { f.holdOK(holdReq("other-id", fixScope)) }, false},
		{"held without id", func(f *fixture) { f.hold("plain") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, defect.Variant{})
			f.activate("worker-a", "claim-1", f.patchRequest("act-a"))
			first := f.holdOK(holdReq("contain-1", fixScope))
			if first.Repeated || first.Scopes[0].PreviousEpoch != 1 || first.Scopes[0].Epoch != 2 {
				t.Fatalf("first hold = %+v", first)
			}
			if e := entryAt(t, f.r, first.AuditSeq); e.Kind != KindHold || !strings.Contains(e.Note, `hold id "contain-1"; reason: contain action-7`) {
				t.Fatalf("hold entry %s %q does not name the hold id", e.Kind, e.Note)
			}
			tc.between(f)
			f.clock.Add(time.Minute) // a checkpoint rewritten now would differ
			before, _ := f.r.Status(fixScope)
			head, latest := f.r.Head(), latestRaw(t, f.r)
			anchorBefore, err := f.anchor.Load()
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				again := f.holdOK(holdReq("contain-1", fixScope))
				wantSameHold(t, first, again)
				if again.Checkpoint != anchorBefore {
					t.Fatalf("repeat names checkpoint %d, the anchor holds %d", again.Checkpoint.Seq, anchorBefore.Seq)
				}
			}
			after, _ := f.r.Status(fixScope)
			if after.Epoch != before.Epoch || after.Mode != before.Mode || after.ActiveGrant != before.ActiveGrant {
				t.Fatalf("repeat changed the scope: %+v -> %+v", before, after)
			}
			if (after.Mode == ModeOpen) != tc.open {
				t.Fatalf("scope mode %s after the repeat", after.Mode)
			}
			if f.r.Head() != head || !bytes.Equal(latestRaw(t, f.r), latest) {
				t.Fatalf("repeat wrote: head %v -> %v, checkpoint rewritten %v", head, f.r.Head(), !bytes.Equal(latestRaw(t, f.r), latest))
			}
			f.reopen()
			wantSameHold(t, first, f.holdOK(holdReq("contain-1", fixScope)))
		})
	}
}

// Ensure that an id reused with anything else than the first request is
// ErrHoldIDConflict with nothing written: another reason, the scopes in
// another order, fewer or more scopes (an id known on some scopes only),
// another expected epoch.
func TestHoldID_Conflict(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	for _, s := range []string{"other", "third"} {
		if _, err := f.admin.CreateScope(f.ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	f.holdOK(holdReq("pair", fixScope, "other"))
	f.holdOK(HoldRequest{Scopes: []string{"third"}, Reason: "cas", ID: "cas", ExpectEpoch: 1})
	for _, tc := range []struct {
		name string
		req  HoldRequest
	}{
		{"other reason", HoldRequest{Scopes: []string{fixScope, "other"}, Reason: "something else", ID: "pair"}},
		{"other order", holdReq("pair", "other", fixScope)},
		{"fewer scopes", holdReq("pair", fixScope)},
		{"more scopes", holdReq("pair", fixScope, "other", "third")},
		{"known on one scope of two", holdReq("cas", "third", fixScope)},
		{"expect epoch added", HoldRequest{Scopes: []string{fixScope}, Reason: "contain action-7", ID: "pair", ExpectEpoch: 2}},
		{"other expect epoch", HoldRequest{Scopes: []string{"third"}, Reason: "cas", ID: "cas", ExpectEpoch: 2}},
		{"expect epoch dropped", HoldRequest{Scopes: []string{"third"}, Reason: "cas", ID: "cas"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head, latest := f.r.Head(), latestRaw(t, f.r)
			res, err := f.admin.Hold(f.ctx, tc.req)
			if !errors.Is(err, ErrHoldIDConflict) {
				t.Fatalf("Hold = %+v, %v; want ErrHoldIDConflict", res, err)
			}
			if f.r.Head() != head || !bytes.Equal(latestRaw(t, f.r), latest) {
				t.Fatal("a conflicting hold wrote")
			}
		})
	}
	// A store that lost one scope's record of a two-scope hold (and was
	// taken as it is since) knows the id on the other scope only: a
	// conflict, never a second generation on either.
	storePut(t, f, bucketHolds, string(holdKey("other", "pair")), nil)
	f.r.trustStore(t)
	head := f.r.Head()
	if res, err := f.admin.Hold(f.ctx, holdReq("pair", fixScope, "other")); !errors.Is(err, ErrHoldIDConflict) || f.r.Head() != head {
		t.Fatalf("Hold with the id known on one scope of two = %+v, %v; want ErrHoldIDConflict and nothing written", res, err)
	}
	// The id is per scope: on a scope that never saw it, it is a first hold.
	if res := f.holdOK(holdReq("cas", fixScope)); res.Repeated || res.Scopes[0].Epoch != 3 {
		t.Fatalf("first use of an id on another scope = %+v", res)
	}
}

// Ensure that ExpectEpoch makes a hold a compare-and-swap: at another
// epoch it is ErrEpochMismatch with nothing written, at the scope's epoch
// it holds, and with more than one scope it is refused.
func TestHold_ExpectEpoch(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	if _, err := f.admin.CreateScope(f.ctx, "other"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  HoldRequest
		want error
	}{
		{"behind", HoldRequest{Scopes: []string{fixScope}, Reason: "r", ExpectEpoch: 2}, ErrEpochMismatch},
		{"behind with id", HoldRequest{Scopes: []string{fixScope}, Reason: "r", ID: "x", ExpectEpoch: 7}, ErrEpochMismatch},
		{"two scopes", HoldRequest{Scopes: []string{fixScope, "other"}, Reason: "r", ExpectEpoch: 1}, ErrInvalidArgument},
		{"id too long", HoldRequest{Scopes: []string{fixScope}, Reason: "r", ID: strings.Repeat("h", audit.MaxHoldIDLen+1)}, ErrInvalidArgument},
		{"id with a control character", HoldRequest{Scopes: []string{fixScope}, Reason: "r", ID: "a\x00b"}, ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := f.r.Head()
			res, err := f.admin.Hold(f.ctx, tc.req)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Hold = %+v, %v; want %v", res, err, tc.want)
			}
			if st, _ := f.r.Status(fixScope); st.Epoch != 1 || f.r.Head() != head {
				t.Fatalf("refused hold wrote: epoch %d, head %v -> %v", st.Epoch, head, f.r.Head())
			}
		})
	}
	res := f.holdOK(HoldRequest{Scopes: []string{fixScope}, Reason: "r", ID: "x", ExpectEpoch: 1})
	if res.Scopes[0].Epoch != 2 {
		t.Fatalf("compare-and-swap hold = %+v", res)
	}
	// Its repeat returns the first result though the scope is no longer
	// at the expected epoch.
	wantSameHold(t, res, f.holdOK(HoldRequest{Scopes: []string{fixScope}, Reason: "r", ID: "x", ExpectEpoch: 1}))
}

// wantAcks checks a hold's signed checkpoint and every scope's signed
// acknowledgment under the receiver's key, and that each names the hold.
func wantAcks(t testing.TB, res HoldResult, id string) {
	t.Helper()
	pub := testKey.Public().(ed25519.PublicKey)
	if err := res.Checkpoint.Verify(pub); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if res.Checkpoint.Seq < res.AuditSeq {
		t.Fatalf("checkpoint seq %d does not cover the hold's entry %d", res.Checkpoint.Seq, res.AuditSeq)
	}
	for _, s := range res.Scopes {
		a := s.Ack
		if err := a.Verify(pub); err != nil {
			t.Fatalf("ack of %s: %v", s.Scope, err)
		}
		if err := a.CoveredBy(res.Checkpoint.Checkpoint); err != nil {
			t.Fatalf("ack of %s: %v", s.Scope, err)
		}
		if a.Receiver != "test-receiver" || a.Scope != s.Scope || a.HoldID != id || a.PreviousEpoch != s.PreviousEpoch ||
			a.Epoch != s.Epoch || a.RequestedAt != res.HoldRequestedAt.UnixNano() || a.At != res.HoldCommittedAt.UnixNano() {
			t.Fatalf("ack %+v does not state the hold %+v of %s", a.HoldAck, s, s.Scope)
		}
		// Round trip through the signed form a coordinator keeps.
		raw, err := a.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if back, err := audit.ParseSignedHoldAck(raw); err != nil || back != a {
			t.Fatalf("ParseSignedHoldAck = %+v, %v", back, err)
		}
	}
}

// Ensure that a hold's result carries the checkpoint the anchor holds
// after it and one acknowledgment per scope, signed by the receiver and
// covered by that checkpoint: for a hold with and without an id, of
// several scopes, for HoldAll, and for a repeat (which names the current
// anchor); and that each acknowledgment names its scope's own entry.
func TestHold_SignedAcknowledgment(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.openScope("b")
	if _, err := f.admin.CreateScope(f.ctx, "c"); err != nil {
		t.Fatal(err)
	}
	wantAnchored := func(res HoldResult) {
		t.Helper()
		a, err := f.anchor.Load()
		if err != nil {
			t.Fatal(err)
		}
		if a != res.Checkpoint {
			t.Fatalf("hold names checkpoint %d, the anchor holds %d", res.Checkpoint.Seq, a.Seq)
		}
	}
	plain := f.holdOK(HoldRequest{Scopes: []string{fixScope}, Reason: "plain"})
	wantAcks(t, plain, "")
	wantAnchored(plain)
	multi := f.holdOK(holdReq("multi", fixScope, "b", "c"))
	wantAcks(t, multi, "multi")
	wantAnchored(multi)
	for i, s := range multi.Scopes {
		if want := multi.AuditSeq - uint64(len(multi.Scopes)-1-i); s.Ack.AuditSeq != want {
			t.Fatalf("ack of %s names entry %d, want %d", s.Scope, s.Ack.AuditSeq, want)
		}
	}
	f.openScope("d")
	all, err := f.admin.HoldAll(f.ctx, "incident")
	if err != nil {
		t.Fatal(err)
	}
	wantAcks(t, all.HoldResult, "")
	wantAnchored(all.HoldResult)
	// A repeat signs again, over the current anchor, which is past the
	// first hold's.
	again := f.holdOK(holdReq("multi", fixScope, "b", "c"))
	wantSameHold(t, multi, again)
	wantAcks(t, again, "multi")
	wantAnchored(again)
	if again.Checkpoint.Seq <= multi.Checkpoint.Seq {
		t.Fatalf("repeat names checkpoint %d, not the current one", again.Checkpoint.Seq)
	}
	// A forged acknowledgment (an epoch moved) does not verify.
	forged := again.Scopes[0].Ack
	forged.Epoch, forged.PreviousEpoch = forged.Epoch+1, forged.PreviousEpoch+1
	if err := forged.Verify(testKey.Public().(ed25519.PublicKey)); !errors.Is(err, audit.ErrBadSignature) {
		t.Fatalf("forged ack verifies: %v", err)
	}
}

// Ensure that a repeat whose first hold was committed but not anchored
// (the anchor write failed, the caller saw ErrNotAcknowledged) does not
// name an anchor that does not cover the hold: it commits an anchor that
// does, still without a new generation or entry.
func TestHoldID_RepeatAfterUnanchoredHold(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	fa := &failingAnchor{AnchorStore: f.anchor, fail: true}
	f.r.opts.Anchor = fa
	if _, err := f.admin.Hold(f.ctx, holdReq("h", fixScope)); !errors.Is(err, ErrNotAcknowledged) {
		t.Fatalf("Hold with a failing anchor = %v, want ErrNotAcknowledged", err)
	}
	head := f.r.Head()
	res := f.holdOK(holdReq("h", fixScope))
	if !res.Repeated || res.Scopes[0].Epoch != 2 || f.r.Head() != head {
		t.Fatalf("repeat = %+v, head %v -> %v", res, head, f.r.Head())
	}
	wantAcks(t, res, "h")
	a, err := f.anchor.Load()
	if err != nil || a != res.Checkpoint || a.Seq < res.AuditSeq {
		t.Fatalf("anchor %d (%v), repeat names %d, hold entry %d", a.Seq, err, res.Checkpoint.Seq, res.AuditSeq)
	}
}

// Ensure that a hold record changed under a running receiver is never
// the basis of an answer: bytes edited (an epoch moved), a record deleted,
// and a record added for an id the receiver never wrote are each
// ErrStateMismatch with nothing written, on both engines; once the record
// is put back, the repeat answers again.
func TestEditUnderReceiver_HoldRecord(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		first := f.holdOK(holdReq("h1", fixScope))
		key := string(holdKey(fixScope, "h1"))
		orig := rawGet(t, f.r, bucketHolds, key)
		var rec holdRecord
		if err := decodeRecord(bucketHolds, []byte(key), orig, &rec); err != nil {
			t.Fatal(err)
		}
		edited := rec
		edited.PreviousEpoch, edited.Epoch = 41, 42
		forged := rec
		forged.Request = make([]byte, 32)
		for _, tc := range []struct {
			name string
			id   string
			edit func()
			undo func()
		}{
			{"edited", "h1", func() { storePut(t, f, bucketHolds, key, mustEncode(t, &edited)) },
				func() { storePut(t, f, bucketHolds, key, orig) }},
			{"deleted", "h1", func() { storePut(t, f, bucketHolds, key, nil) },
				func() { storePut(t, f, bucketHolds, key, orig) }},
			{"added", "h2", func() { storePut(t, f, bucketHolds, string(holdKey(fixScope, "h2")), mustEncode(t, &forged)) },
				func() { storePut(t, f, bucketHolds, string(holdKey(fixScope, "h2")), nil) }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.edit()
				head := f.r.Head()
				res, err := f.admin.Hold(f.ctx, holdReq(tc.id, fixScope))
				if !errors.Is(err, ErrStateMismatch) {
					t.Fatalf("Hold over an edited hold record = %+v, %v; want ErrStateMismatch", res, err)
				}
				if f.r.Head() != head {
					t.Fatal("a hold over an edited record wrote")
				}
				tc.undo()
			})
		}
		wantSameHold(t, first, f.holdOK(holdReq("h1", fixScope)))
	})
}

// Ensure that a database made before hold ids, which has no holds bucket,
// opens writable and read-only and verifies; that its first idempotent
// hold creates the bucket and works; and that an empty holds bucket does
// not change the state digest, so checkpoints signed before it verify.
func TestHoldID_DatabaseWithoutHoldsBucket(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) { testHoldsBucket(t, s, false) })
}

// Ensure that an empty holds bucket does not change the state digest: a
// database given one still opens and verifies against checkpoints signed
// before it, and its first idempotent hold works.
func TestHoldID_EmptyHoldsBucket(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) { testHoldsBucket(t, s, true) })
}

func testHoldsBucket(t *testing.T, s *store, empty bool) {
	{
		f := newFixtureOn(t, s, defect.Variant{})
		a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
		f.submit("worker-a", a.envelope)
		f.hold("plain hold, no id")
		hasHolds := func() bool {
			t.Helper()
			var ok bool
			if err := f.r.eng.View(context.Background(), func(tx engine.Tx) (err error) {
				ok, err = tx.HasBucket(bucketHolds)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if hasHolds() {
			t.Fatal("the store has a holds bucket before any hold with an id")
		}
		pub := testKey.Public().(ed25519.PublicKey)
		verify := func() {
			t.Helper()
			f.r.Close()
			rep, err := f.store.verify(t, VerifyOptions{Anchor: f.anchor, PublicKey: pub})
			if err != nil || !rep.OK() {
				t.Fatalf("verify-chain = %s: %s (%v)", rep.Problem, rep.Detail, err)
			}
			ro, err := f.openStore(&Options{ReadOnly: true}, defect.Variant{})
			if err != nil {
				t.Fatalf("read-only open: %v", err)
			}
			ro.Close()
			f.reopen()
		}
		verify()
		if empty {
			// An empty holds bucket, which a tool could leave, adds
			// nothing to the digest: the store still opens and verifies,
			// and the first hold uses the bucket as it is.
			if err := f.r.rawUpdate(func(tx engine.Tx) error { return tx.CreateBucket(bucketHolds) }); err != nil {
				t.Fatal(err)
			}
			verify()
		}
		first := f.holdOK(holdReq("first-id", fixScope))
		if first.Repeated || !hasHolds() {
			t.Fatalf("first idempotent hold = %+v, holds bucket %v", first, hasHolds())
		}
		wantAcks(t, first, "first-id")
		verify()
		wantSameHold(t, first, f.holdOK(holdReq("first-id", fixScope)))
	}
}

// entryAt is the audit entry at seq.
func entryAt(t testing.TB, r *Receiver, seq uint64) Event {
	t.Helper()
	var out Event
	if err := r.Events(seq, func(e Event) bool { out = e; return false }); err != nil || out.Seq != seq {
		t.Fatalf("no entry at seq %d (%v)", seq, err)
	}
	return out
}

// Ensure that hold records are part of the fence state: one edited while
// the receiver was closed makes Open refuse the store, as any state
// record does, and verify-chain report it.
func TestHoldID_RecordInStateDigest(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		f.holdOK(holdReq("h1", fixScope))
		key := string(holdKey(fixScope, "h1"))
		var rec holdRecord
		if err := decodeRecord(bucketHolds, []byte(key), rawGet(t, f.r, bucketHolds, key), &rec); err != nil {
			t.Fatal(err)
		}
		orig := rawGet(t, f.r, bucketHolds, key)
		rec.RequestedAt++
		storePut(t, f, bucketHolds, key, mustEncode(t, &rec))
		f.r.Close()
		if r, err := f.openStore(f.opts(), defect.Variant{}); !errors.Is(err, ErrStateMismatch) {
			if err == nil {
				r.Close()
			}
			t.Fatalf("Open over an edited hold record = %v, want ErrStateMismatch", err)
		}
		rep, err := f.store.verify(t, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
		if err != nil || rep.Problem != audit.ProblemStateMismatch {
			t.Fatalf("verify-chain = %s (%v), want %s", rep.Problem, err, audit.ProblemStateMismatch)
		}
		// Put back, the store opens again (for the test's cleanup).
		storePutClosed(t, f, bucketHolds, key, orig)
		f.reopen()
	})
}

// storePutClosed is storePut for a store whose receiver is not running.
func storePutClosed(t testing.TB, f *fixture, bucket []byte, key string, raw []byte) {
	t.Helper()
	if f.store.prefix != "" {
		storePut(t, f, bucket, key, raw)
		return
	}
	db, err := bolt.Open(f.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put([]byte(key), raw) }); err != nil {
		t.Fatal(err)
	}
}

// Ensure that ReceiptsByClaim lists exactly the receipts of the scope
// applied under grants of that claim, oldest first, and refuses an unknown
// scope and bad names.
func TestReceiptsByClaim(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	if _, err := f.admin.CreateTarget(f.ctx, fixScope, "t2", []byte("x")); err != nil {
		t.Fatal(err)
	}
	set := func(action, target string) []byte { return f.request(SetRequest(action, target, []byte(action))) }
	// Claim 1 applies two actions under two grants, claim 2 one between.
	a1 := f.activate("worker-a", "claim-1", set("a-zz-first", fixTarget))
	r1 := f.submit("worker-a", a1.envelope)
	b := f.activateAfterHold("worker-b", set("b-only", "t2"))
	rb := f.submit("worker-b", b.envelope)
	f.hold("next")
	a2 := f.activate("worker-a", "claim-1", set("a-aa-second", "t2"))
	r2 := f.submit("worker-a", a2.envelope)
	// Another scope's receipt under the same claim ref is not this scope's.
	envOther := f.openScope("other")
	f.submit("worker-other", envOther)
	// A receipt record that names a grant of another scope (the store
	// edited) is not counted for this scope, whatever the grant's claim.
	g, err := f.r.Grant(envGrant(t, envOther))
	if err != nil {
		t.Fatal(err)
	}
	storePut(t, f, bucketReceipts, string(receiptKey(fixScope, "forged")), mustEncode(t, &receiptRecord{Grant: g.ID,
		RequestSHA256: make([]byte, 32), Target: fixTarget, RevBefore: 9, RevAfter: 10, AuditSeq: 1, At: 1}))
	t.Cleanup(func() { storePut(t, f, bucketReceipts, string(receiptKey(fixScope, "forged")), nil) })
	for _, tc := range []struct {
		scope, claim string
		want         []uint64
		err          error
	}{
		{fixScope, "c", nil, nil},
		{fixScope, "claim-1", []uint64{r1.AuditSeq, r2.AuditSeq}, nil},
		{fixScope, "claim-2", []uint64{rb.AuditSeq}, nil},
		{fixScope, "claim-none", nil, nil},
		{"other", "claim-1", nil, nil},
		{"other", "c", []uint64{0}, nil},
		{"no-such-scope", "claim-1", nil, ErrUnknownScope},
		{"", "claim-1", nil, ErrInvalidArgument},
		{fixScope, "bad\nclaim", nil, ErrInvalidArgument},
	} {
		got, err := f.r.ReceiptsByClaim(tc.scope, tc.claim)
		if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
			t.Fatalf("ReceiptsByClaim(%q, %q) error %v, want %v", tc.scope, tc.claim, err, tc.err)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("ReceiptsByClaim(%q, %q) = %d receipts, want %d", tc.scope, tc.claim, len(got), len(tc.want))
		}
		for i, rc := range got {
			g, err := f.r.Grant(rc.Grant)
			if err != nil || g.Claim != tc.claim || rc.Scope != tc.scope {
				t.Fatalf("receipt %+v is under grant %+v (%v)", rc, g, err)
			}
			if tc.want[i] != 0 && rc.AuditSeq != tc.want[i] {
				t.Fatalf("receipt %d at seq %d, want %d", i, rc.AuditSeq, tc.want[i])
			}
			if one, err := f.r.Receipt(rc.Scope, rc.Action); err != nil || one != rc {
				t.Fatalf("receipt %+v, Receipt gives %+v (%v)", rc, one, err)
			}
		}
	}
}

// envGrant is the grant id an envelope names.
func envGrant(t testing.TB, env []byte) string {
	t.Helper()
	e, err := DecodeEnvelope(env, 0)
	if err != nil {
		t.Fatal(err)
	}
	return e.Grant
}

// Ensure that a denied stale retry of an applied request carries the
// receipt's seq for the executor of the grant it was applied under, and
// never for anyone else: not a caller replaying that executor's envelope,
// not a successor whose same request the receipt answers for.
func TestSubmit_ReceiptSeqForExecutorOnly(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	req := f.patchRequest("act")
	a := f.activate("worker-a", "claim-1", req)
	applied := f.submit("worker-a", a.envelope)
	if applied.Outcome != Applied || applied.ReceiptSeq != 0 {
		t.Fatalf("apply = %+v", applied)
	}
	f.hold("worker-a paused")
	stale := f.submit("worker-a", a.envelope)
	wantDenied(t, stale, ReasonReceiverHeld)
	if stale.ReceiptSeq != applied.AuditSeq {
		t.Fatalf("executor's stale retry: receipt seq %d, want %d", stale.ReceiptSeq, applied.AuditSeq)
	}
	if other := f.submit("worker-x", a.envelope); other.ReceiptSeq != 0 {
		t.Fatalf("another caller with the executor's envelope got receipt seq %d", other.ReceiptSeq)
	}
	// A successor approved for the same request finds it applied; its own
	// stale retry is denied without the seq: the effect is not its own.
	b := f.activate("worker-b", "claim-2", req)
	if res := f.submit("worker-b", b.envelope); res.Outcome != AlreadyApplied {
		t.Fatalf("successor = %+v, want already_applied", res)
	}
	f.hold("worker-b paused")
	bStale := f.submit("worker-b", b.envelope)
	wantDenied(t, bStale, ReasonReceiverHeld)
	if bStale.ReceiptSeq != 0 || !strings.Contains(bStale.Detail, "applied earlier") {
		t.Fatalf("successor's stale retry = receipt seq %d, detail %q", bStale.ReceiptSeq, bStale.Detail)
	}
	if again := f.submit("worker-a", a.envelope); again.ReceiptSeq != applied.AuditSeq {
		t.Fatalf("executor's second stale retry: receipt seq %d", again.ReceiptSeq)
	}
}

// Ensure that concurrent holds with one ID, which the commit queue may
// put in one transaction (the later ones then read the first one's
// records before they are committed), issue one generation: every caller
// gets the same result, all but one marked as a repeat, each with an
// acknowledgment its checkpoint covers.
func TestHoldID_ConcurrentRepeats(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		const n = 8
		results := make([]HoldResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { results[i], errs[i] = f.admin.Hold(f.ctx, holdReq("race", fixScope)) })
		}
		wg.Wait()
		var firsts []HoldResult
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("Hold %d: %v", i, errs[i])
			}
			if !results[i].Repeated {
				firsts = append(firsts, results[i])
			}
			wantAcks(t, results[i], "race")
		}
		if len(firsts) != 1 {
			t.Fatalf("%d holds were not repeats, want 1", len(firsts))
		}
		for i := range n {
			if results[i].Repeated {
				wantSameHold(t, firsts[0], results[i])
			}
		}
		if st, _ := f.r.Status(fixScope); st.Epoch != 2 {
			t.Fatalf("scope at epoch %d after concurrent holds of one id, want 2", st.Epoch)
		}
	})
}

// Ensure that a call that says it wrote nothing (wtx.idle) but did is
// committed and anchored all the same: the transaction is skipped only
// when the chain and the state are as they were.
func TestGroupCommit_IdleCallThatWrites(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	head := f.r.Head()
	_, err := f.r.write(0, laneWrite, nil, func(w *wtx) (any, error) {
		w.idle++
		_, err := w.appendAudit(&audit.Entry{Kind: KindHold, Scope: fixScope, Epoch: 1, Note: "written by an idle call"})
		return nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.r.Head(); got.Seq != head.Seq+1 {
		t.Fatalf("head at %d after a write, want %d", got.Seq, head.Seq+1)
	}
	if a, err := f.anchor.Load(); err != nil || a.Seq != head.Seq+1 {
		t.Fatalf("anchor at %d (%v), want %d", a.Seq, err, head.Seq+1)
	}
}

// Ensure that a hold record that is not one a hold writes (taken as the
// store's own, as after a restore the receiver accepted) is ErrBadFormat,
// never an answer: a short fingerprint, an epoch that is not the previous
// one plus one, a zero seq, bytes that do not decode.
func TestHoldID_MalformedRecord(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.holdOK(holdReq("h", fixScope))
	key := string(holdKey(fixScope, "h"))
	orig := rawGet(t, f.r, bucketHolds, key)
	var good holdRecord
	if err := decodeRecord(bucketHolds, []byte(key), orig, &good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(h *holdRecord)
		raw  []byte
	}{
		{"short fingerprint", func(h *holdRecord) { h.Request = h.Request[:31] }, nil},
		{"epoch jump", func(h *holdRecord) { h.Epoch += 5 }, nil},
		{"epoch zero", func(h *holdRecord) { h.PreviousEpoch, h.Epoch = math.MaxUint64, 0 }, nil},
		{"seq zero", func(h *holdRecord) { h.AuditSeq = 0 }, nil},
		{"not cbor", nil, []byte{0xff, 0x00}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.raw
			if tc.edit != nil {
				h := good
				h.Request = bytes.Clone(good.Request)
				tc.edit(&h)
				raw = mustEncode(t, &h)
			}
			storePut(t, f, bucketHolds, key, raw)
			f.r.trustStore(t)
			head := f.r.Head()
			if res, err := f.admin.Hold(f.ctx, holdReq("h", fixScope)); !errors.Is(err, ErrBadFormat) || f.r.Head() != head {
				t.Fatalf("Hold over a malformed hold record = %+v, %v; want ErrBadFormat and nothing written", res, err)
			}
			storePut(t, f, bucketHolds, key, orig)
			f.r.trustStore(t)
		})
	}
}

// Ensure that the holds bucket deleted whole under a running receiver
// that knows records in it is ErrStateMismatch, not a store without hold
// ids: a repeat would otherwise hold again under the same id.
func TestEditUnderReceiver_HoldsBucketDeleted(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.holdOK(holdReq("h", fixScope))
	db := f.r.eng.(*boltengine.Engine).DB()
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketHolds) }); err != nil {
		t.Fatal(err)
	}
	head := f.r.Head()
	if res, err := f.admin.Hold(f.ctx, holdReq("h", fixScope)); !errors.Is(err, ErrStateMismatch) || f.r.Head() != head {
		t.Fatalf("Hold after the holds bucket was deleted = %+v, %v; want ErrStateMismatch and nothing written", res, err)
	}
	// Put back, for the test's cleanup.
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(bucketHolds)
		if err != nil {
			return err
		}
		return b.Put(holdKey(fixScope, "h"), mustEncode(t, &holdRecord{}))
	}); err != nil {
		t.Fatal(err)
	}
	f.r.trustStore(t)
}
