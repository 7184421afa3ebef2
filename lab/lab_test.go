package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kvfence/kvfence/internal/testbin"
	"github.com/kvfence/kvfence/kvfence"
)

// The lab's workers are the lab build of the kvfence binary (built with
// the kvfencelab tag): this test binary is built without it, as the shipped
// binary is, so its own workers would refuse the defective modes.
var (
	labOnce sync.Once
	labDir  string
	labExe  string
	labErr  error
)

// labBinary builds the lab build of kvfence once and returns its path.
func labBinary(t *testing.T) string {
	t.Helper()
	labOnce.Do(func() {
		if labDir, labErr = os.MkdirTemp("", "kvfence-lab-test-"); labErr == nil {
			labExe, labErr = testbin.Build(labDir, testbin.LabTag)
		}
	})
	if labErr != nil {
		t.Fatalf("building the lab binary: %v", labErr)
	}
	return labExe
}

func TestMain(m *testing.M) {
	code := m.Run()
	if labDir != "" {
		os.RemoveAll(labDir)
	}
	os.Exit(code)
}

// Ensure that the lab runs end to end and that every summary value is the
// one its demonstration must produce.
func TestRun(t *testing.T) {
	out := filepath.Join(t.TempDir(), "lab")
	sum, err := Run(context.Background(), Options{Output: out, Executable: labBinary(t)})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := Observations{
		StaleWorkerAccepted:                       false,
		MutationsBeforeCurrentWorker:              0,
		CurrentWorkerAccepted:                     true,
		DefectiveReceiverAcceptedStaleWorker:      true,
		DefectiveReceiverCaughtByVerifyChain:      true,
		RestoredLedgerAcceptedClaim:               true,
		HeldReceiverAcceptedRestoredWork:          false,
		RestoredLedgerRollbackDetected:            true,
		RestoredReceiverCopyAcceptedOldGrant:      true,
		RestoredReceiverRollbackDetected:          true,
		RestoredReceiverAndAnchorAcceptedOldGrant: true,
		ServedWrongIdentityDenied:                 true,
		ServedWorkerHoldForbidden:                 true,
		ServedHoldWhileServingDeniedStaleWorker:   true,
		ServedCurrentWorkerAccepted:               true,
		ContainPartialBlockedSuccessor:            true,
		ContainRetryNewGenerations:                0,
		ContainFullAfterRetry:                     true,
		ContainStaleDeniedAtEveryBoundary:         true,
		ContainSuccessorAccepted:                  true,
		ProductionAuthorization:                   "not_assessed",
	}
	// Demonstration 4b's key is a *bool, compared by value.
	withWitnesses := sum.RestoredReceiverAndAnchorAcceptedOldGrantWithWitnesses
	got := sum.Observations
	got.RestoredReceiverAndAnchorAcceptedOldGrantWithWitnesses = nil
	if got != want || withWitnesses == nil || *withWitnesses || sum.Verdict != VerdictAsExpected || len(sum.Unexpected()) != 0 {
		t.Fatalf("summary %+v (with witnesses %v), want %+v, all as expected", *sum, withWitnesses, want)
	}
	// The zero Options leave demonstration 8 off, and the summary says so
	// (TestKube_Demonstration8 runs it).
	if sum.NotRun[kubeDemonstration] == "" || sum.Checks["k8s_lost_update"].NotRun == "" {
		t.Fatalf("demonstration 8 not reported as not run: %v %+v", sum.NotRun, sum.Checks["k8s_lost_update"])
	}
	var onDisk Summary
	raw, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &onDisk); err != nil || onDisk.RestoredReceiverAndAnchorAcceptedOldGrantWithWitnesses == nil {
		t.Fatalf("summary.json = %s (%v)", raw, err)
	}
	onDisk.RestoredReceiverAndAnchorAcceptedOldGrantWithWitnesses = nil
	if onDisk.Observations != want || onDisk.Verdict != VerdictAsExpected ||
		len(onDisk.Checks) != len(expectations) {
		t.Fatalf("summary.json = %s (%v)", raw, err)
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil || !strings.Contains(string(report), "**Verdict: as expected**") {
		t.Fatalf("report.md has no overall verdict: %v\n%s", err, report)
	}
	for _, f := range []string{"report.md", "source.json", "environment.json",
		"01-paused-worker/report.json", "01-paused-worker/receiver.db", "01-paused-worker/events.json",
		"01-paused-worker/receipts.json", "02-defective-receiver/report.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing output %s: %v", f, err)
		}
	}
	var rep pausedReport
	raw, err = os.ReadFile(filepath.Join(out, "01-paused-worker", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Stale.Reason != "stale_or_unknown_epoch" || rep.TargetAtStaleDecision.Revision != 1 ||
		rep.FinalTarget.Revision != 2 || rep.LastStaleRejectionAt == nil || !rep.HoldCommittedAt.Before(rep.Stale.DecidedAt) ||
		rep.VerifyChain != "ok" {
		t.Fatalf("paused-worker report: %s", raw)
	}
	for dir, want := range map[string]uint64{"04-restored-receiver-unanchored": 2, "05-restored-receiver-anchored": 1} {
		var rr restoredReport
		raw, err = os.ReadFile(filepath.Join(out, dir, "report.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &rr); err != nil {
			t.Fatal(err)
		}
		if rr.TargetBefore.Revision != 1 || rr.TargetAfter.Revision != want {
			t.Fatalf("%s: target revision %d -> %d, want 1 -> %d", dir, rr.TargetBefore.Revision, rr.TargetAfter.Revision, want)
		}
	}
	checkWitnessed(t, filepath.Join(out, witnessedDemonstration))
	checkRestoredLedger(t, out)
	checkServed(t, out)
	checkContained(t, filepath.Join(out, containedDemonstration))
}

// checkServed checks demonstration 6's report: every attempt of worker A
// was denied for its own reason, with the identity taken from A's
// certificate, before B's write; the administrative changes name the
// socket's uid; serve stopped cleanly and the chain verifies.
func checkServed(t *testing.T, out string) {
	t.Helper()
	var r servedReport
	raw, err := os.ReadFile(filepath.Join(out, "06-served-receiver", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	uid := "unix:uid:" + strconv.Itoa(os.Getuid())
	switch {
	case r.WorkerHold.HTTPStatus != 403 || r.WorkerHold.ErrorCode != "forbidden" || r.EpochAfterWorkerHold != 1:
		t.Fatalf("worker hold: %+v, epoch after %d", r.WorkerHold, r.EpochAfterWorkerHold)
	case r.StaleWhileHeld.Reason != "receiver_held" || !r.HoldCommittedAt.Before(r.StaleWhileHeld.SubmittedAt):
		t.Fatalf("stale worker while held: %+v (hold committed %s)", r.StaleWhileHeld, r.HoldCommittedAt)
	case r.WrongIdentity.Reason != "executor_mismatch" || r.WrongIdentityCaller != servedWorkerA:
		t.Fatalf("wrong identity: %+v, recorded caller %q", r.WrongIdentity, r.WrongIdentityCaller)
	case r.StaleAfterSuccessor.Reason != "stale_or_unknown_epoch" || r.ActivatedAt.IsZero() ||
		!r.ActivatedAt.Before(r.StaleAfterSuccessor.SubmittedAt):
		t.Fatalf("stale worker after the successor's activation (%s): %+v", r.ActivatedAt, r.StaleAfterSuccessor)
	case r.TargetBeforeCurrentWorker.Revision != 1 || r.Current.Revision != 2 || r.FinalTarget.Revision != 2:
		t.Fatalf("target revisions %d before B, %d after: %+v", r.TargetBeforeCurrentWorker.Revision, r.FinalTarget.Revision, r.Current)
	case len(r.AdminActors) != 1 || r.AdminActors[0] != uid:
		t.Fatalf("admin actors %v, want [%s]", r.AdminActors, uid)
	case r.ServeExitCode != 0 || r.VerifyChain != "ok":
		t.Fatalf("serve exit %d, verify-chain %s %s", r.ServeExitCode, r.VerifyChain, r.VerifyDetail)
	}
	for _, f := range []string{"serve.log", "ca.crt", "worker-a.crt", "assignment-b.json", "events.json", "receipts.json"} {
		if _, err := os.Stat(filepath.Join(out, "06-served-receiver", f)); err != nil {
			t.Errorf("missing output %s: %v", f, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(out, "06-served-receiver", "worker-a.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("worker-a.key: %v, %v; want mode 0600", fi, err)
	}
}

// Ensure that demonstration 6 fails loudly when worker B wrote before
// worker A's attempts, and leaves no serve process behind.
func TestServedReceiver_PreconditionFails(t *testing.T) {
	out := filepath.Join(t.TempDir(), "lab")
	if err := makeOutput(out); err != nil {
		t.Fatal(err)
	}
	var running *served
	l := &lab{opts: Options{Output: out, Executable: labBinary(t), Progress: io.Discard}, hooks: hooks{
		afterServedActivate: func(sv *served) error {
			running = sv
			c, err := sv.clientFor("worker-b")
			if err != nil {
				return err
			}
			defer c.Close()
			env, err := os.ReadFile(filepath.Join(sv.dir, "envelope-b.cbor"))
			if err != nil {
				return err
			}
			res, err := c.Submit(context.Background(), env)
			if err == nil && res.Outcome != kvfence.Applied {
				err = fmt.Errorf("worker-b's early write was %s", res.Outcome)
			}
			return err
		}}}
	_, err := l.servedReceiver(context.Background(), servedDemonstration)
	if !errors.Is(err, ErrPrecondition) {
		t.Fatalf("servedReceiver = %v, want ErrPrecondition", err)
	}
	if running == nil || running.cmd.ProcessState == nil {
		t.Fatal("kvfence serve was left running after the failed demonstration")
	}
}

// Ensure that demonstration 6 runs from an output directory too deep for a
// unix socket address beside it, with the admin socket in a private
// temporary directory that it removes afterwards.
func TestServedReceiver_LongOutputPath(t *testing.T) {
	parent := filepath.Join(t.TempDir(), strings.Repeat("d", maxSocketPath))
	if err := os.Mkdir(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(parent, "lab")
	if err := makeOutput(out); err != nil {
		t.Fatal(err)
	}
	l := &lab{opts: Options{Output: out, Executable: labBinary(t), Progress: io.Discard}}
	rep, err := l.servedReceiver(context.Background(), servedDemonstration)
	if err != nil {
		t.Fatalf("servedReceiver: %v", err)
	}
	if rep.Current.Outcome != "applied" || strings.HasPrefix(rep.AdminSocket, out) || len(rep.AdminSocket) > maxSocketPath {
		t.Fatalf("worker-b %s, admin socket %s", decision(rep.Current), rep.AdminSocket)
	}
	if _, err := os.Stat(filepath.Dir(rep.AdminSocket)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the admin socket's directory is left behind: %v", err)
	}
}

// checkRestoredLedger checks that demonstration 3 shows both the counterexample and the catch:
// the restored ledger's second claim is refused by the held receiver, and
// the anchored ledger refuses to open.
func checkRestoredLedger(t *testing.T, out string) {
	t.Helper()
	read := func(dir string) ledgerReport {
		var r ledgerReport
		raw, err := os.ReadFile(filepath.Join(out, dir, "report.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	u := read("03a-restored-ledger-unanchored")
	if u.FirstClaim.Ledger.Outcome != ledgerClaimed || u.RestoredClaim.Ledger.Outcome != ledgerClaimed ||
		u.RestoredClaim.Ledger.Generation != 1 || u.RestoredClaim.Ledger.Claim == u.FirstClaim.Ledger.Claim {
		t.Fatalf("unanchored: want two different first-generation claims of one action: %+v / %+v", u.FirstClaim.Ledger, u.RestoredClaim.Ledger)
	}
	if u.RestoredClaim.Outcome != "denied" || u.RestoredClaim.Reason != "receiver_held" || u.TargetAfter.Revision != 1 {
		t.Fatalf("unanchored: held receiver answered %s, target revision %d", decision(u.RestoredClaim), u.TargetAfter.Revision)
	}
	if !u.HoldCommittedAt.Before(u.RestoredClaim.SubmittedAt) || len(u.OutstandingEffects) != 1 {
		t.Fatalf("unanchored report: %+v", u)
	}
	a := read("03b-restored-ledger-anchored")
	if a.RestoredClaim.Ledger.Outcome != OutcomeRefusedAtOpen || !strings.Contains(a.RestoredClaim.Ledger.Detail, "rollback detected") ||
		a.RestoredClaim.Outcome != "not_submitted" || len(a.LedgerAfter.Claims) != 0 {
		t.Fatalf("anchored: %+v", a.RestoredClaim)
	}
	for _, f := range []string{"ledger.db", "ledger-before-claim.db", "ledger-replaced.db", "ledger.json", "receiver.db", "events.json"} {
		if _, err := os.Stat(filepath.Join(out, "03a-restored-ledger-unanchored", f)); err != nil {
			t.Errorf("missing output %s: %v", f, err)
		}
	}
}

// Ensure that the lab fails loudly, rather than reporting a vacuous pass,
// when a demonstration's schedule did not happen as designed.
func TestRun_PreconditionFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    hooks
	}{
		{"current worker wrote before the stale one was decided", hooks{afterActivate: func(rc *receiverFiles, envB string) error {
			env, err := os.ReadFile(envB)
			if err != nil {
				return err
			}
			return rc.with(func(r *kvfence.Receiver) error {
				_, err := r.Submit(context.Background(), workerB, env)
				return err
			})
		}}},
		{"ledger not actually restored", hooks{afterLedgerRestore: func(lf *ledgerFiles, replaced string) error {
			if err := os.Remove(lf.db); err != nil {
				return err
			}
			return os.Rename(replaced, lf.db)
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(context.Background(), Options{Output: filepath.Join(t.TempDir(), "lab"), Executable: labBinary(t)}, tc.h)
			if !errors.Is(err, ErrPrecondition) {
				t.Fatalf("run = %v, want ErrPrecondition", err)
			}
		})
	}
}

// Ensure that the lab refuses an existing destination and a missing parent,
// and writes nothing in either case.
func TestRun_OutputRules(t *testing.T) {
	dir := t.TempDir()
	if _, err := Run(context.Background(), Options{Output: dir, Executable: os.Args[0]}); !errors.Is(err, ErrOutputExists) {
		t.Fatalf("Run(existing) = %v, want ErrOutputExists", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("Run wrote into an existing directory: %v", entries)
	}
	missing := filepath.Join(dir, "no", "such")
	if _, err := Run(context.Background(), Options{Output: missing, Executable: os.Args[0]}); err == nil {
		t.Fatal("Run with a missing parent succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "no")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("Run created the missing parent")
	}
}

// Ensure that a lab worker refuses a database outside a lab directory, so
// that even in the lab build its defective mode cannot reach a receiver in
// service.
func TestWorker_RefusesOutsideLab(t *testing.T) {
	dir := t.TempDir()
	var stderr strings.Builder
	code := WorkerMain(context.Background(), []string{"--db", filepath.Join(dir, "r.db"), "--anchor", "a", "--key", "k", "--envelope", "x", "--as", "w"},
		strings.NewReader("go\n"), new(discard), &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "not inside a lab output directory") {
		t.Fatalf("lab worker outside a lab directory: exit %d, %q", code, stderr.String())
	}
}

// Ensure that the lab-directory check resolves symbolic links and refuses
// hard links: a directory that holds the marker and a link to a database
// elsewhere does not make that database a lab's.
func TestInLabDir(t *testing.T) {
	root := t.TempDir()
	mk := func(parts ...string) string {
		p := filepath.Join(append([]string{root}, parts...)...)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	prod := mk("prod", "receiver.db")
	mk("lab", markerFile)
	own := mk("lab", "01", "receiver.db")
	inLab := mk("lab", "receiver.db")
	link := func(name string, f func(string, string) error, target string) string {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := f(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	symlink := link("lab/prod.db", os.Symlink, prod)
	dirLink := link("lab/02", os.Symlink, filepath.Join(root, "prod"))
	hardLink := link("lab/hard.db", os.Link, prod)
	link("other/"+markerFile, os.Symlink, filepath.Join(root, "lab", markerFile))
	mk("other", "receiver.db")
	for _, tc := range []struct {
		name, db string
		want     string // the resolved path, or "" for a refusal
	}{
		{"database in the lab directory", inLab, inLab},
		{"database in a demonstration's directory", own, own},
		{"database outside", prod, ""},
		{"symbolic link to a database outside", symlink, ""},
		{"database under a linked directory", filepath.Join(dirLink, "receiver.db"), ""},
		{"hard link to a database outside", hardLink, ""},
		{"marker that is a symbolic link", filepath.Join(root, "other", "receiver.db"), ""},
		{"missing database", filepath.Join(root, "lab", "none.db"), ""},
	} {
		got, err := inLabDir(tc.db)
		want, _ := filepath.EvalSymlinks(tc.want)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%s: accepted as %s", tc.name, got)
		case tc.want != "" && (err != nil || got != want):
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, want)
		}
	}
}

type discard struct{}

func (*discard) Write(p []byte) (int, error) { return len(p), nil }
