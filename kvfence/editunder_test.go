package kvfence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/defect"
)

// rawGet reads a record from the receiver's store directly, as someone
// with read access to the store would.
func rawGet(t testing.TB, r *Receiver, bucket []byte, key string) []byte {
	t.Helper()
	var out []byte
	err := r.eng.View(context.Background(), func(tx engine.Tx) error {
		v, err := tx.Get(bucket, []byte(key))
		out = bytes.Clone(v)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// storePut writes (or, for nil, deletes) a record around the receiver: on
// etcd with a client of its own, as an etcd user of the prefix would; on
// bbolt through the engine's handle, as a process writing the file would.
func storePut(t testing.TB, f *fixture, bucket []byte, key string, raw []byte) {
	t.Helper()
	if f.store != nil && f.store.prefix != "" {
		cli := etcdClient(t)
		defer cli.Close()
		k := f.store.prefix + string(bucket) + "/" + key
		var err error
		if raw == nil {
			_, err = cli.Delete(context.Background(), k)
		} else {
			_, err = cli.Put(context.Background(), k, string(raw))
		}
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	err := f.r.rawUpdate(func(tx engine.Tx) error {
		if raw == nil {
			return tx.Delete(bucket, []byte(key))
		}
		return tx.Put(bucket, []byte(key), raw)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// wantNothingWritten fails unless the call failed with ErrStateMismatch
// and the chain's head and the target are as before.
func wantMismatch(t testing.TB, f *fixture, res Result, err error, head audit.Head, rev uint64, value string) {
	t.Helper()
	if !errors.Is(err, ErrStateMismatch) || res.Outcome != "" {
		t.Fatalf("Submit = %+v, %v; want ErrStateMismatch and no result", res, err)
	}
	if f.r.head != head {
		t.Fatalf("head moved from %v to %v: something was written", head, f.r.head)
	}
	got := rawGet(t, f.r, bucketAudit, string(audit.SeqKey(head.Seq+1)))
	if got != nil {
		t.Fatalf("an entry after the head was written")
	}
	f.wantTarget(rev, value)
}

// Ensure that a record put back under a running receiver is never the
// basis of a decision (issue 19, item 2): the control record of an open
// scope is saved, the scope is held, the saved "open" bytes are put back,
// and the stale worker's envelope is refused with ErrStateMismatch, with
// nothing written; once the "held" bytes are back, the receiver decides
// again, and the chain verifies.
func TestEditUnderReceiver_ControlPutBack(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
		open := rawGet(t, f.r, bucketControl, fixScope)
		f.hold("worker-a lease expired")
		held := rawGet(t, f.r, bucketControl, fixScope)
		storePut(t, f, bucketControl, fixScope, open)
		head := f.r.head
		res, err := f.r.Submit(f.ctx, "worker-a", a.envelope)
		wantMismatch(t, f, res, err, head, 1, fixValue)
		// A hold reads the record too, and refuses it the same way.
		if _, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "again"}); !errors.Is(err, ErrStateMismatch) {
			t.Fatalf("Hold on an edited record = %v, want ErrStateMismatch", err)
		}
		storePut(t, f, bucketControl, fixScope, held)
		wantDenied(t, f.submit("worker-a", a.envelope), ReasonReceiverHeld)
		f.wantTarget(1, fixValue)
		f.r.Close()
		rep, err := f.store.verify(t, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
		if err != nil || !rep.OK() {
			t.Fatalf("verify-chain = %s: %s (%v)", rep.Problem, rep.Detail, err)
		}
		f.reopen()
	})
}

// Ensure that an edit of each record kind a decision reads is refused:
// the grant (made to name the caller), the target (its value put back to
// what a precondition expects), a receipt deleted (so that an applied
// request would apply again) and a record added that the receiver never
// wrote. Each is an ErrStateMismatch with nothing written, on both
// engines.
func TestEditUnderReceiver_EachRecord(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		for _, tc := range []struct {
			name string
			// edit changes the store; it returns the caller and envelope
			// to submit, and the target's revision and value before.
			edit func(t *testing.T, f *fixture, a worker) (string, []byte, uint64, string)
		}{
			{"grant executor", func(t *testing.T, f *fixture, a worker) (string, []byte, uint64, string) {
				raw := rawGet(t, f.r, bucketGrants, a.grant.ID)
				g, err := parseGrantKey([]byte(a.grant.ID), raw)
				if err != nil {
					t.Fatal(err)
				}
				g.Executor = "mallory"
				storePut(t, f, bucketGrants, a.grant.ID, mustEncode(t, g))
				env := f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: a.grant.Epoch, Grant: a.grant.ID, Executor: "mallory",
					Claim: "claim-1", Request: f.patchRequest("raise-retention")})
				return "mallory", env, 1, fixValue
			}},
			{"target value", func(t *testing.T, f *fixture, a worker) (string, []byte, uint64, string) {
				if res := f.submit(a.name, a.envelope); res.Outcome != Applied {
					t.Fatalf("first submit: %+v", res)
				}
				b := f.activateAfterHold("worker-b", f.patchRequest("again"))
				raw := rawGet(t, f.r, bucketTargets, fixTarget)
				tg, err := parseTargetKey([]byte(fixTarget), raw)
				if err != nil {
					t.Fatal(err)
				}
				tg.Value = []byte(fixValue)
				storePut(t, f, bucketTargets, fixTarget, mustEncode(t, tg))
				return "worker-b", b.envelope, 2, fixValue
			}},
			{"receipt deleted", func(t *testing.T, f *fixture, a worker) (string, []byte, uint64, string) {
				if res := f.submit(a.name, a.envelope); res.Outcome != Applied {
					t.Fatalf("first submit: %+v", res)
				}
				storePut(t, f, bucketReceipts, string(receiptKey(fixScope, "raise-retention")), nil)
				return a.name, a.envelope, 2, fixAfter
			}},
			{"receipt added", func(t *testing.T, f *fixture, a worker) (string, []byte, uint64, string) {
				rc := &receiptRecord{Grant: a.grant.ID, RequestSHA256: bytes.Repeat([]byte{1}, 32), Target: fixTarget, RevBefore: 1, RevAfter: 2, AuditSeq: 1}
				storePut(t, f, bucketReceipts, string(receiptKey(fixScope, "raise-retention")), mustEncode(t, rc))
				return a.name, a.envelope, 1, fixValue
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := newFixtureOn(t, s, defect.Variant{})
				a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
				caller, env, rev, value := tc.edit(t, f, a)
				head := f.r.head
				res, err := f.r.Submit(f.ctx, caller, env)
				wantMismatch(t, f, res, err, head, rev, value)
				// The fixture's cleanup verifies the chain, which the
				// refused call did not touch; the edited store is put
				// right first by reopening it as found is refused too.
				f.r.Close()
				if _, err := f.openStore(f.opts(), defect.Variant{}); !errors.Is(err, ErrStateMismatch) {
					t.Fatalf("reopen of the edited store = %v, want ErrStateMismatch", err)
				}
				r, err := f.openStore(&Options{ReadOnly: true}, defect.Variant{})
				if err != nil {
					t.Fatal(err)
				}
				f.r = r
			})
		}
	})
}

// activateAfterHold holds the fixture scope and activates a grant for
// name with req.
func (f *fixture) activateAfterHold(name string, req []byte) worker {
	f.t.Helper()
	f.hold("next")
	return f.activate(name, "claim-2", req)
}

func mustEncode(t testing.TB, v any) []byte {
	t.Helper()
	raw, err := encodeCanonical(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Ensure that the known records learn only what committed: an activation
// and an applied write whose transactions roll back leave no record and
// no new bytes behind, and the receiver decides on as before.
func TestEditUnderReceiver_RolledBackBatch(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	known := f.r.known.records()
	// An activation whose audit entry cannot be written rolls back: its
	// grant must not become a known record, nor its control record's new
	// bytes.
	f.hold("for b")
	ctl := rawGet(t, f.r, bucketControl, fixScope)
	fail := errors.New("injected")
	f.r.faults.beforeAudit = func(e *audit.Entry) error {
		if e.Kind == KindActivate {
			return fail
		}
		return nil
	}
	_, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: fixScope, Executor: "worker-b", Claim: "c", Request: f.patchRequest("x")})
	if !errors.Is(err, fail) {
		t.Fatalf("Activate = %v, want the injected fault", err)
	}
	f.r.faults.beforeAudit = nil
	if got := f.r.known.records(); got != known {
		t.Fatalf("known records %d after a rolled-back activation, want %d", got, known)
	}
	var x txRecords
	x.reset(f.r.known)
	if _, err := x.check(0, []byte(fixScope), ctl); err != nil {
		t.Fatalf("the committed control record is not the known one: %v", err)
	}
	// Calls of one batch: a fault on one makes the batch roll back and
	// its calls run alone; the others commit and are known.
	b := f.activate("worker-b", "claim-2", f.patchRequest("raise-retention"))
	f.r.faults.beforeReceipt = func(scope, action string) error {
		return fail
	}
	known = f.r.known.records()
	_, err = f.r.Submit(f.ctx, "worker-b", b.envelope)
	if !errors.Is(err, fail) {
		t.Fatalf("Submit = %v, want the injected fault", err)
	}
	f.r.faults.beforeReceipt = nil
	if got := f.r.known.records(); got != known {
		t.Fatalf("known records %d after a rolled-back submit, want %d", got, known)
	}
	res := f.submit("worker-a", a.envelope)
	wantDenied(t, res, ReasonStaleEpoch)
	if res := f.submit("worker-b", b.envelope); res.Outcome != Applied {
		t.Fatalf("worker-b after the fault: %+v", res)
	}
}

// Ensure that the bound on known records fails closed: Open refuses a
// store with more records than Options.MaxRecords; at the bound, a call
// that would create a record writes nothing and says so, while a hold and
// a denial, which rewrite records, still commit.
func TestEditUnderReceiver_RecordLimit(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	n := f.r.known.records() // control, target, grant
	if n != 3 {
		t.Fatalf("known records = %d, want 3", n)
	}
	f.r.Close()
	opts := f.opts()
	opts.MaxRecords = n - 1
	if _, err := f.openStore(opts, defect.Variant{}); !errors.Is(err, ErrRecordLimit) {
		t.Fatalf("Open with a bound below the store = %v, want ErrRecordLimit", err)
	}
	opts.MaxRecords = n
	r, err := f.openStore(opts, defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	f.r, f.admin = r, r.Admin()
	head := f.r.head
	// An applied write would add a receipt.
	res, err := f.r.Submit(f.ctx, "worker-a", a.envelope)
	if !errors.Is(err, ErrRecordLimit) || f.r.head != head {
		t.Fatalf("Submit at the bound = %+v, %v (head %v, was %v); want ErrRecordLimit and nothing written", res, err, f.r.head, head)
	}
	f.wantTarget(1, fixValue)
	f.hold("at the bound")
	wantDenied(t, f.submit("worker-a", a.envelope), ReasonReceiverHeld)
	if _, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: fixScope, Executor: "w", Claim: "c", Request: f.patchRequest("y")}); !errors.Is(err, ErrRecordLimit) {
		t.Fatalf("Activate at the bound = %v, want ErrRecordLimit", err)
	}
}

// Ensure that Open refuses a store whose chain records a fence violation,
// as verify-chain reports it: a receiver without checks 2-4 applies a
// superseded grant, and every later Open, writable or read-only with the
// anchor, is ErrFenceViolation (an integrity error, exit 4).
func TestOpen_RefusesFenceViolation(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		for _, tc := range []struct {
			name      string
			v         defect.Variant
			violation bool
		}{
			{"correct receiver", defect.Variant{}, false},
			{"receiver without checks 2-4", defect.Variant{SkipAuthority: true}, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := newFixtureOn(t, s, tc.v)
				a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
				f.hold("worker-a lease expired")
				stale := f.submit("worker-a", a.envelope)
				if tc.violation != (stale.Outcome == Applied) {
					t.Fatalf("stale submit: %+v", stale)
				}
				f.r.Close()
				for _, opts := range []*Options{f.opts(), {ReadOnly: true, Anchor: f.anchor}} {
					r, err := f.openStore(opts, defect.Variant{})
					if !tc.violation {
						if err != nil {
							t.Fatalf("Open: %v", err)
						}
						r.Close()
						continue
					}
					var fv *audit.FenceViolationError
					if !errors.Is(err, ErrFenceViolation) || !errors.As(err, &fv) || fv.Seq != stale.AuditSeq || !IsIntegrityError(err) {
						t.Fatalf("Open (read-only %v) = %v, want the fence violation at seq %d", opts.ReadOnly, err, stale.AuditSeq)
					}
				}
				rep, err := f.store.verify(t, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
				if err != nil || (rep.Problem == audit.ProblemFenceViolation) != tc.violation {
					t.Fatalf("verify-chain = %s, %v", rep.Problem, err)
				}
				r, err := f.openStore(&Options{ReadOnly: true}, defect.Variant{})
				if err != nil {
					t.Fatal(err)
				}
				f.r = r
			})
		}
	})
}

// Ensure that a second writer of an etcd prefix that moves the head with a
// signed checkpoint (another receiver process) is followed: its records
// are learned only from a full re-verification against that checkpoint,
// and an edit made beside its commit is refused.
func TestEditUnderReceiver_SecondEtcdWriter(t *testing.T) {
	s := engines[1].new(t)
	f := newFixtureOn(t, s, defect.Variant{})
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	other, err := f.openStore(f.opts(), defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	open := rawGet(t, f.r, bucketControl, fixScope)
	// The other process holds the scope; this one follows.
	if _, err := other.Admin().Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "other"}); err != nil {
		t.Fatal(err)
	}
	wantDenied(t, f.submit("worker-a", a.envelope), ReasonReceiverHeld)
	// The other process commits again, and beside its commit the open
	// bytes are put back: the re-verification finds the digest wrong.
	if _, err := other.Admin().Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "other again"}); err != nil {
		t.Fatal(err)
	}
	held := rawGet(t, f.r, bucketControl, fixScope)
	storePut(t, f, bucketControl, fixScope, open)
	if res, err := f.r.Submit(f.ctx, "worker-a", a.envelope); !errors.Is(err, ErrStateMismatch) {
		t.Fatalf("Submit after a foreign commit and an edit = %+v, %v; want ErrStateMismatch", res, err)
	}
	storePut(t, f, bucketControl, fixScope, held)
	// (A head moved without a checkpoint of this receiver is refused as
	// before: TestRedteam_ForeignHeadNeedsItsSignedCheckpoint.)
	wantDenied(t, f.submit("worker-a", a.envelope), ReasonReceiverHeld)
	f.r.Close()
	r, err := f.openStore(&Options{ReadOnly: true}, defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	f.r = r
}

// Ensure that an edit made on etcd while a decision's transaction runs,
// after its reads and before its commit, is refused too: the commit's
// compare fails, the decision runs again on the edited record, and that
// run finds it is not the record the receiver knows.
func TestEditUnderReceiver_DuringTransactionEtcd(t *testing.T) {
	f := newFixtureOn(t, engines[1].new(t), defect.Variant{})
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	open := rawGet(t, f.r, bucketControl, fixScope)
	f.hold("worker-a lease expired")
	held := rawGet(t, f.r, bucketControl, fixScope)
	runs := 0
	f.r.faults.beforeAudit = func(*audit.Entry) error {
		if runs++; runs == 1 {
			storePut(t, f, bucketControl, fixScope, open)
		}
		return nil
	}
	head := f.r.head
	res, err := f.r.Submit(f.ctx, "worker-a", a.envelope)
	f.r.faults.beforeAudit = nil
	wantMismatch(t, f, res, err, head, 1, fixValue)
	if runs != 1 {
		t.Fatalf("the decision ran %d times past its reads, want 1: the second run must stop at the edited record", runs)
	}
	storePut(t, f, bucketControl, fixScope, held)
	wantDenied(t, f.submit("worker-a", a.envelope), ReasonReceiverHeld)
}

// Ensure that HoldAll, the incident button, is not fooled by a control
// record deleted under the running receiver: the scan would not find that
// scope, which would stay open (and apply its stale worker's writes once
// the bytes are put back) under a hold that reported success. HoldAll is
// refused instead, writing nothing, and holds the scope once its record is
// back.
func TestEditUnderReceiver_HoldAllDeletedScope(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		if _, err := f.admin.CreateScope(f.ctx, "other"); err != nil {
			t.Fatal(err)
		}
		a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
		open := rawGet(t, f.r, bucketControl, fixScope)
		storePut(t, f, bucketControl, fixScope, nil)
		head := f.r.head
		if _, err := f.admin.HoldAll(f.ctx, "incident"); !errors.Is(err, ErrStateMismatch) || f.r.head != head {
			t.Fatalf("HoldAll with a scope deleted = %v; want ErrStateMismatch and nothing written", err)
		}
		storePut(t, f, bucketControl, fixScope, open)
		res, err := f.admin.HoldAll(f.ctx, "incident")
		if err != nil || len(res.Scopes) != 1 || res.Scopes[0].Scope != fixScope {
			t.Fatalf("HoldAll = %+v, %v; want %s held", res, err, fixScope)
		}
		wantDenied(t, f.submit("worker-a", a.envelope), ReasonReceiverHeld)
	})
}
