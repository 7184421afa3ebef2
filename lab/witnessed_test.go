package lab

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that demonstration 4b, run alone in real processes, shows the
// counterexample without the witnesses and the witnesses' refusal with
// them, and stops every witness with exit 0.
func TestRestoredWithWitnesses(t *testing.T) {
	out := filepath.Join(t.TempDir(), "lab")
	if err := makeOutput(out); err != nil {
		t.Fatal(err)
	}
	l := &lab{opts: Options{Output: out, Executable: labBinary(t), Progress: testWriter{t}}}
	rep, err := l.restoredWithWitnesses(context.Background(), witnessedDemonstration)
	if err != nil {
		t.Fatalf("demonstration 4b: %v", err)
	}
	var o Observations
	rep.observe(&o)
	if !o.RestoredReceiverAndAnchorAcceptedOldGrant || o.RestoredReceiverAndAnchorAcceptedOldGrantWithWitnesses == nil ||
		*o.RestoredReceiverAndAnchorAcceptedOldGrantWithWitnesses {
		t.Fatalf("observations: without witnesses %v, with witnesses %v", o.RestoredReceiverAndAnchorAcceptedOldGrant,
			optBool(o.RestoredReceiverAndAnchorAcceptedOldGrantWithWitnesses))
	}
	checkWitnessed(t, filepath.Join(out, witnessedDemonstration))
}

// testWriter sends the lab's progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// checkWitnessed checks demonstration 4b's report.json.
func checkWitnessed(t *testing.T, dir string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep witnessedReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Counterexample.Outcome != string(kvfence.Applied) || rep.TargetAfterCounterexample.Revision != 2 ||
		rep.TargetRestored.Revision != 1 || rep.TargetAfter.Revision != 1 {
		t.Fatalf("4b: counterexample %+v, target restored %d, after counterexample %d, after %d", rep.Counterexample,
			rep.TargetRestored.Revision, rep.TargetAfterCounterexample.Revision, rep.TargetAfter.Revision)
	}
	attempts := append([]witnessedAttempt{rep.Witnessed}, rep.OneDown...)
	if len(attempts) != 1+witnessCount {
		t.Fatalf("4b: %d attempts with witnesses, want %d", len(attempts), 1+witnessCount)
	}
	for _, a := range attempts {
		if !a.RefusedByWitness || a.ExitCode != exitIntegrity || a.ErrorCode != "rollback_detected" ||
			!strings.Contains(a.ErrorMessage, "witness lab-witness-") {
			t.Fatalf("4b: attempt with %s down: %+v", a.Down, a)
		}
	}
	if rep.VerifyChain.ExitCode != exitIntegrity || rep.VerifyChain.Problem != "rollback_detected" {
		t.Fatalf("4b: verify-chain %+v", rep.VerifyChain)
	}
	for _, w := range rep.Witnesses {
		if !reflect.DeepEqual(w.ExitCodes, []int{0, 0}) {
			t.Fatalf("4b: witness %s exit codes %v, want 0 after each SIGTERM", w.Name, w.ExitCodes)
		}
	}
}

// witnessedGood is a demonstration 4b report in which the witnesses
// refused every attempt.
func witnessedGood() *witnessedReport {
	names := []string{"lab-witness-1", "lab-witness-2", "lab-witness-3"}
	refusal := func(down string) witnessedAttempt {
		named := names[0]
		if named == down {
			named = names[1]
		}
		return parseAttempt(cliRun{ExitCode: exitIntegrity, Stdout: `{"error":{"code":"rollback_detected","message":` +
			`"kvfence submit: audit: rollback detected: witness ` + named + ` cosigned size 7 (root not told); local size 4, root X"}}`},
			names, down)
	}
	rep := &witnessedReport{
		Counterexample:            parseAttempt(cliRun{Stdout: `{"outcome":"applied","revision":2}`}, nil, ""),
		TargetRestored:            targetView{Revision: 1, Value: "v"},
		TargetAfterCounterexample: targetView{Revision: 2, Value: "w"},
		TargetAfter:               targetView{Revision: 1, Value: "v"},
		Witnessed:                 refusal(""),
		VerifyChain: witnessedVerify{ExitCode: exitIntegrity, Problem: "rollback_detected",
			Detail: "audit: rollback detected: witness lab-witness-1 cosigned size 7 (root not told); local size 4, root X"},
	}
	for _, n := range names {
		rep.Witnesses = append(rep.Witnesses, witnessView{Name: n})
		rep.OneDown = append(rep.OneDown, refusal(n))
	}
	return rep
}

// Ensure that demonstration 4b's key is as expected only when the
// witnesses refused: an attempt that failed for any other reason (a
// transport error, a usage error, too few answers, the local anchor, a
// decision), a missing one-down attempt, verify-chain without the
// witnesses' rollback, or a target that moved make the verdict not as
// expected, and an applied attempt is observed as accepted.
func TestWitnessed_OnlyTheWitnessesRefusalIsASuccess(t *testing.T) {
	const key = "restored_receiver_and_anchor_accepted_old_grant_with_witnesses"
	other := func(run cliRun) func(*witnessedReport) {
		return func(r *witnessedReport) { r.OneDown[1] = parseAttempt(run, r.Witnessed.Witnesses, "lab-witness-2") }
	}
	for _, tc := range []struct {
		name   string
		change func(*witnessedReport)
		// accepted is the observation wanted: nil for inconclusive.
		accepted *bool
	}{
		{"witnesses refused every attempt", func(*witnessedReport) {}, boolPtr(false)},
		{"transport error", other(cliRun{ExitCode: 1, Stderr: "kvfence submit: dial tcp 127.0.0.1:1: connection refused\n"}), nil},
		{"usage error", other(cliRun{ExitCode: 2, Stdout: `{"error":{"code":"usage","message":"kvfence submit: --witness w has no --witness-pub w=FILE"}}`}), nil},
		{"too few answers", other(cliRun{ExitCode: 5, Stdout: `{"error":{"code":"witnesses_unavailable","message":"kvfence: too few witness answers: witness lab-witness-1 cosigned size 7"}}`}), nil},
		{"rollback by the anchor, no witness named", other(cliRun{ExitCode: exitIntegrity, Stdout: `{"error":{"code":"rollback_detected","message":"audit: rollback detected: database head is seq 4 but receiver anchored seq 7"}}`}), nil},
		{"a witness not on the command line named", other(cliRun{ExitCode: exitIntegrity, Stdout: `{"error":{"code":"rollback_detected","message":"witness lab-witness-9 cosigned size 7 (root not told)"}}`}), nil},
		{"only the witness that was down named", func(r *witnessedReport) {
			r.OneDown[1] = parseAttempt(cliRun{ExitCode: exitIntegrity, Stdout: `{"error":{"code":"rollback_detected","message":` +
				`"audit: rollback detected: witness lab-witness-2 cosigned size 7 (root not told)"}}`}, r.Witnessed.Witnesses, "lab-witness-2")
		}, nil},
		{"denied by the fence", other(cliRun{ExitCode: 3, Stdout: `{"outcome":"denied","reason":"stale_or_unknown_epoch"}`}), nil},
		{"one-down attempt missing", func(r *witnessedReport) { r.OneDown = r.OneDown[:2] }, nil},
		{"verify-chain ok", func(r *witnessedReport) { r.VerifyChain = witnessedVerify{Problem: "ok"} }, nil},
		{"verify-chain rollback by the anchor", func(r *witnessedReport) { r.VerifyChain.Detail = "audit: rollback detected: database head is seq 4" }, nil},
		{"target moved", func(r *witnessedReport) { r.TargetAfter = targetView{Revision: 2, Value: "w"} }, nil},
		{"applied with witnesses", other(cliRun{Stdout: `{"outcome":"applied","revision":2}`}), boolPtr(true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := witnessedGood()
			tc.change(rep)
			s := Summary{Observations: expectedObservations(t)}
			rep.observe(&s.Observations)
			got := s.RestoredReceiverAndAnchorAcceptedOldGrantWithWitnesses
			if !reflect.DeepEqual(got, tc.accepted) {
				t.Fatalf("observed %v, want %v", optBool(got), optBool(tc.accepted))
			}
			s.judge()
			if tc.accepted != nil && !*tc.accepted {
				if s.Verdict != VerdictAsExpected || !s.RestoredReceiverAndAnchorAcceptedOldGrant {
					t.Fatalf("verdict %s: %s", s.Verdict, s.VerdictDetail)
				}
				return
			}
			if s.Verdict != VerdictNotAsExpected || !reflect.DeepEqual(s.Unexpected(), []string{key}) {
				t.Fatalf("verdict %s: %s; unexpected %v", s.Verdict, s.VerdictDetail, s.Unexpected())
			}
		})
	}
}
