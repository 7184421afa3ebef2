package kvfence

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// staleWorker runs the paused-worker schedule: A is activated, pauses, the
// scope is held and B activated; A's request then arrives before B writes.
// It returns A's result and leaves B's worker for the caller.
func staleWorker(t *testing.T, f *fixture) (Result, worker) {
	t.Helper()
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	f.hold("worker-a lease expired")
	b := f.activate("worker-b", "claim-2", f.patchRequest("raise-retention"))
	return f.submit("worker-a", a.envelope), b
}

// Ensure that a paused worker's request, arriving after the hold and the
// successor's activation but before the successor's first write, is denied
// and leaves the target untouched; the successor then applies the change.
func TestSubmit_StaleWorkerRejectedBeforeSuccessorWrites(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		res, b := staleWorker(t, f)
		wantDenied(t, res, ReasonStaleEpoch)
		f.wantTarget(1, fixValue)

		res = f.submit("worker-b", b.envelope)
		if res.Outcome != Applied || res.Revision != 2 {
			t.Fatalf("worker B: %+v, want applied at revision 2", res)
		}
		f.wantTarget(2, fixAfter)

		st, err := f.r.Status(fixScope)
		if err != nil {
			t.Fatal(err)
		}
		if st.StaleRejections != 1 || st.LastStaleRejectionAt.IsZero() || st.Denials[ReasonStaleEpoch] != 1 {
			t.Fatalf("status after stale rejection: %+v", st)
		}
		if st.HoldRequestedAt.IsZero() || st.HoldCommittedAt.IsZero() || st.ActivatedAt.IsZero() {
			t.Fatalf("status timestamps missing: %+v", st)
		}
	})
}

// Ensure that the stale-worker test goes red when checks 2-4 are removed:
// the defective receiver applies A's superseded request.
func TestSubmit_DefectiveReceiverAcceptsStaleWorker(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{SkipAuthority: true})
		res, _ := staleWorker(t, f)
		if res.Outcome != Applied {
			t.Fatalf("defective receiver: %+v; the stale-worker test cannot go red without checks 2-4", res)
		}
		f.wantTarget(2, fixAfter)
	})
}

// Ensure that every check of docs/design.md §4 denies with its own reason and
// changes nothing.
func TestSubmit_Denials(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		tests := []struct {
			name   string
			reason Reason
			// run sets up state and returns the caller and envelope to submit.
			run func(f *fixture) (string, []byte)
		}{
			{"unknown scope", ReasonUnknownScope, func(f *fixture) (string, []byte) {
				a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
				return "worker-a", f.envelope(&Envelope{V: 1, Scope: "no/such/scope", Epoch: 1, Grant: a.grant.ID,
					Executor: "worker-a", Claim: "claim-1", Request: f.patchRequest("act")})
			}},
			{"held, never activated", ReasonReceiverHeld, func(f *fixture) (string, []byte) {
				return "worker-a", f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: 1, Grant: "00000000000000000000000000000000",
					Executor: "worker-a", Claim: "claim-1", Request: f.patchRequest("act")})
			}},
			{"old request during the held interval", ReasonReceiverHeld, func(f *fixture) (string, []byte) {
				a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
				f.hold("lease expired")
				return "worker-a", a.envelope
			}},
			{"old request after successor activation", ReasonStaleEpoch, func(f *fixture) (string, []byte) {
				a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
				f.hold("lease expired")
				f.activate("worker-b", "claim-2", f.patchRequest("act"))
				return "worker-a", a.envelope
			}},
			{"old request copies the new epoch", ReasonInactiveGrant, func(f *fixture) (string, []byte) {
				a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
				f.hold("lease expired")
				b := f.activate("worker-b", "claim-2", f.patchRequest("act"))
				return "worker-a", f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: b.grant.Epoch, Grant: a.grant.ID,
					Executor: "worker-a", Claim: "claim-1", Request: f.patchRequest("act")})
			}},
			{"old request copies the new epoch and grant id", ReasonExecutorMismatch, func(f *fixture) (string, []byte) {
				f.activate("worker-a", "claim-1", f.patchRequest("act"))
				f.hold("lease expired")
				b := f.activate("worker-b", "claim-2", f.patchRequest("act"))
				return "worker-a", f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: b.grant.Epoch, Grant: b.grant.ID,
					Executor: "worker-a", Claim: "claim-1", Request: f.patchRequest("act")})
			}},
			{"old request copies epoch, grant, executor and claim", ReasonExecutorMismatch, func(f *fixture) (string, []byte) {
				f.activate("worker-a", "claim-1", f.patchRequest("act"))
				f.hold("lease expired")
				b := f.activate("worker-b", "claim-2", f.patchRequest("act"))
				return "worker-a", b.envelope
			}},
			{"grant from another scope", ReasonUnknownGrant, func(f *fixture) (string, []byte) {
				if _, err := f.admin.CreateScope(f.ctx, "other"); err != nil {
					f.t.Fatal(err)
				}
				if _, err := f.admin.CreateTarget(f.ctx, "other", "other-target", []byte("x")); err != nil {
					f.t.Fatal(err)
				}
				req := f.request(&Request{V: 1, Action: "act", Target: "other-target", Set: ptr([]byte("y"))})
				g, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: "other", Executor: "worker-a", Claim: "claim-1", Request: req})
				if err != nil {
					f.t.Fatal(err)
				}
				// The defective variant is not used here, so checks 2-4 pass only if
				// the fixture scope's active grant is the other scope's grant; make
				// the fixture scope open under a grant and then forge its record.
				f.activate("worker-a", "claim-1", f.patchRequest("act"))
				forgeActiveGrant(f, g.ID)
				return "worker-a", f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: 1, Grant: g.ID,
					Executor: "worker-a", Claim: "claim-1", Request: req})
			}},
			{"caller is not the executor", ReasonExecutorMismatch, func(f *fixture) (string, []byte) {
				a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
				return "worker-z", a.envelope
			}},
			{"envelope executor differs from grant", ReasonExecutorMismatch, func(f *fixture) (string, []byte) {
				a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
				return "worker-z", f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: 1, Grant: a.grant.ID,
					Executor: "worker-z", Claim: "claim-1", Request: f.patchRequest("act")})
			}},
			{"claim mismatch", ReasonClaimMismatch, func(f *fixture) (string, []byte) {
				a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
				return "worker-a", f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: 1, Grant: a.grant.ID,
					Executor: "worker-a", Claim: "claim-9", Request: f.patchRequest("act")})
			}},
			{"request with one flipped byte", ReasonRequestMismatch, func(f *fixture) (string, []byte) {
				req := f.patchRequest("act")
				a := f.activate("worker-a", "claim-1", req)
				changed := bytes.Replace(req, []byte(`"45"`), []byte(`"46"`), 1)
				if bytes.Equal(changed, req) {
					f.t.Fatal("fixture patch does not contain \"45\"")
				}
				return "worker-a", f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: 1, Grant: a.grant.ID,
					Executor: "worker-a", Claim: "claim-1", Request: changed})
			}},
			{"not yet valid", ReasonGrantNotYetValid, func(f *fixture) (string, []byte) {
				req := f.patchRequest("act")
				g, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: fixScope, Executor: "worker-a", Claim: "claim-1",
					Request: req, NotBefore: f.clock.Now().Add(time.Minute)})
				if err != nil {
					f.t.Fatal(err)
				}
				return "worker-a", f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: 1, Grant: g.ID,
					Executor: "worker-a", Claim: "claim-1", Request: req})
			}},
			{"expired", ReasonGrantExpired, func(f *fixture) (string, []byte) {
				a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
				f.clock.Add(DefaultGrantTTL)
				return "worker-a", a.envelope
			}},
			{"unknown target", ReasonUnknownTarget, func(f *fixture) (string, []byte) {
				req := f.patchRequest("act")
				a := f.activate("worker-a", "claim-1", req)
				if err := f.r.rawUpdate(deleteKey(bucketTargets, fixTarget)); err != nil {
					f.t.Fatal(err)
				}
				f.r.trustStore(f.t)
				return "worker-a", a.envelope
			}},
			{"precondition by revision", ReasonPreconditionFailed, func(f *fixture) (string, []byte) {
				a := f.activate("worker-a", "claim-1", f.request(&Request{V: 1, Action: "act", Target: fixTarget,
					ExpectRevision: ptr(uint64(2)), Set: ptr([]byte("x"))}))
				return "worker-a", a.envelope
			}},
			{"precondition by value", ReasonPreconditionFailed, func(f *fixture) (string, []byte) {
				a := f.activate("worker-a", "claim-1", f.request(&Request{V: 1, Action: "act", Target: fixTarget,
					ExpectValue: ptr([]byte(`{}`)), Set: ptr([]byte("x"))}))
				return "worker-a", a.envelope
			}},
			{"precondition by patch test op", ReasonPreconditionFailed, func(f *fixture) (string, []byte) {
				a := f.activate("worker-a", "claim-1", f.request(&Request{V: 1, Action: "act", Target: fixTarget,
					Patch: []byte(`[{"op":"test","path":"/data/retention_days","value":"31"},{"op":"replace","path":"/data/retention_days","value":"45"}]`)}))
				return "worker-a", a.envelope
			}},
			{"malformed envelope", ReasonMalformedEnvelope, func(f *fixture) (string, []byte) {
				return "worker-a", []byte{0xa1, 0x61, 0x76, 0x01, 0x00}
			}},
			{"malformed request", ReasonMalformedRequest, func(f *fixture) (string, []byte) {
				a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
				return "worker-a", f.envelope(&Envelope{V: 1, Scope: fixScope, Epoch: 1, Grant: a.grant.ID,
					Executor: "worker-a", Claim: "claim-1", Request: []byte{0xa0}})
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				f := newFixtureOn(t, s, defect.Variant{})
				caller, env := tt.run(f)
				before, _ := f.r.Target(fixTarget)
				head := f.r.Head()
				res := f.submit(caller, env)
				wantDenied(t, res, tt.reason)
				if res.AuditSeq != head.Seq+1 {
					t.Errorf("denial recorded at seq %d, want %d", res.AuditSeq, head.Seq+1)
				}
				after, _ := f.r.Target(fixTarget)
				if after.Revision != before.Revision || !bytes.Equal(after.Value, before.Value) {
					t.Errorf("target changed by a denied request: %+v -> %+v", before, after)
				}
				if _, err := f.r.Receipt(fixScope, "act"); !errors.Is(err, ErrNotFound) {
					t.Errorf("receipt after denial: %v", err)
				}
			})
		}
	})
}

// Ensure that an identical retry under the current grant is already_applied
// without a second mutation, that the same action with other bytes under a
// new grant is action_reuse_conflict, and that after a hold the old grant is
// rejected although its receipt exists.
func TestSubmit_Idempotency(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
		if res := f.submit("worker-a", a.envelope); res.Outcome != Applied || res.Revision != 2 {
			t.Fatalf("first submit: %+v", res)
		}
		res := f.submit("worker-a", a.envelope)
		if res.Outcome != AlreadyApplied || res.Revision != 2 {
			t.Fatalf("identical retry: %+v, want already_applied at revision 2", res)
		}
		f.wantTarget(2, fixAfter)

		rc, err := f.r.Receipt(fixScope, "raise-retention")
		if err != nil {
			t.Fatal(err)
		}
		if rc.Grant != a.grant.ID || rc.RevBefore != 1 || rc.RevAfter != 2 || rc.RequestSHA256 != a.grant.RequestSHA256 {
			t.Fatalf("receipt: %+v", rc)
		}

		f.hold("reassign")
		wantDenied(t, f.submit("worker-a", a.envelope), ReasonReceiverHeld)

		other := f.request(&Request{V: 1, Action: "raise-retention", Target: fixTarget, Set: ptr([]byte(`{}`))})
		b := f.activate("worker-b", "claim-2", other)
		wantDenied(t, f.submit("worker-b", b.envelope), ReasonActionReuseConflict)
		wantDenied(t, f.submit("worker-a", a.envelope), ReasonStaleEpoch)
		f.wantTarget(2, fixAfter)
	})
}

// Ensure that a failure while inserting the receipt or the audit entry rolls
// the mutation back with it.
func TestSubmit_RollbackOnInsertFailure(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		boom := errors.New("injected fault")
		for _, step := range []string{"receipt", "audit"} {
			t.Run(step, func(t *testing.T) {
				f := newFixtureOn(t, s, defect.Variant{})
				a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
				head := f.r.Head()
				switch step {
				case "receipt":
					f.r.faults.beforeReceipt = func(string, string) error { return boom }
				case "audit":
					f.r.faults.beforeAudit = func(*audit.Entry) error { return boom }
				}
				res, err := f.r.Submit(f.ctx, "worker-a", a.envelope)
				if !errors.Is(err, boom) {
					t.Fatalf("Submit = %+v, %v; want the injected fault", res, err)
				}
				f.r.faults = faultHooks{}
				f.wantTarget(1, fixValue)
				if _, err := f.r.Receipt(fixScope, "act"); !errors.Is(err, ErrNotFound) {
					t.Fatalf("receipt after rollback: %v", err)
				}
				if got := f.r.Head(); got != head {
					t.Fatalf("audit head moved from %v to %v", head, got)
				}
				// Nothing was half-applied: the same envelope now applies once.
				if res := f.submit("worker-a", a.envelope); res.Outcome != Applied || res.Revision != 2 {
					t.Fatalf("submit after the fault cleared: %+v", res)
				}
			})
		}
	})
}
