package lab

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkContained checks demonstration 7's report in dir: the schedule ran
// as designed, each step's evidence is there, and the times the record
// keeps apart are all set.
func checkContained(t *testing.T, dir string) {
	t.Helper()
	var r containedReport
	raw, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	var o Observations
	r.observe(&o)
	if !o.ContainPartialBlockedSuccessor || o.ContainRetryNewGenerations != 0 || !o.ContainFullAfterRetry ||
		!o.ContainStaleDeniedAtEveryBoundary || !o.ContainSuccessorAccepted {
		t.Fatalf("demonstration 7 observations %+v from %s", o, raw)
	}
	switch {
	case len(r.Receivers) != 2 || r.Receivers[0].Scope == r.Receivers[1].Scope:
		t.Fatalf("receivers: %+v", r.Receivers)
	case r.ClaimA == "" || r.ClaimB == "" || r.ClaimA == r.ClaimB:
		t.Fatalf("claims %q, %q", r.ClaimA, r.ClaimB)
	case r.FirstContain.Record.SupersededClaim != r.ClaimA || r.SecondContain.Record.Containment != r.FirstContain.Record.Containment:
		t.Fatalf("containments: %+v / %+v", r.FirstContain.Record, r.SecondContain.Record)
	case r.Receiver1EpochAfterFirstContain < 2:
		t.Fatalf("receiver 1 epoch %d after the first containment, want a hold after the activation", r.Receiver1EpochAfterFirstContain)
	case r.StaleWhilePartial.SubmittedAt.Before(r.FirstContain.At) || !r.SecondContain.At.Before(r.StaleAfterFull[1].SubmittedAt):
		t.Fatalf("worker-a's attempts out of order: %+v %+v", r.StaleWhilePartial, r.StaleAfterFull)
	case r.Successor[0].Revision != 2 || r.Successor[1].Revision != 2 || r.Receivers[0].FinalTarget.Revision != 2 ||
		r.Receivers[1].FinalTarget.Revision != 2:
		t.Fatalf("successor: %+v, receivers %+v", r.Successor, r.Receivers)
	case r.ContainVerify.ExitCode != 0:
		t.Fatalf("contain verify: %+v", r.ContainVerify)
	case len(r.OutstandingEffects) != 0:
		t.Fatalf("outstanding effects %s: worker-a applied nothing", r.OutstandingEffects)
	}
	b1 := r.FirstContain.Record.boundary(r.Receivers[0].Name)
	b2 := r.SecondContain.Record.boundary(r.Receivers[0].Name)
	if b1 == nil || b2 == nil || b1.HoldID == "" || b1.HoldID != b2.HoldID || b1.InstalledEpoch != b2.InstalledEpoch ||
		b1.InstalledEpoch != r.Receiver1EpochAfterFirstContain {
		t.Fatalf("receiver 1's boundary: first %+v, second %+v", b1, b2)
	}
	for _, rc := range r.Receivers {
		req, ack, stale := parseTime(r.HoldRequestedAt[rc.Name]), parseTime(r.AcknowledgedAt[rc.Name]), parseTime(r.LastStaleRejectionAt[rc.Name])
		if req.IsZero() || ack.IsZero() || stale.IsZero() || stale.Before(ack) {
			t.Errorf("%s: hold requested %q, acknowledged %q, last stale rejection %q", rc.Name, r.HoldRequestedAt[rc.Name],
				r.AcknowledgedAt[rc.Name], r.LastStaleRejectionAt[rc.Name])
		}
		if rc.VerifyChain != "ok" || len(rc.ServeExitCodes) == 0 || rc.ServeExitCodes[len(rc.ServeExitCodes)-1] != 0 ||
			rc.FinalScope.Mode != "open" {
			t.Errorf("%s: %+v", rc.Name, rc)
		}
		for _, f := range append([]string{"receiver.db", "receiver.anchor", "receiver.key.pub", "events.json"}, rc.ServeLogs...) {
			if _, err := os.Stat(filepath.Join(rc.Dir, filepath.Base(f))); err != nil {
				t.Errorf("%s: missing output %s: %v", rc.Name, f, err)
			}
		}
	}
	if len(r.Receivers[1].ServeLogs) != 2 {
		t.Errorf("receiver 2's serve logs %v, want the first run's and the restart's", r.Receivers[1].ServeLogs)
	}
	for _, f := range []string{"contain-1.json", "contain-2.json", "containment.json", "ledger/ledger.db", "request.cbor"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing output %s: %v", f, err)
		}
	}
}

// Ensure that demonstration 7 runs as designed on its own and reports
// each step's evidence.
func TestContainedWorkflow(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs in the full test command; TestRun runs this demonstration with the others")
	}
	out := filepath.Join(t.TempDir(), "lab")
	if err := makeOutput(out); err != nil {
		t.Fatal(err)
	}
	l := &lab{opts: Options{Output: out, Executable: labBinary(t), Progress: io.Discard}}
	if _, err := l.containedWorkflow(context.Background(), containedDemonstration); err != nil {
		t.Fatalf("containedWorkflow: %v", err)
	}
	checkContained(t, filepath.Join(out, containedDemonstration))
}

// Ensure that demonstration 7 fails loudly, rather than reporting a
// containment with every boundary up as the partial one, when receiver 2
// is back before the first kvfence contain, and leaves no serve running.
func TestContainedWorkflow_PreconditionFails(t *testing.T) {
	out := filepath.Join(t.TempDir(), "lab")
	if err := makeOutput(out); err != nil {
		t.Fatal(err)
	}
	var cr *containedRun
	l := &lab{opts: Options{Output: out, Executable: labBinary(t), Progress: io.Discard}, hooks: hooks{
		afterReceiverStop: func(c *containedRun) error {
			cr = c
			return c.restart(1, "serve-early.log")
		}}}
	_, err := l.containedWorkflow(context.Background(), containedDemonstration)
	if !errors.Is(err, ErrPrecondition) || !strings.Contains(err.Error(), "still answers") {
		t.Fatalf("containedWorkflow = %v, want ErrPrecondition", err)
	}
	if cr == nil {
		t.Fatal("the hook did not run")
	}
	for _, r := range cr.receivers {
		if r.sv.cmd.ProcessState == nil {
			t.Fatalf("%s's kvfence serve was left running after the failed demonstration", r.name)
		}
	}
	if _, err := os.Stat(filepath.Join(out, containedDemonstration, "contain-1.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("kvfence contain ran after the failed precondition: %v", err)
	}
}

// Ensure that each of demonstration 7's summary keys is set from its own
// evidence: a report as designed gives every expected value, and each
// departure from the design turns exactly the key it concerns.
func TestContainedReport_Observe(t *testing.T) {
	good := func() *containedReport {
		ack := func(names ...string) containRecord {
			var r containRecord
			for _, n := range []string{"receiver-1", "receiver-2"} {
				b := containBoundary{Receiver: n, Result: "failed"}
				for _, a := range names {
					if a == n {
						b.Result = resultAcknowledge
					}
				}
				r.Boundaries = append(r.Boundaries, b)
			}
			r.State = statePartial
			if len(names) == 2 {
				r.State = stateFull
			}
			return r
		}
		denied := workerResult{Outcome: "denied", Reason: "receiver_held"}
		applied := workerResult{Outcome: "applied"}
		return &containedReport{
			Receivers:                        []containedReceiver{{Name: "receiver-1"}, {Name: "receiver-2"}},
			FirstContain:                     containRun{ExitCode: exitPartial, Record: ack("receiver-1")},
			RefusedActivation:                cliBrief{ExitCode: exitDenied},
			Receiver1AfterRefusal:            scopeView{Epoch: 3, Mode: "held"},
			StaleWhilePartial:                denied,
			SecondContain:                    containRun{ExitCode: 0, Record: ack("receiver-1", "receiver-2")},
			Receiver1EpochAfterFirstContain:  3,
			Receiver1EpochAfterSecondContain: 3,
			StaleAfterFull:                   []workerResult{denied, denied},
			TargetsBeforeSuccessor:           []targetView{{Revision: 1}, {Revision: 1}},
			Activation:                       cliBrief{ExitCode: 0},
			Successor:                        []workerResult{applied, applied},
		}
	}
	var want Observations
	good().observe(&want)
	if !want.ContainPartialBlockedSuccessor || want.ContainRetryNewGenerations != 0 || !want.ContainFullAfterRetry ||
		!want.ContainStaleDeniedAtEveryBoundary || !want.ContainSuccessorAccepted {
		t.Fatalf("the designed report observes %+v", want)
	}
	for _, tc := range []struct {
		name   string
		mutate func(r *containedReport)
		key    string
	}{
		{"first contain exit 0", func(r *containedReport) { r.FirstContain.ExitCode = 0 }, "contain_partial_blocked_successor"},
		{"first contain full", func(r *containedReport) { r.FirstContain.Record.State = stateFull }, "contain_partial_blocked_successor"},
		{"receiver 1 not acknowledged at first", func(r *containedReport) { r.FirstContain.Record.Boundaries[0].Result = "failed" },
			"contain_partial_blocked_successor"},
		{"receiver 2 acknowledged at first", func(r *containedReport) { r.FirstContain.Record.Boundaries[1].Result = resultAcknowledge },
			"contain_partial_blocked_successor"},
		{"a boundary missing from the first record", func(r *containedReport) { r.FirstContain.Record.Boundaries = r.FirstContain.Record.Boundaries[:1] },
			"contain_partial_blocked_successor"},
		{"receiver 2 missing from the first record, another in its place",
			func(r *containedReport) { r.FirstContain.Record.Boundaries[1].Receiver = "receiver-3" }, "contain_partial_blocked_successor"},
		{"activation not refused", func(r *containedReport) { r.RefusedActivation.ExitCode = 0 }, "contain_partial_blocked_successor"},
		{"grant active after the refusal", func(r *containedReport) { r.Receiver1AfterRefusal.ActiveGrant = "g" }, "contain_partial_blocked_successor"},
		{"receiver 1 open after the refusal", func(r *containedReport) { r.Receiver1AfterRefusal.Mode = "open" }, "contain_partial_blocked_successor"},
		{"rerun held again", func(r *containedReport) { r.Receiver1EpochAfterSecondContain = 4 }, "contain_retry_new_generations"},
		{"second contain exit 8", func(r *containedReport) { r.SecondContain.ExitCode = exitPartial }, "contain_full_after_retry"},
		{"second contain partial", func(r *containedReport) { r.SecondContain.Record.State = statePartial }, "contain_full_after_retry"},
		{"receiver 2 not acknowledged at last", func(r *containedReport) { r.SecondContain.Record.Boundaries[1].Result = "unverified" },
			"contain_full_after_retry"},
		{"a boundary renamed in the second record", func(r *containedReport) { r.SecondContain.Record.Boundaries[1].Receiver = "receiver-3" },
			"contain_full_after_retry"},
		{"a third boundary in the second record", func(r *containedReport) {
			r.SecondContain.Record.Boundaries = append(r.SecondContain.Record.Boundaries,
				containBoundary{Receiver: "receiver-3", Result: resultAcknowledge})
		}, "contain_full_after_retry"},
		{"stale applied while partial", func(r *containedReport) { r.StaleWhilePartial.Outcome = "applied" }, "contain_stale_denied_at_every_boundary"},
		{"stale denied for another reason", func(r *containedReport) { r.StaleAfterFull[0].Reason = "claim_mismatch" },
			"contain_stale_denied_at_every_boundary"},
		{"stale applied at receiver 2", func(r *containedReport) { r.StaleAfterFull[1].Outcome = "applied" }, "contain_stale_denied_at_every_boundary"},
		{"stale not tried at receiver 2", func(r *containedReport) { r.StaleAfterFull = r.StaleAfterFull[:1] }, "contain_stale_denied_at_every_boundary"},
		{"target changed before the successor", func(r *containedReport) { r.TargetsBeforeSuccessor[0].Revision = 2 },
			"contain_stale_denied_at_every_boundary"},
		{"successor activation refused", func(r *containedReport) { r.Activation.ExitCode = exitDenied }, "contain_successor_accepted"},
		{"successor denied at receiver 2", func(r *containedReport) { r.Successor[1].Outcome = "denied" }, "contain_successor_accepted"},
		{"successor not run at receiver 2", func(r *containedReport) { r.Successor = r.Successor[:1] }, "contain_successor_accepted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good()
			tc.mutate(r)
			got := expectedObservations(t)
			r.observe(&got)
			s := Summary{Observations: got}
			s.judge()
			if u := s.Unexpected(); len(u) != 1 || u[0] != tc.key {
				t.Fatalf("unexpected %v, want [%s]", u, tc.key)
			}
		})
	}
}
