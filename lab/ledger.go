package lab

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/fixture"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
)

// ledgerBackup is the copy of the ledger taken after the approval and
// before any claim.
const ledgerBackup = "ledger-before-claim.db"

const workerC = "worker-c"

// ledgerReport is the report.json of demonstration 3.
type ledgerReport struct {
	// Demonstration is the demonstration's directory name.
	Demonstration string `json:"demonstration"`
	// AnchorChecked says whether the ledger was compared with its anchor
	// when worker C opened the restored copy.
	AnchorChecked bool `json:"ledger_anchor_checked"`
	// Steps are the demonstration's steps, in order.
	Steps []step `json:"steps"`
	// FirstClaim is worker A's claim of the action, before it stalled.
	FirstClaim workerResult `json:"worker_a"`
	// HoldRequestedAt is when the operator asked the receiver for the hold.
	HoldRequestedAt time.Time `json:"hold_requested_at"`
	// HoldCommittedAt is when the receiver committed it.
	HoldCommittedAt time.Time `json:"hold_committed_at"`
	// RestoredClaim is worker C's claim in the restored ledger, and its
	// work at the held receiver.
	RestoredClaim workerResult `json:"worker_c"`
	// TargetBefore is the target before worker C ran.
	TargetBefore targetView `json:"target_before"`
	// TargetAfter is the target after.
	TargetAfter targetView `json:"target_after"`
	// LedgerAfter is the action as the ledger file in place at the end
	// holds it (read without the anchor check, as evidence).
	LedgerAfter ledgerActionView `json:"ledger_after"`
	// OutstandingEffects lists effects whose fate nothing here decides:
	// worker A's claim, lost with the restored ledger.
	OutstandingEffects []string `json:"outstanding_effects"`
}

// ledgerActionView is the lab action's claims as a ledger file holds them.
type ledgerActionView struct {
	// Action is the lab's action.
	Action string `json:"action"`
	// Claims are its claims, oldest first.
	Claims []ledgerClaimBrief `json:"claims"`
}

// ledgerClaimBrief is one claim in a ledgerActionView.
type ledgerClaimBrief struct {
	// Claim is the claim's ref.
	Claim string `json:"claim"`
	// Worker is the worker that holds or held it.
	Worker string `json:"worker"`
	// Generation is 1 for the action's first claim, one more per takeover.
	Generation uint64 `json:"generation"`
	// State is the claim's state.
	State string `json:"state"`
}

// ledgerFiles is a lab ledger: its file, anchor and key.
type ledgerFiles struct {
	db, anchor, key string
	priv            ed25519.PrivateKey
}

// restoredLedger runs demonstration 3: worker A claims the approved action
// in the ledger and stalls; the operator holds the receiver; the ledger
// file is then restored from a copy taken before A's claim, and worker C
// claims the same action and submits. Without the ledger's anchor check
// the restored copy hands C a second claim (the counterexample of the
// original lab, the ledger-only experiment, with no receiver fence and no
// anchor, that kvfence grew out of), and the held receiver still refuses
// C's work; with the check the restored ledger refuses to open.
func (l *lab) restoredLedger(ctx context.Context, name string, anchored bool) (*ledgerReport, error) {
	dir := filepath.Join(l.opts.Output, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	l.logf("%s: start", name)
	rep := &ledgerReport{Demonstration: name, AnchorChecked: anchored, OutstandingEffects: []string{}}
	record := func(actor, action, result string) {
		rep.Steps = append(rep.Steps, step{At: time.Now().UTC(), Actor: actor, Action: action, Result: result})
	}
	rc, _, req, grantA, err := setupReceiver(ctx, dir, name)
	if err != nil {
		return nil, err
	}
	record("admin", "activate grant for worker-a at the receiver", grantA.ID)
	if _, err := writeEnvelope(filepath.Join(dir, "envelope-a.cbor"), grantA, "claim-a", req); err != nil {
		return nil, err
	}
	// Worker C, restarted from the restored state, knows only the grant
	// that was current when the ledger copy was taken.
	if _, err := writeEnvelope(filepath.Join(dir, "envelope-c.cbor"), kvfence.Grant{Scope: grantA.Scope, Epoch: grantA.Epoch,
		ID: grantA.ID, Executor: workerC}, "claim-c", req); err != nil {
		return nil, err
	}

	lf, err := newLedgerFiles(dir, "lab-ledger-"+name)
	if err != nil {
		return nil, err
	}
	if err := lf.with(func(lg *ledger.Ledger) error {
		a, err := lg.Approve(ctx, ledger.ApproveRequest{Action: actionID, Request: req,
			Approver: "approver", Decision: "approval-1", TTL: time.Hour})
		if err == nil {
			record("approver", "approve the action in the ledger", fmt.Sprintf("audit seq %d", a.AuditSeq))
		}
		return err
	}); err != nil {
		return nil, err
	}
	if err := copyFile(lf.db, filepath.Join(dir, ledgerBackup)); err != nil {
		return nil, err
	}
	record("operator", "backs up the ledger file", ledgerBackup)

	ledgerFlags := []string{"--ledger", lf.db, "--ledger-anchor", lf.anchor, "--ledger-key", lf.key, "--action", actionID}
	a, err := l.startWorker(ctx, rc, filepath.Join(dir, "envelope-a.cbor"), workerA, append(ledgerFlags, "--claim-only")...)
	if err != nil {
		return nil, err
	}
	defer a.kill()
	if rep.FirstClaim, err = a.release(); err != nil {
		return nil, err
	}
	if rep.FirstClaim.Ledger == nil || rep.FirstClaim.Ledger.Outcome != ledgerClaimed {
		return nil, fmt.Errorf("%w: %s: worker-a's claim was not accepted: %+v", ErrPrecondition, name, rep.FirstClaim.Ledger)
	}
	record("worker-a", "claims the action in the ledger, then stalls", rep.FirstClaim.Ledger.Claim)

	err = rc.with(func(r *kvfence.Receiver) error {
		hold, err := r.Admin().Hold(ctx, kvfence.HoldRequest{Scopes: []string{fixture.Scope}, Reason: "worker-a stalled; its claim is in doubt"})
		if err != nil {
			return err
		}
		rep.HoldRequestedAt, rep.HoldCommittedAt = hold.HoldRequestedAt, hold.HoldCommittedAt
		record("admin", "hold the receiver", fmt.Sprintf("epoch %d -> %d", hold.Scopes[0].PreviousEpoch, hold.Scopes[0].Epoch))
		t, err := r.Target(fixture.Target)
		rep.TargetBefore = targetView{t.Revision, string(t.Value)}
		return err
	})
	if err != nil {
		return nil, err
	}
	if rep.TargetBefore.Revision != 1 {
		return nil, fmt.Errorf("%w: %s: target at revision %d before worker-c, want the original", ErrPrecondition, name, rep.TargetBefore.Revision)
	}

	// The restore: the current ledger file is kept aside as evidence and
	// the pre-claim copy put in its place; the anchor stays current.
	if err := os.Rename(lf.db, filepath.Join(dir, "ledger-replaced.db")); err != nil {
		return nil, err
	}
	if err := copyFile(filepath.Join(dir, ledgerBackup), lf.db); err != nil {
		return nil, err
	}
	if l.hooks.afterLedgerRestore != nil {
		if err := l.hooks.afterLedgerRestore(lf, filepath.Join(dir, "ledger-replaced.db")); err != nil {
			return nil, err
		}
	}
	if v, err := readLedgerAction(lf.db); err != nil || len(v.Claims) != 0 {
		return nil, fmt.Errorf("%w: %s: the restored ledger should hold no claim (%+v, %v)", ErrPrecondition, name, v, err)
	}
	record("operator", "restores the ledger file from the backup; the ledger's anchor stays current", "")

	var mode []string
	if !anchored {
		mode = append(mode, "--skip-ledger-anchor")
	}
	c, err := l.startWorker(ctx, rc, filepath.Join(dir, "envelope-c.cbor"), workerC, append(ledgerFlags, mode...)...)
	if err != nil {
		return nil, err
	}
	defer c.kill()
	if rep.RestoredClaim, err = c.release(); err != nil {
		return nil, err
	}
	lr := rep.RestoredClaim.Ledger
	if lr == nil {
		return nil, fmt.Errorf("%w: %s: worker-c did not try the ledger", ErrPrecondition, name)
	}
	record("worker-c", "claims the same action in the restored ledger", lr.Outcome+" "+lr.Claim)
	if rep.RestoredClaim.Outcome != "not_submitted" {
		record("worker-c", "submits its work to the held receiver", decision(rep.RestoredClaim))
	}

	err = rc.with(func(r *kvfence.Receiver) error {
		t, err := r.Target(fixture.Target)
		if err != nil {
			return err
		}
		rep.TargetAfter = targetView{t.Revision, string(t.Value)}
		return exportState(dir, r)
	})
	if err != nil {
		return nil, err
	}
	if rep.LedgerAfter, err = readLedgerAction(lf.db); err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(dir, "ledger.json"), rep.LedgerAfter); err != nil {
		return nil, err
	}
	rep.OutstandingEffects = append(rep.OutstandingEffects, fmt.Sprintf(
		"worker-a's ledger claim %s: it stalled before submitting; the restored ledger no longer records it, and the held receiver will refuse its old grant",
		rep.FirstClaim.Ledger.Claim))
	if err := writeJSON(filepath.Join(dir, "report.json"), rep); err != nil {
		return nil, err
	}
	l.logf("%s: worker-c's claim %s; its work %s", name, lr.Outcome, decision(rep.RestoredClaim))
	return rep, nil
}

func newLedgerFiles(dir, id string) (*ledgerFiles, error) {
	lf := &ledgerFiles{db: filepath.Join(dir, "ledger.db"), anchor: filepath.Join(dir, "ledger.anchor"), key: filepath.Join(dir, "ledger.key")}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := keyfile.Write(lf.key, priv, id); err != nil {
		return nil, err
	}
	lf.priv = priv
	return lf, ledger.Init(lf.db, &ledger.InitOptions{LedgerID: id, Key: priv, Anchor: audit.FileAnchor{Path: lf.anchor}})
}

func (lf *ledgerFiles) with(fn func(l *ledger.Ledger) error) error {
	l, err := ledger.Open(lf.db, &ledger.Options{LockTimeout: 10 * time.Second, Key: lf.priv, Anchor: audit.FileAnchor{Path: lf.anchor}})
	if err != nil {
		return err
	}
	if err := fn(l); err != nil {
		l.Close()
		return err
	}
	return l.Close()
}

// readLedgerAction reads the lab action's claims read-only, without the
// anchor check: observation of a questioned file, never authorisation.
func readLedgerAction(path string) (ledgerActionView, error) {
	out := ledgerActionView{Action: actionID, Claims: []ledgerClaimBrief{}}
	l, err := ledger.Open(path, &ledger.Options{ReadOnly: true, LockTimeout: 10 * time.Second})
	if err != nil {
		return out, err
	}
	defer l.Close()
	v, err := l.Action(actionID)
	if err != nil {
		return out, err
	}
	for _, c := range v.Claims {
		out.Claims = append(out.Claims, ledgerClaimBrief{c.Ref, c.Worker, c.Generation, string(c.State)})
	}
	return out, nil
}
