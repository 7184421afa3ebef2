package kvfence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"github.com/kvfence/kvfence/engine"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
	bolt "go.etcd.io/bbolt"
)

// fuzzReceiver is a receiver in a known state for FuzzSubmit: scope fixScope
// at epoch 2, open with grant cur for worker-b; worker-a's grant stale
// (epoch 1, superseded by a hold). Grant ids come from a seeded generator,
// so the envelopes of the seed corpus name real grants.
type fuzzReceiver struct {
	r          *Receiver
	cur, stale Grant
	runs       int
}

// fuzzClock is the receiver's clock during fuzzing: inside both grants'
// windows, whatever the wall clock says.
var fuzzClock = newClock()

func newFuzzReceiver(tb testing.TB, dir string) *fuzzReceiver {
	tb.Helper()
	path := filepath.Join(dir, "fuzz.db")
	os.Remove(path)
	anchor := &audit.MemAnchor{}
	if err := Init(path, &InitOptions{ReceiverID: "fuzz", Key: testKey, Anchor: anchor, Now: fuzzClock.Now}); err != nil {
		tb.Fatal(err)
	}
	r, err := Open(path, &Options{Key: testKey, Anchor: anchor, Now: fuzzClock.Now, NoSync: true,
		Rand: rand.NewChaCha8([32]byte{'k', 'v', 'f', 'e', 'n', 'c', 'e'})})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, admin := context.Background(), r.Admin()
	if _, err := admin.CreateScope(ctx, fixScope); err != nil {
		tb.Fatal(err)
	}
	if _, err := admin.CreateTarget(ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
		tb.Fatal(err)
	}
	req := fuzzRequest()
	stale, err := admin.Activate(ctx, ActivateRequest{Scope: fixScope, Executor: "worker-a", Claim: "claim-1", Request: req})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := admin.Hold(ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "lease expired"}); err != nil {
		tb.Fatal(err)
	}
	cur, err := admin.Activate(ctx, ActivateRequest{Scope: fixScope, Executor: "worker-b", Claim: "claim-2", Request: req})
	if err != nil {
		tb.Fatal(err)
	}
	return &fuzzReceiver{r: r, cur: cur, stale: stale}
}

func fuzzRequest() []byte {
	b, err := EncodeRequest(&Request{V: 1, Action: "raise-retention", Target: fixTarget, Patch: []byte(fixPatch)})
	if err != nil {
		panic(err)
	}
	return b
}

func fuzzEnvelope(g Grant, epoch uint64, executor string) []byte {
	b, err := EncodeEnvelope(&Envelope{V: 1, Scope: g.Scope, Epoch: epoch, Grant: g.ID, Executor: executor,
		Claim: g.Claim, Request: fuzzRequest()})
	if err != nil {
		panic(err)
	}
	return b
}

// fuzzState is what a submit without a valid grant must leave as it was.
type fuzzState struct {
	head     uint64
	rev      uint64
	value    string
	epoch    uint64
	mode     Mode
	active   string
	receipts int
}

func (h *fuzzReceiver) state(t *testing.T) fuzzState {
	t.Helper()
	tg, err := h.r.Target(fixTarget)
	if err != nil {
		t.Fatal(err)
	}
	st, err := h.r.Status(fixScope)
	if err != nil {
		t.Fatal(err)
	}
	s := fuzzState{head: h.r.Head().Seq, rev: tg.Revision, value: string(tg.Value), epoch: st.Epoch, mode: st.Mode, active: st.ActiveGrant}
	if err := h.r.view(func(tx engine.Tx) error {
		s.receipts = 0
		return tx.Scan(bucketReceipts, nil, func(_, _ []byte) error { s.receipts++; return nil })
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// FuzzSubmit submits arbitrary bytes as arbitrary callers to a live
// receiver. No input may panic, and none may change state without the
// current grant: unless the envelope is exactly the current grant's,
// presented by its executor, the target and the receipts stay as they
// were and the decision is one denial in the audit chain (or an error for
// a caller name that is not an identifier, with no entry at all).
func FuzzSubmit(f *testing.F) {
	dir := f.TempDir()
	h := newFuzzReceiver(f, dir)
	f.Cleanup(func() { h.r.Close() })
	valid := fuzzEnvelope(h.cur, h.cur.Epoch, "worker-b")
	f.Add("worker-b", valid)
	f.Add("worker-a", fuzzEnvelope(h.stale, h.stale.Epoch, "worker-a"))
	f.Add("worker-a", fuzzEnvelope(h.stale, h.cur.Epoch, "worker-a"))
	f.Add("worker-a", valid)
	f.Add("worker-b", fuzzEnvelope(h.cur, h.cur.Epoch, "worker-a"))
	f.Add("worker-b", valid[:len(valid)-1])
	f.Add("worker-b", append(bytes.Clone(valid), 0))
	f.Add("", valid)
	f.Add("worker-b", []byte{})
	f.Add("worker-b", []byte{0xa0})
	f.Fuzz(func(t *testing.T, caller string, env []byte) {
		if h.runs++; h.runs%4096 == 0 {
			// Keep the database small, and the applied action applicable.
			h.r.Close()
			h = newFuzzReceiver(t, dir)
		}
		before := h.state(t)
		res, err := h.r.Submit(context.Background(), caller, env)
		after := h.state(t)
		if checkName("caller", caller) != nil {
			if !errors.Is(err, ErrInvalidArgument) || after != before {
				t.Fatalf("caller %q: %+v, %v; state %+v -> %+v", caller, res, err, before, after)
			}
			return
		}
		if err != nil {
			t.Fatalf("Submit: %v", err)
		}
		if after.head != before.head+1 || res.AuditSeq != after.head {
			t.Fatalf("decision %+v recorded as seq %d; head %d -> %d, want exactly one entry", res, res.AuditSeq, before.head, after.head)
		}
		var entry audit.Entry
		if err := h.r.Events(after.head, func(e Event) bool { entry = e.Entry; return false }); err != nil {
			t.Fatal(err)
		}
		if entry.Kind != KindSubmit || entry.Outcome != string(res.Outcome) || entry.Reason != string(res.Reason) || entry.Executor != caller {
			t.Fatalf("result %+v, audit entry %+v", res, entry)
		}
		legit := bytes.Equal(env, valid) && caller == "worker-b"
		switch {
		case res.Outcome == Denied:
		case !legit:
			t.Fatalf("%q from %q: %+v without the current grant's exact envelope", env, caller, res)
		case res.Outcome == Applied:
			if after.rev != before.rev+1 || after.receipts != before.receipts+1 {
				t.Fatalf("applied, but target %d -> %d and receipts %d -> %d", before.rev, after.rev, before.receipts, after.receipts)
			}
			return
		}
		// Nothing but the denial counters may change.
		if after.head--; after != before {
			t.Fatalf("%s from %q changed the state: %+v -> %+v", res.Outcome, caller, before, after)
		}
	})
}

// FuzzDecodeRecord feeds arbitrary bytes to the decoder of stored records
// (control, grant, target, receipt, hold), as a damaged database would. It must
// not panic, must report every refusal as ErrBadFormat, and what it
// accepts must survive a round trip unchanged.
func FuzzDecodeRecord(f *testing.F) {
	seeds := []any{
		&controlRecord{Epoch: 3, Mode: ModeOpen, ActiveGrant: "g", CreatedAt: 1, Denials: map[Reason]uint64{ReasonStaleEpoch: 2}},
		&grantRecord{ID: "g", Scope: "s", Epoch: 1, Executor: "w", Claim: "c", Action: "a", RequestSHA256: make([]byte, 32), NotBefore: 1, NotAfter: 2},
		&targetRecord{Scope: "s", Revision: 1, Value: []byte(fixValue)},
		&receiptRecord{Grant: "g", RequestSHA256: make([]byte, 32), Target: "t", RevBefore: 1, RevAfter: 2, AuditSeq: 9, At: 5},
		&holdRecord{Request: make([]byte, 32), PreviousEpoch: 1, Epoch: 2, RequestedAt: 3, CommittedAt: 4, AuditSeq: 5},
	}
	for i, v := range seeds {
		raw, err := encodeCanonical(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), raw)
	}
	f.Add(uint8(0), []byte{0xa0})
	// A func target's record, whose two more fields the reflection
	// decoder reads.
	if raw, err := encodeCanonical(&targetRecord{Scope: "s", Revision: 2, Value: []byte("{}"), Kind: TargetFunc, Effect: "e"}); err == nil {
		f.Add(uint8(2), raw)
	}
	// An etcd target's record: a key, an empty value and the digest of
	// the value written.
	if raw, err := encodeCanonical(&targetRecord{Scope: "s", Revision: 3, Value: []byte{}, Kind: TargetEtcd, Key: "/app/policy",
		ValueSHA256: make([]byte, 32)}); err == nil {
		f.Add(uint8(2), raw)
	}
	f.Fuzz(func(t *testing.T, kind uint8, raw []byte) {
		fresh := []func() any{
			func() any { return new(controlRecord) },
			func() any { return new(grantRecord) },
			func() any { return new(targetRecord) },
			func() any { return new(receiptRecord) },
			func() any { return new(holdRecord) },
		}[kind%5]
		v := fresh()
		if kind%5 == 2 {
			// The kind's rules: a record they refuse is corruption,
			// never an internal target; one they accept names a key
			// only for the etcd kind.
			if tr, err := parseTargetKey([]byte("k"), raw); err != nil && !errors.Is(err, ErrBadFormat) {
				t.Fatalf("target error %v does not wrap ErrBadFormat", err)
			} else if err == nil && (tr.Key != "") != (tr.Kind == TargetEtcd) {
				t.Fatalf("accepted target %+v", tr)
			}
		}
		if err := decodeRecord(bucketControl, []byte("k"), raw, v); err != nil {
			if !errors.Is(err, ErrBadFormat) {
				t.Fatalf("error %v does not wrap ErrBadFormat", err)
			}
			return
		}
		again, err := encodeCanonical(v)
		if err != nil {
			t.Fatalf("accepted %x does not encode: %v", raw, err)
		}
		w := fresh()
		if err := decodeRecord(bucketControl, []byte("k"), again, w); err != nil || !reflect.DeepEqual(v, w) {
			t.Fatalf("round trip of %x: %+v -> %x -> %+v, %v", raw, v, again, w, err)
		}
	})
}

// fuzzDatabase returns a small receiver database for FuzzCheckPages,
// rewritten with 1 KiB pages and cut to the pages bbolt uses, so that the
// fuzzer mutates kilobytes, not tens of them.
func fuzzDatabase(tb testing.TB, activity int) []byte {
	tb.Helper()
	f := newFixture(tb, defect.Variant{})
	for i := range activity {
		w := f.activate("w"+strconv.Itoa(i), "c", f.request(&Request{V: 1, Action: "a" + strconv.Itoa(i), Target: fixTarget,
			Set: ptr([]byte(strconv.Itoa(i)))}))
		f.submit(w.name, w.envelope)
		f.hold("h")
	}
	f.r.Close()
	defer f.reopen()
	small := filepath.Join(filepath.Dir(f.path), "small.db")
	src, err := bolt.Open(f.path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer src.Close()
	dst, err := bolt.Open(small, 0o600, &bolt.Options{PageSize: 1024})
	if err != nil {
		tb.Fatal(err)
	}
	if err := bolt.Compact(dst, src, 0); err != nil {
		tb.Fatal(err)
	}
	dst.Close()
	data, err := os.ReadFile(small)
	if err != nil {
		tb.Fatal(err)
	}
	c := &pageChecker{r: bytes.NewReader(data), size: int64(len(data))}
	if err := c.meta(); err != nil {
		tb.Fatal(err)
	}
	return data[:int64(c.m.pgid)*c.pageSize]
}

// FuzzCheckPages feeds arbitrary files to the page check and, when it
// accepts one, to the receiver: opening, reading and writing must return
// errors or results, never panic or crash the process. The crash would be
// bbolt following a damaged page the check let through.
func FuzzCheckPages(f *testing.F) {
	f.Add(fuzzDatabase(f, 0))
	f.Add(fuzzDatabase(f, 6))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := checkPages(bytes.NewReader(data), int64(len(data))); err != nil {
			if !errors.Is(err, errPages) {
				t.Fatalf("error %v does not wrap errPages", err)
			}
			return
		}
		path := filepath.Join(dir, "check.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := Open(path, &Options{ReadOnly: true, LockTimeout: -1})
		if err != nil {
			return
		}
		r.Scopes()
		r.Target(fixTarget)
		r.Events(0, func(Event) bool { return true })
		r.Close()
		w, err := open(path, &Options{Key: testKey, NoSync: true, LockTimeout: -1, Now: fuzzClock.Now},
			defect.Variant{SkipAnchor: true})
		if err != nil {
			return
		}
		defer w.Close()
		ctx := context.Background()
		w.Admin().CreateScope(ctx, "fuzz/scope")
		w.Admin().CreateTarget(ctx, "fuzz/scope", "fuzz/target", []byte("v"))
		w.Admin().Hold(ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "fuzz"})
		sum := sha256.Sum256(data)
		w.Submit(ctx, "w", sum[:])
	})
}

// Ensure that the fuzz targets' fixtures reach what they are for: the
// valid envelope of FuzzSubmit applies once and then answers
// already_applied, and FuzzCheckPages' seed databases pass the page check
// and open as receivers.
func TestFuzzFixtures(t *testing.T) {
	h := newFuzzReceiver(t, t.TempDir())
	defer h.r.Close()
	valid := fuzzEnvelope(h.cur, h.cur.Epoch, "worker-b")
	for _, want := range []Outcome{Applied, AlreadyApplied} {
		if res, err := h.r.Submit(t.Context(), "worker-b", valid); err != nil || res.Outcome != want {
			t.Fatalf("valid envelope: %+v, %v, want %s", res, err, want)
		}
	}
	res, err := h.r.Submit(t.Context(), "worker-a", fuzzEnvelope(h.stale, h.stale.Epoch, "worker-a"))
	if err != nil || res.Outcome != Denied || res.Reason != ReasonStaleEpoch {
		t.Fatalf("stale envelope: %+v, %v", res, err)
	}
	for _, n := range []int{0, 6} {
		data := fuzzDatabase(t, n)
		if err := checkPages(bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatalf("seed database %d: %v", n, err)
		}
		path := filepath.Join(t.TempDir(), "seed.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := Open(path, &Options{ReadOnly: true})
		if err != nil {
			t.Fatalf("seed database %d: %v", n, err)
		}
		r.Close()
	}
}
