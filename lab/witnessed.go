package lab

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/internal/dirsync"
	"github.com/kvfence/kvfence/internal/fixture"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/witness"
)

// witnessedDemonstration is demonstration 4b's directory under the output.
const witnessedDemonstration = "04b-restored-receiver-and-anchor-witnessed"

// The witnesses of demonstration 4b: three, of which any two make a
// quorum, so that any two that answer include one that cosigned every
// acknowledged write.
const (
	witnessCount  = 3
	witnessQuorum = 2
)

// exitIntegrity is kvfence's exit code for an integrity refusal (a
// rollback, a fork, a damaged anchor).
const exitIntegrity = 4

// witnessedReport is demonstration 4b's report.json.
type witnessedReport struct {
	// Demonstration is the demonstration's directory name.
	Demonstration string `json:"demonstration"`
	// Steps are the demonstration's steps, in order.
	Steps []step `json:"steps"`
	// Quorum is the K of --witness-quorum.
	Quorum int `json:"quorum"`
	// Witnesses are the witness processes, as they were at the end.
	Witnesses []witnessView `json:"witnesses"`
	// SizesAtBackup are the witnesses' latest cosigned tree sizes when
	// the operator copied the database and its anchor.
	SizesAtBackup map[string]uint64 `json:"witness_sizes_at_backup"`
	// SizesAfterHold are their latest cosigned sizes after the hold.
	SizesAfterHold map[string]uint64 `json:"witness_sizes_after_hold"`
	// Commands are the operator's and workers' kvfence commands, in order.
	Commands []cliRun `json:"commands"`
	// Current is worker B's submission of its current envelope.
	Current witnessedAttempt `json:"current_worker"`
	// TargetRestored is the restored database's target, read read-only.
	TargetRestored targetView `json:"target_restored"`
	// Counterexample is worker A's old envelope submitted to the restored
	// pair without the witness flags.
	Counterexample witnessedAttempt `json:"counterexample_without_witnesses"`
	// TargetAfterCounterexample is the target after it.
	TargetAfterCounterexample targetView `json:"target_after_counterexample"`
	// Witnessed is worker A's old envelope submitted to the pair restored
	// again, with the witness flags and every witness up.
	Witnessed witnessedAttempt `json:"stale_worker_with_witnesses"`
	// OneDown are the same attempt with each witness in turn stopped.
	OneDown []witnessedAttempt `json:"stale_worker_with_one_witness_down"`
	// TargetAfter is the target after the witnessed attempts.
	TargetAfter targetView `json:"target_after"`
	// VerifyChain is verify-chain with the witness flags on the restored
	// pair.
	VerifyChain witnessedVerify `json:"verify_chain"`
}

// witnessView is one witness process as the report shows it.
type witnessView struct {
	// Name is the witness's id, its NAME in --witness.
	Name string `json:"name"`
	// Listen is the address it last listened on.
	Listen string `json:"listen"`
	// ExitCodes are its exit statuses after each SIGTERM, in order.
	ExitCodes []int `json:"exit_codes"`
}

// witnessedAttempt is one submission of an envelope by kvfence submit.
type witnessedAttempt struct {
	// Witnesses names the witnesses given on its command line; none
	// means it ran without the witness flags.
	Witnesses []string `json:"witnesses"`
	// Down names the witness stopped during the attempt, if any.
	Down string `json:"down,omitempty"`
	// ExitCode is kvfence submit's exit status.
	ExitCode int `json:"exit_code"`
	// Outcome is the receiver's decision, when it decided.
	Outcome string `json:"outcome,omitempty"`
	// Reason is a denial's reason.
	Reason string `json:"reason,omitempty"`
	// Revision is the target's revision after an applied request.
	Revision uint64 `json:"revision,omitempty"`
	// ErrorCode is the --json error code of a refusal.
	ErrorCode string `json:"error_code,omitempty"`
	// ErrorMessage is its message.
	ErrorMessage string `json:"error_message,omitempty"`
	// RefusedByWitness says the refusal was the witnesses': exit 4,
	// rollback_detected, and a witness of the command line named as
	// having cosigned a larger tree.
	RefusedByWitness bool `json:"refused_by_witness"`
}

// witnessedVerify is verify-chain's answer with the witness flags.
type witnessedVerify struct {
	// ExitCode is its exit status.
	ExitCode int `json:"exit_code"`
	// Problem is its problem code.
	Problem string `json:"problem"`
	// Detail is its evidence.
	Detail string `json:"detail,omitempty"`
}

// submitAnswer is what kvfence submit --json prints: a decision, or an
// error.
type submitAnswer struct {
	Outcome  string `json:"outcome"`
	Reason   string `json:"reason"`
	Revision uint64 `json:"revision"`
	Error    *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// parseAttempt reads kvfence submit --json's run into an attempt and
// judges whether the witnesses refused it. names are the witnesses on its
// command line and down the one stopped, whose name cannot count.
func parseAttempt(run cliRun, names []string, down string) witnessedAttempt {
	a := witnessedAttempt{Witnesses: names, Down: down, ExitCode: run.ExitCode}
	if a.Witnesses == nil {
		a.Witnesses = []string{}
	}
	var ans submitAnswer
	if err := json.Unmarshal([]byte(run.Stdout), &ans); err == nil {
		a.Outcome, a.Reason, a.Revision = ans.Outcome, ans.Reason, ans.Revision
		if ans.Error != nil {
			a.ErrorCode, a.ErrorMessage = ans.Error.Code, ans.Error.Message
		}
	} else {
		a.ErrorMessage = strings.TrimSpace(run.Stderr)
	}
	// A witness that is down cannot have answered: only the others'
	// answers count.
	var up []string
	for _, n := range names {
		if n != down {
			up = append(up, n)
		}
	}
	a.RefusedByWitness = refusedByWitness(a, up)
	return a
}

// refusedByWitness says an attempt was refused because a witness of names
// cosigned a larger tree than the database's: exit 4 with
// rollback_detected, naming one of them. A refusal for any other reason
// (a transport error, a usage error, too few answers, the local anchor)
// is not the witnesses' and does not count.
func refusedByWitness(a witnessedAttempt, names []string) bool {
	if a.ExitCode != exitIntegrity || a.ErrorCode != string(audit.ProblemRollbackDetected) || a.Outcome != "" {
		return false
	}
	return namesWitness(a.ErrorMessage, names)
}

// namesWitness says msg is a witness.DivergenceError's account of one of
// names: "witness NAME cosigned size N".
func namesWitness(msg string, names []string) bool {
	for _, n := range names {
		if strings.Contains(msg, "witness "+n+" cosigned size ") {
			return true
		}
	}
	return false
}

// observe sets demonstration 4b's summary keys. The restored pair accepted
// the old grant with witnesses (true) if any witnessed attempt was
// applied; it did not (false, the expected value) only if every witnessed
// attempt, with all witnesses up and with each one down, was the
// witnesses' refusal, verify-chain with the witnesses reported the
// rollback naming one, and the target did not move. Anything else
// (another failure) leaves it null, which is not as expected: a refusal
// that was not the witnesses' shows nothing about them.
func (rep *witnessedReport) observe(o *Observations) {
	o.RestoredReceiverAndAnchorAcceptedOldGrant = rep.Counterexample.ExitCode == 0 &&
		rep.Counterexample.Outcome == string(kvfence.Applied) && rep.TargetAfterCounterexample.Revision == rep.TargetRestored.Revision+1
	attempts := append([]witnessedAttempt{rep.Witnessed}, rep.OneDown...)
	refused := len(rep.OneDown) == witnessCount
	for _, a := range attempts {
		if a.Outcome == string(kvfence.Applied) {
			o.RestoredReceiverAndAnchorAcceptedOldGrantWithWitnesses = boolPtr(true)
			return
		}
		refused = refused && a.RefusedByWitness
	}
	names := make([]string, len(rep.Witnesses))
	for i, w := range rep.Witnesses {
		names[i] = w.Name
	}
	refused = refused && rep.VerifyChain.ExitCode == exitIntegrity &&
		rep.VerifyChain.Problem == string(audit.ProblemRollbackDetected) && namesWitness(rep.VerifyChain.Detail, names) &&
		rep.TargetAfter == rep.TargetRestored && rep.TargetRestored.Revision == 1
	o.RestoredReceiverAndAnchorAcceptedOldGrantWithWitnesses = nil
	if refused {
		o.RestoredReceiverAndAnchorAcceptedOldGrantWithWitnesses = boolPtr(false)
	}
}

// witnessProc is a running kvfence witness serve.
type witnessProc struct {
	name, db, key, pub string
	cmd                *exec.Cmd
	log                *os.File
	listen             string
	exited             chan error
	view               *witnessView
}

// witnessedRun is demonstration 4b while it runs.
type witnessedRun struct {
	l         *lab
	ctx       context.Context
	dir       string
	rep       *witnessedReport
	rc        *receiverFiles
	witnesses []*witnessProc
	// starts counts witness serve starts, for log names.
	starts int
	// httpc trusts the demonstration's CA, for asking witnesses directly.
	httpc  *http.Client
	origin string
}

// restoredWithWitnesses runs demonstration 4b: a receiver of its own,
// witnessed by three kvfence witness serve processes with a quorum of two,
// every write a kvfence command with the witness flags. The operator backs
// up the database and its anchor together after worker A's activation,
// holds, activates worker B, who applies, and restores both files. Without
// the witness flags the restored pair accepts A's old envelope (the
// counterexample); restored again, with the witness flags, it refuses to
// open, with all witnesses up and with each one down, and verify-chain
// with them reports the rollback.
func (l *lab) restoredWithWitnesses(ctx context.Context, name string) (*witnessedReport, error) {
	dir := filepath.Join(l.opts.Output, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	l.logf("%s: start", name)
	rep := &witnessedReport{Demonstration: name, Quorum: witnessQuorum, Commands: []cliRun{}}
	wr := &witnessedRun{l: l, ctx: ctx, dir: dir, rep: rep}
	defer wr.killAll()
	if err := wr.run(); err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(dir, "report.json"), rep); err != nil {
		return nil, err
	}
	l.logf("%s: without witnesses %s; with witnesses exit %d %s; one down %s; verify-chain %s", name,
		rep.Counterexample.Outcome, rep.Witnessed.ExitCode, rep.Witnessed.ErrorCode, oneDownLine(rep.OneDown), rep.VerifyChain.Problem)
	return rep, nil
}

func oneDownLine(as []witnessedAttempt) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = fmt.Sprintf("%s down: exit %d %s", a.Down, a.ExitCode, a.ErrorCode)
	}
	return strings.Join(parts, ", ")
}

func (wr *witnessedRun) record(actor, action, result string) {
	wr.rep.Steps = append(wr.rep.Steps, step{At: time.Now().UTC(), Actor: actor, Action: action, Result: result})
}

func (wr *witnessedRun) run() error {
	dir, rep := wr.dir, wr.rep
	if err := writeCertificates(dir, nil); err != nil {
		return err
	}
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil || !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("lab: %s: the test CA (%v)", wr.dir, err)
	}
	wr.httpc = &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}}}
	wr.record("operator", "makes a test CA and the witnesses' server certificate for 127.0.0.1", "")

	// The receiver is initialised in the demonstration's directory as
	// demonstration 1's is; initialisation asks no witness.
	id := "lab-" + rep.Demonstration
	if wr.rc, err = newReceiverFiles(dir, id); err != nil {
		return err
	}
	if wr.origin, err = checkpoint.ReceiverOrigin(id, wr.rc.priv.Public().(ed25519.PublicKey)); err != nil {
		return err
	}
	wr.record("operator", "init", id)

	for i := range witnessCount {
		w := &witnessProc{name: fmt.Sprintf("lab-witness-%d", i+1)}
		w.db, w.key = filepath.Join(dir, w.name+".db"), filepath.Join(dir, w.name+".key")
		w.pub = w.key + ".pub"
		w.view = &witnessView{Name: w.name, ExitCodes: []int{}}
		if _, err := wr.must("witness init", "witness", "init", "--id", w.name, "--key", w.key, "--db", w.db, "--json"); err != nil {
			return err
		}
		if _, err := wr.must("witness trust", "witness", "trust", "--db", w.db, "--name", id,
			"--receiver-pub", wr.rc.key+".pub", "--json"); err != nil {
			return err
		}
		if err := wr.start(w); err != nil {
			return err
		}
		wr.witnesses = append(wr.witnesses, w)
	}
	for _, w := range wr.witnesses {
		rep.Witnesses = append(rep.Witnesses, *w.view)
	}
	wr.record("operator", fmt.Sprintf("starts %d witnesses (kvfence witness serve), each trusting the receiver", witnessCount), "")

	value, patch, err := fixture.Load()
	if err != nil {
		return fmt.Errorf("lab: the backup-policy fixture: %w", err)
	}
	req, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: actionID, Target: fixture.Target, Patch: patch})
	if err != nil {
		return err
	}
	reqFile, valueFile := filepath.Join(dir, "request.cbor"), filepath.Join(dir, "value.json")
	if err := os.WriteFile(reqFile, req, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(valueFile, value, 0o600); err != nil {
		return err
	}
	if _, err := wr.mustWrite("scope create", "scope", "create", "--scope", fixture.Scope); err != nil {
		return err
	}
	if _, err := wr.mustWrite("target create", "target", "create", "--scope", fixture.Scope, "--target", fixture.Target,
		"--value-file", valueFile); err != nil {
		return err
	}
	grantA, err := wr.activate(workerA, "claim-a", "approval-1", reqFile)
	if err != nil {
		return err
	}
	if _, err := writeEnvelope(filepath.Join(dir, "envelope-a.cbor"), grantA, "claim-a", req); err != nil {
		return err
	}
	wr.record("operator", "scope create, target create, activate grant for worker-a, each with the witness flags", grantA.ID)

	// The backup: the database and its anchor copied together, as a
	// snapshot of the machine or its volume would.
	backup := filepath.Join(dir, "backup")
	if err := os.Mkdir(backup, 0o700); err != nil {
		return err
	}
	for _, f := range []string{wr.rc.db, wr.rc.anchor} {
		if err := copyFile(f, filepath.Join(backup, filepath.Base(f))); err != nil {
			return err
		}
	}
	if rep.SizesAtBackup, err = wr.latestSizes(); err != nil {
		return err
	}
	backupSize := maxSize(rep.SizesAtBackup)
	if n := countAtLeast(rep.SizesAtBackup, backupSize); backupSize == 0 || n < witnessQuorum {
		return fmt.Errorf("%w: %s: worker-a's activation cosigned by %d witnesses (%v), want at least %d",
			ErrPrecondition, rep.Demonstration, n, rep.SizesAtBackup, witnessQuorum)
	}
	wr.record("operator", "copies the database and its anchor (the backup)", fmt.Sprintf("witnesses at size %d", backupSize))

	if _, err := wr.mustWrite("hold", "hold", "--scope", fixture.Scope, "--reason", "worker-a lease expired"); err != nil {
		return err
	}
	if rep.SizesAfterHold, err = wr.latestSizes(); err != nil {
		return err
	}
	if n := countAtLeast(rep.SizesAfterHold, backupSize+1); n < witnessQuorum {
		return fmt.Errorf("%w: %s: the hold cosigned by %d witnesses (%v), want at least %d",
			ErrPrecondition, rep.Demonstration, n, rep.SizesAfterHold, witnessQuorum)
	}
	wr.record("operator", "hold, with the witness flags", fmt.Sprintf("witnesses' latest sizes %v", rep.SizesAfterHold))

	grantB, err := wr.activate(workerB, "claim-b", "approval-1-reassigned", reqFile)
	if err != nil {
		return err
	}
	envB := filepath.Join(dir, "envelope-b.cbor")
	if _, err := writeEnvelope(envB, grantB, "claim-b", req); err != nil {
		return err
	}
	wr.record("operator", "activate grant for worker-b, with the witness flags", grantB.ID)
	run, err := wr.submit(workerB, envB, true)
	if err != nil {
		return err
	}
	rep.Current = parseAttempt(run, wr.names(), "")
	if rep.Current.ExitCode != 0 || rep.Current.Outcome != string(kvfence.Applied) {
		return fmt.Errorf("%w: %s: worker-b's current envelope was not applied: exit %d %s %s",
			ErrPrecondition, rep.Demonstration, rep.Current.ExitCode, rep.Current.Outcome, rep.Current.ErrorMessage)
	}
	wr.record("worker-b", "submit (current grant), with the witness flags", decision(workerResult{Outcome: rep.Current.Outcome}))

	if err := wr.restore(backup); err != nil {
		return err
	}
	if rep.TargetRestored, err = readTarget(wr.rc.db); err != nil {
		return err
	}
	if rep.TargetRestored.Revision != 1 {
		return fmt.Errorf("%w: %s: the restored target is at revision %d, want the backup's 1",
			ErrPrecondition, rep.Demonstration, rep.TargetRestored.Revision)
	}

	// The counterexample: the restored pair agrees with itself, so
	// without the witnesses nothing tells it from the present.
	envA := filepath.Join(dir, "envelope-a.cbor")
	if run, err = wr.submit(workerA, envA, false); err != nil {
		return err
	}
	rep.Counterexample = parseAttempt(run, nil, "")
	wr.record("worker-a", "submit (old grant) to the restored pair, without the witness flags",
		attemptLine(rep.Counterexample))
	if rep.TargetAfterCounterexample, err = readTarget(wr.rc.db); err != nil {
		return err
	}

	if err := wr.restore(backup); err != nil {
		return err
	}
	if t, err := readTarget(wr.rc.db); err != nil || t != rep.TargetRestored {
		return fmt.Errorf("%w: %s: the pair restored again has target %+v (%v), want %+v",
			ErrPrecondition, rep.Demonstration, t, err, rep.TargetRestored)
	}
	if run, err = wr.submit(workerA, envA, true); err != nil {
		return err
	}
	rep.Witnessed = parseAttempt(run, wr.names(), "")
	wr.record("worker-a", "submit (old grant) to the restored pair, with the witness flags", attemptLine(rep.Witnessed))

	for _, w := range wr.witnesses {
		code, err := wr.stop(w)
		if err != nil {
			return err
		}
		wr.record("operator", "SIGTERM to "+w.name, "exit "+strconv.Itoa(code))
		if run, err = wr.submit(workerA, envA, true); err != nil {
			return err
		}
		a := parseAttempt(run, wr.names(), w.name)
		rep.OneDown = append(rep.OneDown, a)
		wr.record("worker-a", "submit (old grant), with the witness flags, "+w.name+" down", attemptLine(a))
		if err := wr.start(w); err != nil {
			return err
		}
		wr.record("operator", "starts "+w.name+" again", w.listen)
	}
	if rep.TargetAfter, err = readTarget(wr.rc.db); err != nil {
		return err
	}

	vargs := append([]string{"verify-chain", "--db", wr.rc.db, "--anchor", wr.rc.anchor, "--pub", wr.rc.key + ".pub",
		"--lock-timeout", "10s", "--json"}, wr.witnessFlags()...)
	run, err = wr.kvfence(vargs...)
	if err != nil {
		return err
	}
	var v struct {
		Problem string `json:"problem"`
		Detail  string `json:"detail"`
		Error   *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	rep.VerifyChain.ExitCode = run.ExitCode
	if err := json.Unmarshal([]byte(run.Stdout), &v); err == nil {
		rep.VerifyChain.Problem, rep.VerifyChain.Detail = v.Problem, v.Detail
		if v.Error != nil {
			rep.VerifyChain.Problem, rep.VerifyChain.Detail = v.Error.Code, v.Error.Message
		}
	} else {
		rep.VerifyChain.Detail = strings.TrimSpace(run.Stderr)
	}
	wr.record("operator", "verify-chain on the restored pair, with the witness flags",
		fmt.Sprintf("exit %d %s", rep.VerifyChain.ExitCode, rep.VerifyChain.Problem))

	for i, w := range wr.witnesses {
		code, err := wr.stop(w)
		if err != nil {
			return err
		}
		rep.Witnesses[i] = *w.view
		if code != 0 {
			return fmt.Errorf("lab: %s: kvfence witness serve %s exited %d after SIGTERM: %s", rep.Demonstration, w.name, code, logText(w.log))
		}
	}
	wr.record("operator", "SIGTERM to every witness", "exit 0")
	return nil
}

func attemptLine(a witnessedAttempt) string {
	if a.Outcome != "" {
		return decision(workerResult{Outcome: a.Outcome, Reason: a.Reason})
	}
	return fmt.Sprintf("exit %d %s: %s", a.ExitCode, a.ErrorCode, a.ErrorMessage)
}

// names returns the witnesses' names, as the witness flags give them.
func (wr *witnessedRun) names() []string {
	var out []string
	for _, w := range wr.witnesses {
		out = append(out, w.name)
	}
	return out
}

func boolPtr(b bool) *bool { return &b }

// witnessFlags are the witness flags naming every witness at its current
// address. A stopped witness stays on the command line: the operator does
// not know it is down, and the quorum must do without it.
func (wr *witnessedRun) witnessFlags() []string {
	var out []string
	for _, w := range wr.witnesses {
		out = append(out, "--witness", w.name+"=https://"+w.listen, "--witness-pub", w.name+"="+w.pub)
	}
	return append(out, "--witness-quorum", strconv.Itoa(witnessQuorum), "--witness-ca", filepath.Join(wr.dir, "ca.crt"))
}

// kvfence runs an operator or worker command and keeps it in the report.
func (wr *witnessedRun) kvfence(args ...string) (cliRun, error) {
	run, err := wr.l.kvfence(wr.ctx, args...)
	if err == nil {
		wr.rep.Commands = append(wr.rep.Commands, run)
	}
	return run, err
}

// must runs a command that must succeed.
func (wr *witnessedRun) must(what string, args ...string) (cliRun, error) {
	run, err := wr.kvfence(args...)
	if err == nil && run.ExitCode != 0 {
		err = fmt.Errorf("lab: %s: kvfence %s exited %d: %s%s", wr.rep.Demonstration, what, run.ExitCode,
			strings.TrimSpace(run.Stderr), strings.TrimSpace(run.Stdout))
	}
	return run, err
}

// mustWrite runs a write to the receiver with the witness flags; it must
// succeed, which means K witnesses cosigned it.
func (wr *witnessedRun) mustWrite(what string, args ...string) (cliRun, error) {
	args = append(args, "--db", wr.rc.db, "--anchor", wr.rc.anchor, "--key", wr.rc.key, "--lock-timeout", "10s", "--json")
	return wr.must(what, append(args, wr.witnessFlags()...)...)
}

// activate activates a grant for executor through kvfence activate.
func (wr *witnessedRun) activate(executor, claim, decisionRef, reqFile string) (kvfence.Grant, error) {
	run, err := wr.mustWrite("activate", "activate", "--scope", fixture.Scope, "--executor", executor, "--claim", claim,
		"--request", reqFile, "--decision", decisionRef)
	if err != nil {
		return kvfence.Grant{}, err
	}
	var g struct {
		Grant    string `json:"grant"`
		Scope    string `json:"scope"`
		Epoch    uint64 `json:"epoch"`
		Executor string `json:"executor"`
	}
	if err := json.Unmarshal([]byte(run.Stdout), &g); err != nil || g.Grant == "" || g.Executor != executor {
		return kvfence.Grant{}, fmt.Errorf("lab: %s: kvfence activate printed %q (%v)", wr.rep.Demonstration, run.Stdout, err)
	}
	return kvfence.Grant{ID: g.Grant, Scope: g.Scope, Epoch: g.Epoch, Executor: g.Executor}, nil
}

// submit runs kvfence submit as worker as with its envelope, with the
// witness flags or without them.
func (wr *witnessedRun) submit(as, env string, witnessed bool) (cliRun, error) {
	args := []string{"submit", "--as", as, "--envelope", env, "--db", wr.rc.db, "--anchor", wr.rc.anchor,
		"--key", wr.rc.key, "--lock-timeout", "10s", "--json"}
	if witnessed {
		args = append(args, wr.witnessFlags()...)
	}
	return wr.kvfence(args...)
}

// restore puts the backup's database and anchor back, each replaced
// whole and durably: what an operator restoring a snapshot does.
func (wr *witnessedRun) restore(backup string) error {
	for _, f := range []string{wr.rc.db, wr.rc.anchor} {
		tmp := f + ".restoring"
		if err := copyFile(filepath.Join(backup, filepath.Base(f)), tmp); err != nil {
			return err
		}
		if err := os.Rename(tmp, f); err != nil {
			return err
		}
		// What is opened next must be the backup, byte for byte.
		got, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		want, err := os.ReadFile(filepath.Join(backup, filepath.Base(f)))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%w: %s: %s differs from the backup after the restore", ErrPrecondition, wr.rep.Demonstration, f)
		}
	}
	if err := dirsync.Sync(wr.dir); err != nil {
		return err
	}
	wr.record("operator", "restores the database and its anchor together from the backup", "")
	return nil
}

// latestSizes asks every witness for the latest checkpoint it cosigned
// for the receiver, checking its cosignature: an observation of the
// witnesses, not the receiver's own account. A witness that has none is
// at size 0.
func (wr *witnessedRun) latestSizes() (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, w := range wr.witnesses {
		pub, err := keyfile.LoadPublic(w.pub)
		if err != nil {
			return nil, err
		}
		cv, err := checkpoint.NewCosignatureVerifier(w.name, pub, checkpoint.CosignatureVerifierOptions{})
		if err != nil {
			return nil, err
		}
		c, err := witness.NewClient("https://"+w.listen, witness.ClientOptions{HTTPClient: wr.httpc, Verifier: cv})
		if err != nil {
			return nil, err
		}
		signed, err := c.Latest(wr.ctx, wr.origin)
		if errors.Is(err, witness.ErrNoCheckpoint) {
			out[w.name] = 0
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("lab: %s: asking %s for its latest checkpoint: %w", wr.rep.Demonstration, w.name, err)
		}
		body, _, _ := strings.Cut(string(signed), "\n\n")
		cp, err := checkpoint.Parse([]byte(body + "\n"))
		if err != nil {
			return nil, fmt.Errorf("lab: %s: %s's latest checkpoint: %w", wr.rep.Demonstration, w.name, err)
		}
		out[w.name] = cp.Size
	}
	return out, nil
}

func maxSize(m map[string]uint64) uint64 {
	var top uint64
	for _, s := range m {
		top = max(top, s)
	}
	return top
}

func countAtLeast(m map[string]uint64, size uint64) int {
	n := 0
	for _, s := range m {
		if s >= size {
			n++
		}
	}
	return n
}

// start starts kvfence witness serve for w on a port the system picks and
// returns once it printed where it listens.
func (wr *witnessedRun) start(w *witnessProc) error {
	wr.starts++
	var err error
	if w.log, err = os.OpenFile(filepath.Join(wr.dir, fmt.Sprintf("%s-%d.log", w.name, wr.starts)),
		os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	args := []string{"witness", "serve", "--db", w.db, "--key", w.key, "--listen", "127.0.0.1:0",
		"--tls-cert", filepath.Join(wr.dir, "server.crt"), "--tls-key", filepath.Join(wr.dir, "server.key"), "--json"}
	w.cmd = exec.CommandContext(wr.ctx, wr.l.opts.Executable, args...)
	w.cmd.Env = append(os.Environ(), wr.l.opts.Env...)
	w.cmd.Stderr = w.log
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		w.log.Close()
		return fmt.Errorf("lab: %w", err)
	}
	if err := w.cmd.Start(); err != nil {
		w.log.Close()
		return fmt.Errorf("lab: starting kvfence witness serve %s: %w", w.name, err)
	}
	var ready struct {
		ID     string `json:"id"`
		Listen string `json:"listen"`
	}
	decoded := make(chan error, 1)
	go func() { decoded <- json.NewDecoder(out).Decode(&ready) }()
	select {
	case err = <-decoded:
	case <-time.After(30 * time.Second):
		err = errors.New("no answer within 30s")
	}
	if err == nil && (ready.ID != w.name || ready.Listen == "") {
		err = fmt.Errorf("it printed %+v", ready)
	}
	if err != nil {
		w.cmd.Process.Kill()
		w.cmd.Wait()
		w.log.Close()
		return fmt.Errorf("lab: kvfence witness serve %s did not get ready: %w: %s", w.name, err, logText(w.log))
	}
	w.listen, w.view.Listen = ready.Listen, ready.Listen
	w.exited = make(chan error, 1)
	go func() { w.exited <- w.cmd.Wait() }()
	return nil
}

// stop sends SIGTERM to w and returns its exit code.
func (wr *witnessedRun) stop(w *witnessProc) (int, error) {
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return -1, fmt.Errorf("lab: signalling kvfence witness serve %s: %w", w.name, err)
	}
	select {
	case err := <-w.exited:
		w.exited = nil
		w.log.Close()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			return -1, fmt.Errorf("lab: kvfence witness serve %s: %w", w.name, err)
		}
		w.view.ExitCodes = append(w.view.ExitCodes, code)
		return code, nil
	case <-time.After(servedStopTimeout):
		return -1, fmt.Errorf("lab: kvfence witness serve %s did not stop within %s of SIGTERM: %s", w.name, servedStopTimeout, logText(w.log))
	}
}

// killAll ends every witness still running, on a failed demonstration.
func (wr *witnessedRun) killAll() {
	for _, w := range wr.witnesses {
		if w.exited == nil || w.cmd.Process == nil {
			continue
		}
		w.cmd.Process.Kill()
		select {
		case <-w.exited:
		case <-time.After(5 * time.Second):
		}
		w.exited = nil
		w.log.Close()
	}
}

func logText(f *os.File) string {
	if f == nil {
		return ""
	}
	b, _ := os.ReadFile(f.Name())
	return string(b)
}
