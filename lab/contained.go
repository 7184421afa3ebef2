package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/fixture"
	"github.com/kvfence/kvfence/kvfence"
)

// containedDemonstration is demonstration 7's directory under the output.
const containedDemonstration = "07-contained-workflow"

// Exit codes of kvfence that demonstration 7 tells apart.
const (
	exitDenied  = 3
	exitPartial = 8
)

// The containment states and boundary result demonstration 7 looks for in
// kvfence contain's --json record.
const (
	stateFull         = "full"
	statePartial      = "partial"
	resultAcknowledge = "acknowledged"
)

// containedOperator is the operator's name in the ledger.
const containedOperator = "operator"

// containedReport is demonstration 7's report.json.
type containedReport struct {
	// Demonstration is the demonstration's directory name.
	Demonstration string `json:"demonstration"`
	// Action is the approved action, whose request names the same target
	// at both receivers.
	Action string `json:"action"`
	// Steps are the demonstration's steps, in order.
	Steps []step `json:"steps"`
	// Receivers are the two served receivers.
	Receivers []containedReceiver `json:"receivers"`
	// ClaimA is worker A's ledger claim, superseded by the takeover;
	// ClaimB is worker B's, which the takeover created.
	ClaimA string `json:"claim_a"`
	ClaimB string `json:"claim_b"`
	// Commands are the kvfence commands the operator ran, as processes, in
	// order.
	Commands []cliRun `json:"commands"`
	// Receiver2StopExitCode is receiver 2's serve's exit status after
	// SIGTERM, before the first containment.
	Receiver2StopExitCode int `json:"receiver_2_stop_exit_code"`
	// FirstContain is kvfence contain while receiver 2 was stopped.
	FirstContain containRun `json:"first_contain"`
	// RefusedActivation is kvfence contain activate for worker B after the
	// first containment.
	RefusedActivation cliBrief `json:"refused_successor_activation"`
	// Receiver1AfterRefusal is receiver 1's scope right after that refusal.
	Receiver1AfterRefusal scopeView `json:"receiver_1_after_refused_activation"`
	// StaleWhilePartial is worker A's envelope at receiver 1 while the
	// containment was partial.
	StaleWhilePartial workerResult `json:"stale_worker_at_receiver_1_while_partial"`
	// SecondContain is kvfence contain after receiver 2 restarted.
	SecondContain containRun `json:"second_contain"`
	// Receiver1EpochAfterFirstContain and Receiver1EpochAfterSecondContain
	// are receiver 1's scope epoch after each containment; their difference
	// counts the generations the rerun issued there.
	Receiver1EpochAfterFirstContain  uint64 `json:"receiver_1_epoch_after_first_contain"`
	Receiver1EpochAfterSecondContain uint64 `json:"receiver_1_epoch_after_second_contain"`
	// StaleAfterFull is worker A's envelope at each receiver after full
	// containment, in receiver order.
	StaleAfterFull []workerResult `json:"stale_worker_after_full_containment"`
	// TargetsBeforeSuccessor are the targets, in receiver order, just
	// before worker B submitted.
	TargetsBeforeSuccessor []targetView `json:"targets_before_successor"`
	// Activation is kvfence contain activate for worker B after full
	// containment and the reconciliation of A's claim.
	Activation cliBrief `json:"successor_activation"`
	// Successor is worker B's envelope at each receiver, in receiver order.
	Successor []workerResult `json:"successor"`
	// ContainVerify is kvfence contain verify at the end: every
	// acknowledgment re-checked against the pinned keys, every installed
	// epoch at or below the receiver's current one (exit 0), or not (4).
	ContainVerify cliBrief `json:"contain_verify"`
	// Boundaries are the final containment record's boundaries, with the
	// times it distinguishes, as kvfence contain show --json printed them.
	Boundaries []containBoundary `json:"boundaries"`
	// HoldRequestedAt (the coordinator's clock) and AcknowledgedAt (the
	// receiver's commit) are per boundary (receiver name), from the final
	// containment record; LastStaleRejectionAt is the latest stale-authority
	// denial there, the record's or, when later, the receiver's status at
	// the end. Different events, never one "contained" time.
	HoldRequestedAt      map[string]string `json:"hold_requested_at"`
	AcknowledgedAt       map[string]string `json:"acknowledged_at"`
	LastStaleRejectionAt map[string]string `json:"last_stale_rejection_at"`
	// OutstandingEffects are the receipts the containment record lists as
	// applied under the superseded claim, at every boundary.
	OutstandingEffects []json.RawMessage `json:"outstanding_effects"`
}

// containedReceiver is one served receiver of demonstration 7.
type containedReceiver struct {
	// Name is the receiver's name in the ledger.
	Name string `json:"name"`
	// ReceiverID is its id.
	ReceiverID string `json:"receiver_id"`
	// Scope is the boundary's scope at that receiver.
	Scope string `json:"scope"`
	// Dir is its directory: database, anchor, key and serve's logs.
	Dir string `json:"dir"`
	// AdminSocket is its admin socket, the server the ledger registered.
	AdminSocket string `json:"admin_socket"`
	// Listen is where it listens for workers.
	Listen string `json:"listen"`
	// ServeLogs are serve's logs, one per process, in order.
	ServeLogs []string `json:"serve_logs"`
	// ServeExitCodes are serve's exit statuses after SIGTERM, in order.
	ServeExitCodes []int `json:"serve_exit_codes"`
	// FinalScope is the scope at the end.
	FinalScope scopeView `json:"final_scope"`
	// FinalTarget is the target at the end.
	FinalTarget targetView `json:"final_target"`
	// VerifyChain is verify-chain's problem code for its database at the
	// end; VerifyDetail its evidence, when there is a problem.
	VerifyChain  string `json:"verify_chain"`
	VerifyDetail string `json:"verify_detail,omitempty"`
}

// scopeView is a scope's control state as a report shows it.
type scopeView struct {
	Epoch                uint64     `json:"epoch"`
	Mode                 string     `json:"mode"`
	ActiveGrant          string     `json:"active_grant"`
	LastStaleRejectionAt *time.Time `json:"last_stale_rejection_at,omitempty"`
	StaleRejections      uint64     `json:"stale_rejections"`
}

func viewOf(s kvfence.ScopeStatus) scopeView {
	v := scopeView{Epoch: s.Epoch, Mode: string(s.Mode), ActiveGrant: s.ActiveGrant, StaleRejections: s.StaleRejections}
	if !s.LastStaleRejectionAt.IsZero() {
		at := s.LastStaleRejectionAt.UTC()
		v.LastStaleRejectionAt = &at
	}
	return v
}

// cliRun is one kvfence command the lab ran as a process.
type cliRun struct {
	// Args are its arguments, after the binary.
	Args []string `json:"args"`
	// StartedAt and EndedAt bound its run.
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
	// ExitCode is its exit status.
	ExitCode int `json:"exit_code"`
	// Stdout and Stderr are what it printed.
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
}

// cliBrief is a command's outcome as the report's fields show it.
type cliBrief struct {
	// At is when it ended.
	At time.Time `json:"at"`
	// ExitCode is its exit status.
	ExitCode int `json:"exit_code"`
	// Stderr is its diagnostic, if any.
	Stderr string `json:"stderr,omitempty"`
}

func (c cliRun) brief() cliBrief {
	return cliBrief{At: c.EndedAt, ExitCode: c.ExitCode, Stderr: strings.TrimSpace(c.Stderr)}
}

// containRun is one run of kvfence contain --json.
type containRun struct {
	// At is when it ended.
	At time.Time `json:"at"`
	// ExitCode is its exit status: 0 for full, 8 for partial or none.
	ExitCode int `json:"exit_code"`
	// Record is the containment record it printed.
	Record containRecord `json:"record"`
}

// containRecord is the part of kvfence contain's --json record the lab
// reads (docs/design.md §8.2); times are kept as printed.
type containRecord struct {
	Containment     string            `json:"containment"`
	Action          string            `json:"action"`
	SupersededClaim string            `json:"superseded_claim"`
	State           string            `json:"state"`
	Boundaries      []containBoundary `json:"boundaries"`
}

// containBoundary is one boundary of a containment record.
type containBoundary struct {
	Receiver             string `json:"receiver"`
	Scope                string `json:"scope"`
	HoldID               string `json:"hold_id"`
	Result               string `json:"result"`
	ErrorCode            string `json:"error_code,omitempty"`
	HoldRequestedAt      string `json:"hold_requested_at"`
	AcknowledgedAt       string `json:"acknowledged_at"`
	PreviousEpoch        uint64 `json:"previous_epoch"`
	InstalledEpoch       uint64 `json:"installed_epoch"`
	LastStaleRejectionAt string `json:"last_stale_rejection_at"`
	Checkpoint           *struct {
		Seq  uint64 `json:"seq"`
		Head string `json:"head"`
	} `json:"checkpoint,omitempty"`
	Outstanding []json.RawMessage `json:"outstanding"`
}

// boundary returns the record's boundary at receiver, or nil.
func (r containRecord) boundary(receiver string) *containBoundary {
	for i := range r.Boundaries {
		if r.Boundaries[i].Receiver == receiver {
			return &r.Boundaries[i]
		}
	}
	return nil
}

// acknowledged says whether every named receiver's boundary, and no
// other, is in the record, and which of them acknowledged.
func (r containRecord) acknowledged(names []string) (map[string]bool, bool) {
	out := map[string]bool{}
	if len(r.Boundaries) != len(names) {
		return out, false
	}
	for _, n := range names {
		b := r.boundary(n)
		if b == nil {
			return out, false
		}
		out[n] = b.Result == resultAcknowledge
	}
	return out, true
}

// kvfence runs this binary with args as an operator's command and returns
// what it did. Only a failure to run it, or a run past the worker bound,
// is an error; its exit status is the caller's to judge.
func (l *lab) kvfence(ctx context.Context, args ...string) (cliRun, error) {
	ctx, cancel := context.WithTimeout(ctx, l.workerTimeout())
	defer cancel()
	run := cliRun{Args: args, StartedAt: time.Now().UTC()}
	cmd := exec.CommandContext(ctx, l.opts.Executable, args...)
	cmd.Env = append(os.Environ(), l.opts.Env...)
	cmd.WaitDelay = killGrace
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	run.EndedAt, run.Stdout, run.Stderr = time.Now().UTC(), stdout.String(), stderr.String()
	if ctx.Err() != nil {
		return run, fmt.Errorf("lab: kvfence %s ran past %v and was killed: %s", strings.Join(args, " "), l.workerTimeout(), run.Stderr)
	}
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		run.ExitCode = ee.ExitCode()
		return run, nil
	}
	if err != nil {
		return run, fmt.Errorf("lab: running kvfence %s: %w", args[0], err)
	}
	return run, nil
}

// containedReceiverRun is a receiver of demonstration 7 while it runs.
type containedReceiverRun struct {
	name, scope, dir, sock string
	// cleanup removes the admin socket's directory when it is not dir.
	cleanup func()
	rc      *receiverFiles
	sv      *served
	admin   *client.Client
	report  *containedReceiver
	// worker A's process and envelope at this receiver.
	a *workerProc
}

// containedRun is demonstration 7 while it runs, for its hook.
type containedRun struct {
	l         *lab
	ctx       context.Context
	pki       string
	receivers []*containedReceiverRun
}

// restart starts receiver i's kvfence serve again on the same files,
// admin socket and TLS address, logging to logName.
func (cr *containedRun) restart(i int, logName string) error {
	r := cr.receivers[i]
	sv, err := cr.l.startServeWith(cr.ctx, serveConfig{dir: r.dir, pki: cr.pki, rc: r.rc, sock: r.sock,
		listen: r.report.Listen, log: logName})
	if err != nil {
		return err
	}
	if sv.ready.Listen != r.report.Listen {
		sv.kill()
		return fmt.Errorf("lab: %s restarted on %s, not %s", r.name, sv.ready.Listen, r.report.Listen)
	}
	r.sv = sv
	r.report.ServeLogs = append(r.report.ServeLogs, filepath.Join(r.dir, logName))
	return nil
}

// containedWorkflow runs demonstration 7: one approved action whose
// effects land at two served receivers, and the containment runbook in
// real processes. Worker A claims and pauses holding its envelopes for
// both; the operator takes the action over for worker B; with receiver 2
// stopped, kvfence contain is partial and the successor's activation is
// refused, with nothing activated at receiver 1; receiver 2 restarts and
// a rerun of contain is full without a second generation at receiver 1;
// A is denied at both; A's claim is reconciled; B is activated at both
// through kvfence contain activate and applied.
func (l *lab) containedWorkflow(ctx context.Context, name string) (*containedReport, error) {
	dir := filepath.Join(l.opts.Output, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	l.logf("%s: start", name)
	rep := &containedReport{Demonstration: name, Action: actionID, Commands: []cliRun{}, OutstandingEffects: []json.RawMessage{},
		HoldRequestedAt: map[string]string{}, AcknowledgedAt: map[string]string{}, LastStaleRejectionAt: map[string]string{}}
	record := func(actor, action, result string) {
		rep.Steps = append(rep.Steps, step{At: time.Now().UTC(), Actor: actor, Action: action, Result: result})
	}
	uid := "unix:uid:" + strconv.Itoa(os.Getuid())
	// runAs runs a kvfence command as a process on actor's behalf and
	// records it; run does so for the operator.
	runAs := func(actor, what string, args ...string) (cliRun, error) {
		c, err := l.kvfence(ctx, args...)
		rep.Commands = append(rep.Commands, c)
		if err != nil {
			return c, err
		}
		record(actor, "kvfence "+what, "exit "+strconv.Itoa(c.ExitCode))
		return c, nil
	}
	run := func(what string, args ...string) (cliRun, error) { return runAs(containedOperator, what, args...) }
	// mustAs runs a command that has to succeed for the schedule to go on;
	// must does so for the operator.
	mustAs := func(actor, what string, args ...string) (cliRun, error) {
		c, err := runAs(actor, what, args...)
		if err == nil && c.ExitCode != 0 {
			err = fmt.Errorf("lab: %s: kvfence %s exited %d: %s", name, strings.Join(args[:min(2, len(args))], " "),
				c.ExitCode, strings.TrimSpace(c.Stderr))
		}
		return c, err
	}
	must := func(what string, args ...string) (cliRun, error) { return mustAs(containedOperator, what, args...) }

	value, patch, err := fixture.Load()
	if err != nil {
		return nil, fmt.Errorf("lab: the backup-policy fixture: %w", err)
	}
	req, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: actionID, Target: fixture.Target, Patch: patch})
	if err != nil {
		return nil, err
	}
	reqFile := filepath.Join(dir, "request.cbor")
	if err := os.WriteFile(reqFile, req, 0o600); err != nil {
		return nil, err
	}
	if err := writeCertificates(dir, map[string]string{"worker-a": servedWorkerA, "worker-b": servedWorkerB,
		"operator": servedOperator}); err != nil {
		return nil, err
	}
	record("operator", "makes one test CA for both receivers, their server certificate and SPIFFE-ID client certificates", "")

	cr := &containedRun{l: l, ctx: ctx, pki: dir}
	defer func() {
		for _, r := range cr.receivers {
			if r.a != nil {
				r.a.kill()
			}
			if r.sv != nil {
				r.sv.kill()
			}
			if r.admin != nil {
				r.admin.Close()
			}
			r.cleanup()
		}
	}()
	for i, scope := range []string{"configmap/east/backup-policy", "configmap/west/backup-policy"} {
		r := &containedReceiverRun{name: "receiver-" + strconv.Itoa(i+1), scope: scope}
		r.dir = filepath.Join(dir, r.name)
		if err := os.Mkdir(r.dir, 0o700); err != nil {
			return nil, err
		}
		r.report = &containedReceiver{Name: r.name, ReceiverID: "lab-" + name + "-" + r.name, Scope: scope, Dir: r.dir}
		if r.rc, err = newReceiverFiles(r.dir, r.report.ReceiverID); err != nil {
			return nil, err
		}
		// The socket's directory outlives a serve process: the restart
		// listens at the same path, the one the ledger registered.
		sock, cleanup, err := socketPath(r.dir)
		if err != nil {
			return nil, err
		}
		r.sock, r.cleanup = sock, cleanup
		cr.receivers = append(cr.receivers, r)
		if r.sv, err = l.startServeWith(ctx, serveConfig{dir: r.dir, pki: dir, rc: r.rc, sock: sock, listen: "127.0.0.1:0",
			log: "serve.log"}); err != nil {
			return nil, err
		}
		r.report.AdminSocket, r.report.Listen = r.sv.ready.AdminSocket, r.sv.ready.Listen
		r.report.ServeLogs = []string{filepath.Join(r.dir, "serve.log")}
		record("serve", r.name+" listening", "tls "+r.report.Listen+", admin socket "+r.report.AdminSocket)
		if r.admin, err = client.New("unix://"+sock, nil); err != nil {
			return nil, err
		}
		if _, err := r.admin.CreateScope(ctx, scope); err != nil {
			return nil, fmt.Errorf("lab: %s: scope create over the admin socket: %w", r.name, err)
		}
		if _, err := r.admin.CreateTarget(ctx, scope, fixture.Target, value); err != nil {
			return nil, fmt.Errorf("lab: %s: target create over the admin socket: %w", r.name, err)
		}
		record(uid, r.name+": scope create "+scope+", target create "+fixture.Target+" (admin socket)", "")
	}
	names := []string{cr.receivers[0].name, cr.receivers[1].name}

	// The ledger, with both receivers registered by their admin sockets
	// and pinned keys, and the action approved with both boundaries.
	ledgerDir := filepath.Join(dir, "ledger")
	if err := os.Mkdir(ledgerDir, 0o700); err != nil {
		return nil, err
	}
	lf, err := newLedgerFiles(ledgerDir, "lab-ledger-"+name)
	if err != nil {
		return nil, err
	}
	ledgerFlags := []string{"--ledger", lf.db, "--anchor", lf.anchor, "--key", lf.key}
	withLedger := func(args ...string) []string { return append(args, ledgerFlags...) }
	for _, r := range cr.receivers {
		if _, err := must("ledger receiver add "+r.name+" (unix://"+r.sock+", pinned key)", withLedger("ledger", "receiver", "add",
			"--name", r.name, "--server", "unix://"+r.sock, "--receiver-id", r.report.ReceiverID,
			"--receiver-pub", r.rc.key+".pub", "--operator", containedOperator)...); err != nil {
			return nil, err
		}
	}
	if _, err := must("ledger approve with boundaries "+names[0]+":"+cr.receivers[0].scope+" and "+names[1]+":"+cr.receivers[1].scope,
		withLedger("ledger", "approve", "--action", actionID, "--approver", "approver", "--decision", "approval-7",
			"--request", reqFile, "--boundary", names[0]+":"+cr.receivers[0].scope,
			"--boundary", names[1]+":"+cr.receivers[1].scope)...); err != nil {
		return nil, err
	}
	c, err := mustAs("worker-a", "ledger claim", withLedger("ledger", "claim", "--action", actionID, "--worker", servedWorkerA, "--json")...)
	if err != nil {
		return nil, err
	}
	if rep.ClaimA, err = claimRef(c); err != nil {
		return nil, err
	}
	rep.Steps[len(rep.Steps)-1].Result += ", claim " + rep.ClaimA

	// The operator activates A's grant at both receivers; A gets its
	// envelopes and pauses, one process per receiver, each holding A's
	// certificate.
	for _, r := range cr.receivers {
		act, err := r.admin.Activate(ctx, kvfence.ActivateRequest{Scope: r.scope, Executor: servedWorkerA, Claim: rep.ClaimA,
			Request: req, Decision: "approval-7"})
		if err != nil {
			return nil, fmt.Errorf("lab: %s: activate over the admin socket: %w", r.name, err)
		}
		record(uid, r.name+": activate grant for worker-a (admin socket)", act.ID)
		if err := writeAssignment(r.dir, "a", act.Assignment()); err != nil {
			return nil, err
		}
		if r.a, err = l.startServedWorker(ctx, r.sv, "worker-a", filepath.Join(r.dir, "envelope-a.cbor")); err != nil {
			return nil, err
		}
		record("worker-a", "holds its envelope for "+r.name+" and A's certificate, and pauses", "")
	}

	c, err = must("ledger takeover to worker-b", withLedger("ledger", "takeover", "--action", actionID, "--operator", containedOperator,
		"--worker", servedWorkerB, "--reason", "worker-a paused past its lease", "--json")...)
	if err != nil {
		return nil, err
	}
	if rep.ClaimB, err = claimRef(c); err != nil {
		return nil, err
	}

	// Receiver 2 goes down: the boundary that cannot acknowledge.
	r1, r2 := cr.receivers[0], cr.receivers[1]
	code, err := r2.sv.stop()
	if err != nil {
		return nil, err
	}
	rep.Receiver2StopExitCode = code
	r2.report.ServeExitCodes = append(r2.report.ServeExitCodes, code)
	record("operator", "SIGTERM to "+r2.name+"'s kvfence serve", "exit "+strconv.Itoa(code))
	if code != 0 {
		return nil, fmt.Errorf("lab: %s: %s's serve exited %d after SIGTERM: %s", name, r2.name, code, r2.sv.logText())
	}
	if l.hooks.afterReceiverStop != nil {
		if err := l.hooks.afterReceiverStop(cr); err != nil {
			return nil, err
		}
	}
	// What contain does next means something only if receiver 2 really
	// cannot answer.
	probe, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, perr := r2.admin.Status(probe, r2.scope)
	cancel()
	if perr == nil {
		return nil, fmt.Errorf("%w: %s: %s still answers on its admin socket after it was stopped", ErrPrecondition, name, r2.name)
	}

	// The coordinator reaches the receivers over their admin sockets and
	// accepts only a server running as this uid there.
	self := strconv.Itoa(os.Getuid())
	containArgs := withLedger("contain", "--action", actionID, "--reason", "worker-a superseded by takeover", "--timeout", "5s",
		"--server-uid", self, "--json")
	if rep.FirstContain, err = l.contain(run, "contain (receiver-2 stopped)", containArgs, filepath.Join(dir, "contain-1.json")); err != nil {
		return nil, err
	}
	s1, err := scopeStatusOf(ctx, r1)
	if err != nil {
		return nil, err
	}
	rep.Receiver1EpochAfterFirstContain = s1.Epoch

	activateArgs := withLedger("contain", "activate", "--action", actionID, "--executor", servedWorkerB, "--claim", rep.ClaimB,
		"--request", reqFile, "--decision", "successor-of-"+rep.ClaimA, "--server-uid", self)
	c, err = run("contain activate worker-b (containment partial)", activateArgs...)
	if err != nil {
		return nil, err
	}
	rep.RefusedActivation = c.brief()
	if s1, err = scopeStatusOf(ctx, r1); err != nil {
		return nil, err
	}
	rep.Receiver1AfterRefusal = viewOf(s1)
	record(uid, r1.name+": status", scopeLine(client.Status{Scopes: []kvfence.ScopeStatus{s1}}))

	if err := targetsUntouched(ctx, name, value, r1); err != nil {
		return nil, err
	}
	record("parent", "releases worker-a at "+r1.name, "")
	if rep.StaleWhilePartial, err = r1.a.command("submit"); err != nil {
		return nil, err
	}
	record("worker-a", "submit its envelope at "+r1.name+" (containment partial)", decision(rep.StaleWhilePartial))

	if err := cr.restart(1, "serve-restart.log"); err != nil {
		return nil, err
	}
	record("operator", "restarts "+r2.name+"'s kvfence serve on the same files and socket", "tls "+r2.sv.ready.Listen)

	if rep.SecondContain, err = l.contain(run, "contain again (receiver-2 back)", containArgs, filepath.Join(dir, "contain-2.json")); err != nil {
		return nil, err
	}
	if s1, err = scopeStatusOf(ctx, r1); err != nil {
		return nil, err
	}
	rep.Receiver1EpochAfterSecondContain = s1.Epoch
	if s1.Epoch < rep.Receiver1EpochAfterFirstContain {
		return nil, fmt.Errorf("lab: %s: %s's epoch went back from %d to %d", name, r1.name, rep.Receiver1EpochAfterFirstContain, s1.Epoch)
	}

	// Receiver 1's target was checked before A's first attempt, whose
	// outcome is an observation; nothing has been sent to receiver 2.
	if err := targetsUntouched(ctx, name, value, r2); err != nil {
		return nil, err
	}
	for _, r := range cr.receivers {
		res, err := r.a.command("submit")
		if err != nil {
			return nil, err
		}
		rep.StaleAfterFull = append(rep.StaleAfterFull, res)
		record("worker-a", "submit its envelope at "+r.name+" (containment full)", decision(res))
		if err := r.a.finish(); err != nil {
			return nil, err
		}
		r.a = nil
	}

	if _, err := must("ledger reconcile worker-a's claim (failed: nothing applied)", withLedger("ledger", "reconcile",
		"--claim", rep.ClaimA, "--operator", containedOperator, "--outcome", "failed")...); err != nil {
		return nil, err
	}
	if c, err = run("contain activate worker-b (containment full, claim reconciled)", activateArgs...); err != nil {
		return nil, err
	}
	rep.Activation = c.brief()

	for _, r := range cr.receivers {
		t, err := r.admin.Target(ctx, fixture.Target)
		if err != nil {
			return nil, err
		}
		rep.TargetsBeforeSuccessor = append(rep.TargetsBeforeSuccessor, targetView{t.Revision, string(t.Value)})
	}
	// Worker B is handed the grant the activation left active at each
	// receiver, if it left one; the scope's status says which.
	for _, r := range cr.receivers {
		res := workerResult{Outcome: "not_submitted"}
		s, err := scopeStatusOf(ctx, r)
		if err != nil {
			return nil, err
		}
		if rep.Activation.ExitCode == 0 && s.Grant != nil && s.Grant.Executor == servedWorkerB && s.Grant.Claim == rep.ClaimB {
			g := s.Grant
			a := client.Assignment{Scope: g.Scope, Epoch: g.Epoch, Grant: g.ID, Executor: g.Executor, Claim: g.Claim, Request: req}
			if err := writeAssignment(r.dir, "b", a); err != nil {
				return nil, err
			}
			b, err := l.startServedWorker(ctx, r.sv, "worker-b", filepath.Join(r.dir, "envelope-b.cbor"))
			if err != nil {
				return nil, err
			}
			res, err = b.command("submit")
			if err == nil {
				err = b.finish()
			}
			b.kill()
			if err != nil {
				return nil, err
			}
		}
		rep.Successor = append(rep.Successor, res)
		record("worker-b", "submit its envelope at "+r.name+" with B's certificate", decision(res))
	}
	for i, res := range rep.Successor {
		for _, w := range []workerResult{rep.StaleAfterFull[i]} {
			if res.AuditSeq != 0 && res.AuditSeq <= w.AuditSeq {
				return nil, fmt.Errorf("%w: %s: worker-b was decided (seq %d) before worker-a (seq %d) at %s",
					ErrPrecondition, name, res.AuditSeq, w.AuditSeq, cr.receivers[i].name)
			}
		}
	}

	// The evidence: the record as the ledger keeps it, each receiver's
	// state, its logs and its chain.
	show, err := must("contain show", withLedger("contain", "show", "--action", actionID, "--json")...)
	if err != nil {
		return nil, err
	}
	c, err = run("contain verify", withLedger("contain", "verify", "--action", actionID, "--server-uid", self)...)
	if err != nil {
		return nil, err
	}
	rep.ContainVerify = c.brief()
	var final containRecord
	if err := json.Unmarshal([]byte(show.Stdout), &final); err != nil {
		return nil, fmt.Errorf("lab: %s: kvfence contain show --json printed %q: %w", name, show.Stdout, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "containment.json"), []byte(show.Stdout), 0o600); err != nil {
		return nil, err
	}
	rep.Boundaries = final.Boundaries
	for _, b := range final.Boundaries {
		rep.HoldRequestedAt[b.Receiver], rep.AcknowledgedAt[b.Receiver] = b.HoldRequestedAt, b.AcknowledgedAt
		rep.LastStaleRejectionAt[b.Receiver] = b.LastStaleRejectionAt
		rep.OutstandingEffects = append(rep.OutstandingEffects, b.Outstanding...)
	}
	for _, r := range cr.receivers {
		s, err := scopeStatusOf(ctx, r)
		if err != nil {
			return nil, err
		}
		r.report.FinalScope = viewOf(s)
		// The receiver's own latest stale rejection, when the record's is
		// older: A's attempts came after the containment was recorded.
		if s.LastStaleRejectionAt.After(parseTime(rep.LastStaleRejectionAt[r.name])) {
			rep.LastStaleRejectionAt[r.name] = s.LastStaleRejectionAt.UTC().Format(time.RFC3339Nano)
		}
		t, err := r.admin.Target(ctx, fixture.Target)
		if err != nil {
			return nil, err
		}
		r.report.FinalTarget = targetView{t.Revision, string(t.Value)}
		code, err := r.sv.stop()
		if err != nil {
			return nil, err
		}
		r.report.ServeExitCodes = append(r.report.ServeExitCodes, code)
		record("operator", "SIGTERM to "+r.name+"'s kvfence serve", "exit "+strconv.Itoa(code))
		if code != 0 {
			return nil, fmt.Errorf("lab: %s: %s's serve exited %d after SIGTERM: %s", name, r.name, code, r.sv.logText())
		}
		scope := r.scope
		if err := r.rc.with(func(rv *kvfence.Receiver) error { return exportStateOf(r.dir, rv, scope) }); err != nil {
			return nil, err
		}
		v, err := r.rc.verifyChain()
		if err != nil {
			return nil, err
		}
		r.report.VerifyChain, r.report.VerifyDetail = string(v.Problem), v.Detail
		record("operator", r.name+": verify-chain", r.report.VerifyChain)
		rep.Receivers = append(rep.Receivers, *r.report)
	}
	if err := writeJSON(filepath.Join(dir, "report.json"), rep); err != nil {
		return nil, err
	}
	l.logf("%s: contain %s (exit %d), activation exit %d; worker-a %s; contain %s (exit %d), %d new generations; worker-a %s, %s; "+
		"activation exit %d; worker-b %s, %s", name, rep.FirstContain.Record.State, rep.FirstContain.ExitCode, rep.RefusedActivation.ExitCode,
		decision(rep.StaleWhilePartial), rep.SecondContain.Record.State, rep.SecondContain.ExitCode,
		rep.Receiver1EpochAfterSecondContain-rep.Receiver1EpochAfterFirstContain, decision(rep.StaleAfterFull[0]),
		decision(rep.StaleAfterFull[1]), rep.Activation.ExitCode, decision(rep.Successor[0]), decision(rep.Successor[1]))
	return rep, nil
}

// observe sets demonstration 7's summary keys from its report.
func (rep *containedReport) observe(o *Observations) {
	names := make([]string, len(rep.Receivers))
	for i, r := range rep.Receivers {
		names[i] = r.Name
	}
	// A denial counts only as the fence's answer to stale authority: one
	// for another reason (a malformed or mismatched envelope) would show
	// nothing about containment.
	denied := func(w workerResult) bool {
		switch kvfence.Reason(w.Reason) {
		case kvfence.ReasonReceiverHeld, kvfence.ReasonStaleEpoch, kvfence.ReasonInactiveGrant:
			return w.Outcome == string(kvfence.Denied)
		}
		return false
	}
	applied := func(w workerResult) bool { return w.Outcome == string(kvfence.Applied) }
	first, ok1 := rep.FirstContain.Record.acknowledged(names)
	second, ok2 := rep.SecondContain.Record.acknowledged(names)
	o.ContainPartialBlockedSuccessor = len(names) == 2 && ok1 && rep.FirstContain.ExitCode == exitPartial &&
		rep.FirstContain.Record.State == statePartial && first[names[0]] && !first[names[1]] &&
		rep.RefusedActivation.ExitCode == exitDenied && rep.Receiver1AfterRefusal.ActiveGrant == "" &&
		rep.Receiver1AfterRefusal.Mode == string(kvfence.ModeHeld)
	o.ContainRetryNewGenerations = rep.Receiver1EpochAfterSecondContain - rep.Receiver1EpochAfterFirstContain
	o.ContainFullAfterRetry = ok2 && rep.SecondContain.ExitCode == 0 && rep.SecondContain.Record.State == stateFull &&
		second[names[0]] && second[names[1]]
	o.ContainStaleDeniedAtEveryBoundary = denied(rep.StaleWhilePartial) && len(rep.StaleAfterFull) == len(names) &&
		len(rep.TargetsBeforeSuccessor) == len(names)
	for i := range rep.StaleAfterFull {
		o.ContainStaleDeniedAtEveryBoundary = o.ContainStaleDeniedAtEveryBoundary && denied(rep.StaleAfterFull[i]) &&
			rep.TargetsBeforeSuccessor[i].Revision == 1
	}
	o.ContainSuccessorAccepted = rep.Activation.ExitCode == 0 && len(rep.Successor) == len(names)
	for _, w := range rep.Successor {
		o.ContainSuccessorAccepted = o.ContainSuccessorAccepted && applied(w)
	}
}

// contain runs kvfence contain --json with args, keeps its record in file
// and returns it. A run that printed no record is an error: the lab cannot
// judge a containment it cannot read.
func (l *lab) contain(run func(string, ...string) (cliRun, error), what string, args []string, file string) (containRun, error) {
	c, err := run(what, args...)
	if err != nil {
		return containRun{}, err
	}
	out := containRun{At: c.EndedAt, ExitCode: c.ExitCode}
	if err := json.Unmarshal([]byte(c.Stdout), &out.Record); err != nil {
		return out, fmt.Errorf("lab: kvfence contain exited %d and printed no containment record (%v): %s%s",
			c.ExitCode, err, c.Stdout, c.Stderr)
	}
	if err := os.WriteFile(file, []byte(c.Stdout), 0o600); err != nil {
		return out, err
	}
	return out, nil
}

// claimRef reads the claim ref a ledger command printed with --json.
func claimRef(c cliRun) (string, error) {
	var v struct {
		Claim string `json:"claim"`
	}
	if err := json.Unmarshal([]byte(c.Stdout), &v); err != nil || v.Claim == "" {
		return "", fmt.Errorf("lab: kvfence %s printed no claim: %q (%v)", strings.Join(c.Args[:2], " "), c.Stdout, err)
	}
	return v.Claim, nil
}

// scopeStatusOf reads a receiver's boundary scope over its admin socket.
func scopeStatusOf(ctx context.Context, r *containedReceiverRun) (kvfence.ScopeStatus, error) {
	st, err := r.admin.Status(ctx, r.scope)
	if err != nil {
		return kvfence.ScopeStatus{}, fmt.Errorf("lab: %s: status over the admin socket: %w", r.name, err)
	}
	if len(st.Scopes) != 1 {
		return kvfence.ScopeStatus{}, fmt.Errorf("lab: %s: status of %s listed %d scopes", r.name, r.scope, len(st.Scopes))
	}
	return st.Scopes[0], nil
}

// targetsUntouched fails with ErrPrecondition unless the target at every
// receiver still has its original value and revision: what the workers
// do next means something only then.
func targetsUntouched(ctx context.Context, name string, value []byte, rs ...*containedReceiverRun) error {
	for _, r := range rs {
		t, err := r.admin.Target(ctx, fixture.Target)
		if err != nil {
			return fmt.Errorf("lab: %s: %w", r.name, err)
		}
		if t.Revision != 1 || !bytes.Equal(t.Value, value) {
			return fmt.Errorf("%w: %s: the target at %s was at revision %d (%s), want the original", ErrPrecondition, name,
				r.name, t.Revision, t.Value)
		}
	}
	return nil
}

// parseTime reads a time as the containment record prints it; zero for
// none or for one it cannot read.
func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}
