package lab

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/fixture"
	"github.com/kvfence/kvfence/internal/kubeproc"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// Options configures Run.
type Options struct {
	// Output is the directory to create. It must not exist; its parent must.
	Output string
	// Executable is the binary to re-execute as worker processes and as
	// kvfence serve; it must dispatch WorkerCommand to WorkerMain,
	// ServedWorkerCommand to ServedWorkerMain and "serve" to kvfence serve,
	// and be the lab build (BuildTag).
	// Empty means os.Executable(), which Run then requires to be the lab
	// build itself (ErrNotLabBuild).
	Executable string
	// Env is added to the worker processes' environment.
	Env []string
	// WorkerTimeout bounds each worker process's life; 0 means
	// DefaultWorkerTimeout. The worker gives up by itself at the bound,
	// and the lab kills one still running a grace period later and
	// reports it, never waiting on it for longer.
	WorkerTimeout time.Duration
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
	// Kube says whether demonstration 8 runs on a real kube-apiserver;
	// "" is KubeOff.
	Kube KubeMode
}

// ErrOutputExists means the output directory already exists; the lab never
// writes into an existing directory.
var ErrOutputExists = errors.New("lab: output directory already exists")

// ErrPrecondition means a demonstration's schedule did not happen as
// designed, so its result would say nothing; the lab fails instead of
// reporting a vacuous pass.
var ErrPrecondition = errors.New("lab: demonstration precondition did not hold")

// Summary is summary.json: each observation under its own flat key (as
// before the checks were added, so that existing readers keep working),
// then the same observations judged against their expected values.
type Summary struct {
	// Observations are the flat keys, one per observation.
	Observations
	// Verdict is VerdictAsExpected when every observation equals its
	// expected value, and VerdictNotAsExpected otherwise.
	Verdict string `json:"verdict"`
	// VerdictDetail says the same in words, naming every observation that
	// is not as expected.
	VerdictDetail string `json:"verdict_detail"`
	// Checks holds, per flat key, the observed and expected values, whether
	// they agree, and whether the expected value is a success, a
	// counterexample kept on purpose, or a stated limit.
	Checks map[string]Check `json:"checks"`
	// NotRun names each demonstration that did not run, with the reason;
	// its checks are marked not run and count neither way in Verdict.
	NotRun map[string]string `json:"not_run,omitempty"`
}

// Observations are the lab's results, one per claim it checks. Some are
// expected to be true and some false; a true is not always a success (see
// Check and the expectations in verdict.go).
type Observations struct {
	// StaleWorkerAccepted says the superseded worker's request was applied
	// after the hold (demonstration 1).
	StaleWorkerAccepted bool `json:"stale_worker_accepted"`
	// MutationsBeforeCurrentWorker counts the target's changes before the
	// current worker wrote (demonstration 1).
	MutationsBeforeCurrentWorker uint64 `json:"mutations_before_current_worker"`
	// CurrentWorkerAccepted says the current worker's request was applied
	// (demonstration 1).
	CurrentWorkerAccepted bool `json:"current_worker_accepted"`
	// DefectiveReceiverAcceptedStaleWorker says the receiver without checks
	// 2-4 applied the superseded worker's request (demonstration 2).
	DefectiveReceiverAcceptedStaleWorker bool `json:"defective_receiver_accepted_stale_worker"`
	// DefectiveReceiverCaughtByVerifyChain says verify-chain reported the
	// defective receiver's own chain as a fence_violation.
	DefectiveReceiverCaughtByVerifyChain bool `json:"defective_receiver_caught_by_verify_chain"`
	// RestoredLedgerAcceptedClaim says the restored ledger, opened without
	// its anchor, gave a second worker a claim of the action (demonstration 3a).
	RestoredLedgerAcceptedClaim bool `json:"restored_ledger_accepted_claim"`
	// HeldReceiverAcceptedRestoredWork says the held receiver applied that
	// second worker's request (demonstration 3).
	HeldReceiverAcceptedRestoredWork bool `json:"held_receiver_accepted_restored_work"`
	// RestoredReceiverCopyAcceptedOldGrant says the copy of demonstration
	// 1's pre-hold database, opened without its anchor, applied the old
	// grant's request (demonstration 4).
	RestoredReceiverCopyAcceptedOldGrant bool `json:"restored_receiver_copy_accepted_old_grant"`
	// RestoredReceiverAndAnchorAcceptedOldGrant says demonstration 4b's
	// receiver, its database and anchor restored together from before the
	// hold and opened without the witness flags, applied the old grant's
	// request.
	RestoredReceiverAndAnchorAcceptedOldGrant bool `json:"restored_receiver_and_anchor_accepted_old_grant"`
	// RestoredReceiverAndAnchorAcceptedOldGrantWithWitnesses says that
	// pair, restored again and opened with three witnesses and a quorum of
	// two, applied it: false when every attempt (all witnesses up, and
	// each one down) was refused by the witnesses as a rollback and
	// verify-chain with them reported it; null when an attempt failed in
	// any other way, which shows nothing about the witnesses
	// (demonstration 4b).
	RestoredReceiverAndAnchorAcceptedOldGrantWithWitnesses *bool `json:"restored_receiver_and_anchor_accepted_old_grant_with_witnesses"`
	// RestoredReceiverRollbackDetected says that copy, opened normally, was
	// refused as a rollback and verify-chain reported rollback_detected
	// (demonstration 5).
	RestoredReceiverRollbackDetected bool `json:"restored_receiver_rollback_detected"`
	// RestoredLedgerRollbackDetected says the restored ledger, opened with
	// its anchor, was refused as a rollback (demonstration 3b).
	RestoredLedgerRollbackDetected bool `json:"restored_ledger_rollback_detected"`
	// ServedWrongIdentityDenied says the served receiver denied worker A's
	// certificate presenting worker B's current envelope executor_mismatch.
	ServedWrongIdentityDenied bool `json:"served_wrong_identity_denied"`
	// ServedWorkerHoldForbidden says a worker certificate calling
	// /v1/hold got 403 and the scope's epoch did not move.
	ServedWorkerHoldForbidden bool `json:"served_worker_hold_forbidden"`
	// ServedHoldWhileServingDeniedStaleWorker says that after the hold the
	// operator made over the admin socket while serve served, worker A's
	// superseded envelope was denied, both while held and after B's
	// activation, and nothing changed the target before B wrote.
	ServedHoldWhileServingDeniedStaleWorker bool `json:"served_hold_while_serving_denied_stale_worker"`
	// ServedCurrentWorkerAccepted says worker B's envelope, sent with B's
	// certificate, was applied.
	ServedCurrentWorkerAccepted bool `json:"served_current_worker_accepted"`
	// ContainPartialBlockedSuccessor says that with receiver 2 stopped,
	// kvfence contain recorded partial containment (exit 8) with receiver 1
	// acknowledged, the successor's activation was refused (exit 3), and
	// receiver 1 stayed held with no grant active (demonstration 7).
	ContainPartialBlockedSuccessor bool `json:"contain_partial_blocked_successor"`
	// ContainRetryNewGenerations counts the epochs receiver 1's scope
	// advanced between the first and the second kvfence contain
	// (demonstration 7).
	ContainRetryNewGenerations uint64 `json:"contain_retry_new_generations"`
	// ContainFullAfterRetry says the second kvfence contain, receiver 2
	// back, recorded full containment (exit 0) with both boundaries
	// acknowledged (demonstration 7).
	ContainFullAfterRetry bool `json:"contain_full_after_retry"`
	// ContainStaleDeniedAtEveryBoundary says worker A's envelope was denied
	// at receiver 1 while the containment was partial and at both receivers
	// once it was full, and neither target changed before worker B wrote
	// (demonstration 7).
	ContainStaleDeniedAtEveryBoundary bool `json:"contain_stale_denied_at_every_boundary"`
	// ContainSuccessorAccepted says kvfence contain activate activated
	// worker B at both boundaries (exit 0) and B's envelopes were applied
	// at both (demonstration 7).
	ContainSuccessorAccepted bool `json:"contain_successor_accepted"`
	// K8sStaleWorkerChangedObject says worker A's superseded envelope
	// changed the ConfigMap, or anything did before worker B wrote
	// (demonstration 8); null when demonstration 8 did not run.
	K8sStaleWorkerChangedObject *bool `json:"k8s_stale_worker_changed_object"`
	// K8sDirectWriteByWorkerAccepted says the API server accepted worker
	// A's own PATCH of the ConfigMap, with read-only RBAC or with RBAC
	// widened (demonstration 8); null when it did not run.
	K8sDirectWriteByWorkerAccepted *bool `json:"k8s_direct_write_by_worker_accepted"`
	// K8sCurrentWorkerApplied says worker B's envelope was applied to the
	// ConfigMap, stamped, at the version B's answer names (demonstration
	// 8); null when it did not run.
	K8sCurrentWorkerApplied *bool `json:"k8s_current_worker_applied"`
	// K8sLostUpdate says a change made out of band while B's next write
	// was on the wire was overwritten by it (demonstration 8); null when
	// it did not run.
	K8sLostUpdate *bool `json:"k8s_lost_update"`
	// ProductionAuthorization is always "not_assessed": the lab does not
	// assess production authorization.
	ProductionAuthorization string `json:"production_authorization"`
}

// Run runs the demonstrations in real processes and writes their evidence
// under opts.Output. An interrupted run's output is kept. It returns the
// summary whatever the observations: Summary.Verdict says whether each was
// the expected one, and Summary.Unexpected names those that were not.
func Run(ctx context.Context, opts Options) (*Summary, error) {
	return run(ctx, opts, hooks{})
}

// hooks let tests break a demonstration's schedule, to show that the lab
// then fails instead of reporting a vacuous result.
type hooks struct {
	// afterActivate runs in demonstrations 1 and 2 after worker B's grant
	// is active and before worker A is released.
	afterActivate func(rc *receiverFiles, envelopeB string) error
	// afterLedgerRestore runs in demonstration 3 after the ledger file was
	// restored and before worker C starts.
	afterLedgerRestore func(lf *ledgerFiles, replaced string) error
	// afterServedActivate runs in demonstration 6 after worker B's grant
	// is active and before worker A presents any envelope.
	afterServedActivate func(sv *served) error
	// afterReceiverStop runs in demonstration 7 after receiver 2's serve
	// stopped and before the first containment.
	afterReceiverStop func(cr *containedRun) error
	// beforeKubeDirectWithEdit runs in demonstration 8 after RBAC was
	// widened for worker A and before A's second PATCH.
	beforeKubeDirectWithEdit func(s *kubeproc.Server) error
	// kubePut changes the receiver's held PUT in demonstration 8 before
	// the network proxy forwards it.
	kubePut func(r *http.Request) error
}

func run(ctx context.Context, opts Options, h hooks) (*Summary, error) {
	// Refused before the output exists: this binary's workers could not
	// run demonstrations 2, 3a and 4.
	if opts.Executable == "" && !Available() {
		return nil, ErrNotLabBuild
	}
	if err := makeOutput(opts.Output); err != nil {
		return nil, err
	}
	if opts.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("lab: locating own binary: %w", err)
		}
		opts.Executable = exe
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	l := &lab{opts: opts, hooks: h}
	if err := l.writeManifests(); err != nil {
		return nil, err
	}
	sum := &Summary{Observations: Observations{ProductionAuthorization: "not_assessed"}}

	d1, err := l.pausedWorker(ctx, "01-paused-worker", false)
	if err != nil {
		return nil, err
	}
	sum.StaleWorkerAccepted = d1.Stale.Outcome == string(kvfence.Applied)
	sum.MutationsBeforeCurrentWorker = d1.MutationsBeforeCurrentWorker
	sum.CurrentWorkerAccepted = d1.Current.Outcome == string(kvfence.Applied)

	d2, err := l.pausedWorker(ctx, "02-defective-receiver", true)
	if err != nil {
		return nil, err
	}
	sum.DefectiveReceiverAcceptedStaleWorker = d2.Stale.Outcome == string(kvfence.Applied)
	sum.DefectiveReceiverCaughtByVerifyChain = d2.VerifyChain == string(audit.ProblemFenceViolation)

	d3u, err := l.restoredLedger(ctx, "03a-restored-ledger-unanchored", false)
	if err != nil {
		return nil, err
	}
	sum.RestoredLedgerAcceptedClaim = d3u.RestoredClaim.Ledger.Outcome == ledgerClaimed
	d3a, err := l.restoredLedger(ctx, "03b-restored-ledger-anchored", true)
	if err != nil {
		return nil, err
	}
	sum.HeldReceiverAcceptedRestoredWork = d3u.RestoredClaim.Outcome == string(kvfence.Applied) ||
		d3a.RestoredClaim.Outcome == string(kvfence.Applied)
	sum.RestoredLedgerRollbackDetected = d3a.RestoredClaim.Ledger.Outcome == OutcomeRefusedAtOpen

	src := filepath.Join(opts.Output, "01-paused-worker")
	d4, err := l.restoredReceiver(ctx, src, "04-restored-receiver-unanchored", false)
	if err != nil {
		return nil, err
	}
	sum.RestoredReceiverCopyAcceptedOldGrant = d4.Stale.Outcome == string(kvfence.Applied)
	d4b, err := l.restoredWithWitnesses(ctx, witnessedDemonstration)
	if err != nil {
		return nil, err
	}
	d4b.observe(&sum.Observations)
	d5, err := l.restoredReceiver(ctx, src, "05-restored-receiver-anchored", true)
	if err != nil {
		return nil, err
	}
	sum.RestoredReceiverRollbackDetected = d5.Stale.Outcome == OutcomeRefusedAtOpen && d5.VerifyChain == "rollback_detected"

	d6, err := l.servedReceiver(ctx, servedDemonstration)
	if err != nil {
		return nil, err
	}
	denied := func(w workerResult) bool { return w.Outcome == string(kvfence.Denied) }
	sum.ServedWrongIdentityDenied = denied(d6.WrongIdentity) && d6.WrongIdentity.Reason == string(kvfence.ReasonExecutorMismatch)
	sum.ServedWorkerHoldForbidden = d6.WorkerHold.Outcome == OutcomeForbidden && d6.WorkerHold.HTTPStatus == 403 &&
		d6.EpochAfterWorkerHold == 1
	sum.ServedHoldWhileServingDeniedStaleWorker = denied(d6.StaleWhileHeld) && denied(d6.StaleAfterSuccessor) &&
		d6.MutationsBeforeCurrentWorker == 0
	sum.ServedCurrentWorkerAccepted = d6.Current.Outcome == string(kvfence.Applied)

	d7, err := l.containedWorkflow(ctx, containedDemonstration)
	if err != nil {
		return nil, err
	}
	d7.observe(&sum.Observations)

	var d8 *kubeReport
	skip, err := l.kubeBinaries()
	if err != nil {
		return nil, err
	}
	if skip != "" {
		sum.NotRun = map[string]string{kubeDemonstration: skip}
		l.logf("%s: %s", kubeDemonstration, skip)
	} else {
		if d8, err = l.kubeTargetDemonstration(ctx, kubeDemonstration); err != nil {
			return nil, err
		}
		d8.observe(&sum.Observations)
	}

	sum.judge()
	if err := writeJSON(filepath.Join(opts.Output, "summary.json"), sum); err != nil {
		return nil, err
	}
	if err := writeReport(filepath.Join(opts.Output, "report.md"), sum, d1, d2, d3u, d3a, d4, d4b, d5, d6, d7, d8); err != nil {
		return nil, err
	}
	return sum, nil
}

// makeOutput creates dir, refusing an existing one or a missing parent.
func makeOutput(dir string) error {
	if dir == "" {
		return errors.New("lab: an output directory is required")
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
		return fmt.Errorf("lab: parent directory %s does not exist", parent)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%w: %s", ErrOutputExists, dir)
		}
		return fmt.Errorf("lab: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, markerFile), []byte("kvfence lab output; lab workers run only here\n"), 0o600)
}

type lab struct {
	opts  Options
	hooks hooks
}

func (l *lab) logf(format string, args ...any) {
	fmt.Fprintf(l.opts.Progress, format+"\n", args...)
}

// step is one timestamped line of a demonstration's report.
type step struct {
	// At is when the step was done.
	At time.Time `json:"at"`
	// Actor is who did it: admin, operator, approver, parent or a worker.
	Actor string `json:"actor"`
	// Action is what was done, in words.
	Action string `json:"action"`
	// Result is what came of it, if anything.
	Result string `json:"result,omitempty"`
}

// pausedReport is a paused-worker demonstration's report.json.
type pausedReport struct {
	// Demonstration is the demonstration's directory name.
	Demonstration string `json:"demonstration"`
	// Defective says the receiver skipped checks 2-4 (demonstration 2).
	Defective bool `json:"defective_receiver"`
	// Steps are the demonstration's steps, in order.
	Steps []step `json:"steps"`
	// HoldRequestedAt is when the administrator asked for the hold. This
	// and the next three times are different events; never one "worker
	// stopped" time.
	HoldRequestedAt time.Time `json:"hold_requested_at"`
	// HoldCommittedAt is when the receiver committed the hold.
	HoldCommittedAt time.Time `json:"hold_committed_at"`
	// ActivatedAt is when worker B's grant was activated.
	ActivatedAt time.Time `json:"successor_activated_at"`
	// LastStaleRejectionAt is the scope's last stale rejection, if any.
	LastStaleRejectionAt *time.Time `json:"last_stale_rejection_at"`
	// Stale is worker A's superseded envelope, submitted after release.
	Stale workerResult `json:"stale_worker"`
	// Current is worker B's envelope.
	Current workerResult `json:"current_worker"`
	// TargetAtStaleDecision is the target right after the stale worker's
	// request was decided, before the current worker ran.
	TargetAtStaleDecision targetView `json:"target_at_stale_decision"`
	// MutationsBeforeCurrentWorker counts the target's changes before B wrote.
	MutationsBeforeCurrentWorker uint64 `json:"mutations_before_current_worker"`
	// FinalTarget is the target at the end.
	FinalTarget targetView `json:"final_target"`
	// OutstandingEffects lists effects whose fate the receiver cannot
	// vouch for (kept apart from decided ones): none, when both workers'
	// requests went through this receiver's transaction.
	OutstandingEffects []string `json:"outstanding_effects"`
	// VerifyChain is verify-chain's problem code for the receiver's
	// database at the end.
	VerifyChain string `json:"verify_chain"`
	// VerifyDetail is its evidence, when there is a problem.
	VerifyDetail string `json:"verify_detail,omitempty"`
}

// targetView is a target as a report shows it.
type targetView struct {
	// Revision is the target's revision.
	Revision uint64 `json:"revision"`
	// Value is its value, as text.
	Value string `json:"value"`
}

const (
	actionID = "raise-backup-retention"
	workerA  = "worker-a"
	workerB  = "worker-b"
)

// pausedWorker runs demonstrations 1 and 2: worker A holds an envelope and
// pauses in its own process; the parent holds the scope and activates B;
// A is released and decided before B runs at all.
func (l *lab) pausedWorker(ctx context.Context, name string, defective bool) (*pausedReport, error) {
	dir := filepath.Join(l.opts.Output, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	l.logf("%s: start", name)
	rep := &pausedReport{Demonstration: name, Defective: defective, OutstandingEffects: []string{}}
	record := func(actor, action, result string) {
		rep.Steps = append(rep.Steps, step{At: time.Now().UTC(), Actor: actor, Action: action, Result: result})
	}
	rc, value, req, grantA, err := setupReceiver(ctx, dir, name)
	if err != nil {
		return nil, err
	}
	record("admin", "activate grant for worker-a", grantA.ID)
	// The backup an operator might restore later (demonstrations 4 and 5).
	if err := copyFile(rc.db, filepath.Join(dir, preHoldCopy)); err != nil {
		return nil, err
	}
	if _, err := writeEnvelope(filepath.Join(dir, "envelope-a.cbor"), grantA, "claim-a", req); err != nil {
		return nil, err
	}

	var mode []string
	if defective {
		mode = append(mode, "--defective")
	}
	a, err := l.startWorker(ctx, rc, filepath.Join(dir, "envelope-a.cbor"), workerA, mode...)
	if err != nil {
		return nil, err
	}
	defer a.kill()
	record("worker-a", "holds its envelope and pauses", "")

	var grantB kvfence.Grant
	var before kvfence.Target
	err = rc.with(func(r *kvfence.Receiver) error {
		hold, err := r.Admin().Hold(ctx, kvfence.HoldRequest{Scopes: []string{fixture.Scope}, Reason: "worker-a lease expired"})
		if err != nil {
			return err
		}
		rep.HoldRequestedAt, rep.HoldCommittedAt = hold.HoldRequestedAt, hold.HoldCommittedAt
		record("admin", "hold", fmt.Sprintf("epoch %d -> %d", hold.Scopes[0].PreviousEpoch, hold.Scopes[0].Epoch))
		grantB, err = r.Admin().Activate(ctx, kvfence.ActivateRequest{Scope: fixture.Scope, Executor: workerB,
			Claim: "claim-b", Request: req, Decision: "approval-1-reassigned"})
		if err != nil {
			return err
		}
		rep.ActivatedAt = grantB.CreatedAt
		record("admin", "activate grant for worker-b", grantB.ID)
		before, err = r.Target(fixture.Target)
		return err
	})
	if err != nil {
		return nil, err
	}
	if _, err := writeEnvelope(filepath.Join(dir, "envelope-b.cbor"), grantB, "claim-b", req); err != nil {
		return nil, err
	}
	if l.hooks.afterActivate != nil {
		if err := l.hooks.afterActivate(rc, filepath.Join(dir, "envelope-b.cbor")); err != nil {
			return nil, err
		}
		if err := rc.with(func(r *kvfence.Receiver) error { before, err = r.Target(fixture.Target); return err }); err != nil {
			return nil, err
		}
	}
	if before.Revision != 1 || string(before.Value) != string(value) {
		return nil, fmt.Errorf("%w: %s: target was at revision %d (%s) before worker-a's release, want the original", ErrPrecondition, name, before.Revision, before.Value)
	}

	record("parent", "releases worker-a", "")
	rep.Stale, err = a.release()
	if err != nil {
		return nil, err
	}
	record("worker-a", "submit (old grant)", decision(rep.Stale))

	// A receiver that opens with its anchor replays the fence over the
	// chain, and refuses a chain that records the defective receiver's
	// violation: from here on the defective demonstration's receiver
	// serves worker-b as it served worker-a, and the results are read
	// without the anchor, as observations.
	with := rc.with
	if defective {
		with = rc.observe
	}
	err = with(func(r *kvfence.Receiver) error {
		t, err := r.Target(fixture.Target)
		if err != nil {
			return err
		}
		rep.TargetAtStaleDecision = targetView{t.Revision, string(t.Value)}
		rep.MutationsBeforeCurrentWorker = t.Revision - 1
		return nil
	})
	if err != nil {
		return nil, err
	}

	b, err := l.startWorker(ctx, rc, filepath.Join(dir, "envelope-b.cbor"), workerB, mode...)
	if err != nil {
		return nil, err
	}
	defer b.kill()
	rep.Current, err = b.release()
	if err != nil {
		return nil, err
	}
	record("worker-b", "submit (current grant)", decision(rep.Current))
	if rep.Current.AuditSeq <= rep.Stale.AuditSeq {
		return nil, fmt.Errorf("%w: %s: worker-b was decided (seq %d) before worker-a (seq %d)", ErrPrecondition, name, rep.Current.AuditSeq, rep.Stale.AuditSeq)
	}

	err = with(func(r *kvfence.Receiver) error {
		t, err := r.Target(fixture.Target)
		if err != nil {
			return err
		}
		rep.FinalTarget = targetView{t.Revision, string(t.Value)}
		st, err := r.Status(fixture.Scope)
		if err != nil {
			return err
		}
		if !st.LastStaleRejectionAt.IsZero() {
			at := st.LastStaleRejectionAt
			rep.LastStaleRejectionAt = &at
		}
		return exportState(dir, r)
	})
	if err != nil {
		return nil, err
	}
	v, err := rc.verifyChain()
	if err != nil {
		return nil, err
	}
	rep.VerifyChain, rep.VerifyDetail = string(v.Problem), v.Detail
	record("operator", "verify-chain", rep.VerifyChain)
	if err := writeJSON(filepath.Join(dir, "report.json"), rep); err != nil {
		return nil, err
	}
	l.logf("%s: worker-a %s, worker-b %s; verify-chain %s", name, decision(rep.Stale), decision(rep.Current), rep.VerifyChain)
	return rep, nil
}

// setupReceiver creates a demonstration's receiver on the backup-policy
// fixture: the scope, its target at revision 1, the approved request (also
// written to request.cbor) and an active grant for worker A.
func setupReceiver(ctx context.Context, dir, name string) (rc *receiverFiles, value, req []byte, grantA kvfence.Grant, err error) {
	value, patch, err := fixture.Load()
	if err != nil {
		return nil, nil, nil, grantA, fmt.Errorf("lab: the backup-policy fixture: %w", err)
	}
	if req, err = kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: actionID, Target: fixture.Target, Patch: patch}); err != nil {
		return nil, nil, nil, grantA, err
	}
	if err := os.WriteFile(filepath.Join(dir, "request.cbor"), req, 0o600); err != nil {
		return nil, nil, nil, grantA, err
	}
	if rc, err = newReceiverFiles(dir, "lab-"+name); err != nil {
		return nil, nil, nil, grantA, err
	}
	err = rc.with(func(r *kvfence.Receiver) error {
		admin := r.Admin()
		if _, err := admin.CreateScope(ctx, fixture.Scope); err != nil {
			return err
		}
		if _, err := admin.CreateTarget(ctx, fixture.Scope, fixture.Target, value); err != nil {
			return err
		}
		grantA, err = admin.Activate(ctx, kvfence.ActivateRequest{Scope: fixture.Scope, Executor: workerA,
			Claim: "claim-a", Request: req, Decision: "approval-1"})
		return err
	})
	return rc, value, req, grantA, err
}

func decision(w workerResult) string {
	if w.Reason != "" {
		return w.Outcome + " (" + w.Reason + ")"
	}
	return w.Outcome
}

// receiverFiles is a lab receiver: its database, its anchor and the key
// that signs its checkpoints, all inside the demonstration's directory.
type receiverFiles struct {
	db, anchor, key string
	priv            ed25519.PrivateKey
}

// verifyChain runs verify-chain on the receiver's files with its own key.
func (rc *receiverFiles) verifyChain() (audit.Report, error) {
	return kvfence.VerifyChain(rc.db, kvfence.VerifyOptions{Anchor: audit.FileAnchor{Path: rc.anchor},
		PublicKey: rc.priv.Public().(ed25519.PublicKey), LockTimeout: 10 * time.Second})
}

func newReceiverFiles(dir, id string) (*receiverFiles, error) {
	rc := &receiverFiles{db: filepath.Join(dir, "receiver.db"), anchor: filepath.Join(dir, "receiver.anchor"),
		key: filepath.Join(dir, "receiver.key")}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := keyfile.Write(rc.key, priv, id); err != nil {
		return nil, err
	}
	rc.priv = priv
	return rc, kvfence.Init(rc.db, &kvfence.InitOptions{ReceiverID: id, Key: priv, Anchor: audit.FileAnchor{Path: rc.anchor}})
}

func (rc *receiverFiles) options() *kvfence.Options {
	return &kvfence.Options{LockTimeout: 10 * time.Second, Key: rc.priv, Anchor: audit.FileAnchor{Path: rc.anchor}}
}

// observe is with for a read-only receiver opened without its anchor,
// which neither checks nor replays the chain: for reading the results of
// a demonstration whose chain records a violation.
func (rc *receiverFiles) observe(fn func(r *kvfence.Receiver) error) error {
	return rc.open(&kvfence.Options{LockTimeout: 10 * time.Second, ReadOnly: true}, fn)
}

// with opens the receiver, runs fn and closes it again, so that worker
// processes can take the lock in between.
func (rc *receiverFiles) with(fn func(r *kvfence.Receiver) error) error {
	return rc.open(rc.options(), fn)
}

// open opens the receiver with opts, runs fn and closes it again.
func (rc *receiverFiles) open(opts *kvfence.Options, fn func(r *kvfence.Receiver) error) error {
	r, err := kvfence.Open(rc.db, opts)
	if err != nil {
		return err
	}
	if err := fn(r); err != nil {
		r.Close()
		return err
	}
	return r.Close()
}

func writeEnvelope(path string, g kvfence.Grant, claim string, req []byte) ([]byte, error) {
	env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: g.Scope, Epoch: g.Epoch, Grant: g.ID,
		Executor: g.Executor, Claim: claim, Request: req})
	if err != nil {
		return nil, err
	}
	return env, os.WriteFile(path, env, 0o600)
}

// workerProc is a running worker process, paused until released.
type workerProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *lockedBuilder
	// as names the worker, bound is when the lab kills it, and timer
	// does so; killed says the timer fired.
	as     string
	bound  time.Duration
	timer  *time.Timer
	killed atomic.Bool
}

// lockedBuilder is a strings.Builder that the worker's stderr copier and
// the lab's messages may use at once.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// killGrace is how long past its own bound a worker may take to report
// before the lab kills it: at most this, at most the bound again.
const killGrace = 5 * time.Second

// workerTimeout is the bound passed to each worker.
func (l *lab) workerTimeout() time.Duration {
	if l.opts.WorkerTimeout > 0 {
		return l.opts.WorkerTimeout
	}
	return DefaultWorkerTimeout
}

// ended adds to err what ended the worker, if the lab killed it.
func (w *workerProc) ended(err error) error {
	if w.killed.Load() {
		return fmt.Errorf("%w: lab: worker %s was still running %v after it started, past its time bound, and was killed: %s",
			errWorkerKilled, w.as, w.bound, w.stderr)
	}
	return err
}

// errWorkerKilled means the lab killed a worker that outlived its bound.
var errWorkerKilled = errors.New("lab: worker killed at its time bound")

func (l *lab) startWorker(ctx context.Context, rc *receiverFiles, env, as string, mode ...string) (*workerProc, error) {
	args := append([]string{WorkerCommand, "--db", rc.db, "--anchor", rc.anchor, "--key", rc.key, "--envelope", env, "--as", as}, mode...)
	return l.startProc(ctx, as, args)
}

// startProc starts this binary with args as a worker process and waits
// for its "ready" line.
func (l *lab) startProc(ctx context.Context, as string, args []string) (*workerProc, error) {
	bound := l.workerTimeout()
	args = append(args, "--"+timeoutFlag, bound.String())
	cmd := exec.CommandContext(ctx, l.opts.Executable, args...)
	cmd.Env = append(os.Environ(), l.opts.Env...)
	// Wait returns this long after the worker exits even if something
	// it started still holds its stderr.
	cmd.WaitDelay = killGrace
	w := &workerProc{cmd: cmd, stderr: &lockedBuilder{}, as: as, bound: bound + min(killGrace, bound)}
	cmd.Stderr = w.stderr
	var err error
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w.stdout = bufio.NewReader(out)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("lab: starting worker %s: %w", as, err)
	}
	// The worker's own bound ends it first; this kill ends one that is
	// stuck where its bound cannot reach, so that every read of its
	// output below returns.
	w.timer = time.AfterFunc(w.bound, func() {
		w.killed.Store(true)
		cmd.Process.Kill()
	})
	line, err := w.stdout.ReadString('\n')
	if err != nil || line != "ready\n" {
		w.kill()
		return nil, w.ended(fmt.Errorf("lab: worker %s did not get ready (%q, %v): %s", as, line, err, w.stderr))
	}
	return w, nil
}

// release ends the worker's pause and returns its decision.
func (w *workerProc) release() (workerResult, error) {
	var res workerResult
	if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
		return res, err
	}
	line, err := w.stdout.ReadString('\n')
	werr := w.wait()
	if err != nil || werr != nil {
		return res, w.ended(fmt.Errorf("lab: worker failed (%v, %v): %s", err, werr, w.stderr))
	}
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return res, fmt.Errorf("lab: worker printed %q: %w", line, err)
	}
	return res, nil
}

func (w *workerProc) kill() {
	if w.cmd.ProcessState == nil && w.cmd.Process != nil {
		w.cmd.Process.Kill()
		w.wait()
	}
}

// wait waits for the worker to exit and stops its kill timer.
func (w *workerProc) wait() error {
	err := w.cmd.Wait()
	if w.timer != nil {
		w.timer.Stop()
	}
	return err
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o600)
}

// exportState writes the receiver's receipts and events as JSON beside it.
func exportState(dir string, r *kvfence.Receiver) error { return exportStateOf(dir, r, fixture.Scope) }

// exportStateOf is exportState for the lab action's receipt in scope.
func exportStateOf(dir string, r *kvfence.Receiver, scope string) error {
	rc, err := r.Receipt(scope, actionID)
	var receipts []any
	if err == nil {
		receipts = append(receipts, map[string]any{"scope": rc.Scope, "action": rc.Action, "grant": rc.Grant,
			"request_sha256": hex.EncodeToString(rc.RequestSHA256[:]), "target": rc.Target,
			"rev_before": rc.RevBefore, "rev_after": rc.RevAfter, "audit_seq": rc.AuditSeq, "at": rc.At})
	} else if !errors.Is(err, kvfence.ErrNotFound) {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "receipts.json"), map[string]any{"receipts": receipts}); err != nil {
		return err
	}
	var events []any
	err = r.Events(0, func(e kvfence.Event) bool {
		events = append(events, e.Entry.JSON(e.Hash))
		return true
	})
	if err != nil {
		return err
	}
	return writeJSON(filepath.Join(dir, "events.json"), map[string]any{"events": events})
}
