package lab

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/fixture"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// preHoldCopy is the copy of demonstration 1's database taken after worker
// A's activation and before the hold.
const preHoldCopy = "receiver-pre-hold.db"

// restoredReport is the report.json of demonstrations 4 and 5.
type restoredReport struct {
	// Demonstration is the demonstration's directory name.
	Demonstration string `json:"demonstration"`
	// AnchorChecked says whether the receiver compared the restored
	// database with its (current, separately kept) anchor.
	AnchorChecked bool `json:"anchor_checked"`
	// Steps are the demonstration's steps, in order.
	Steps []step `json:"steps"`
	// Stale is worker A's old envelope submitted to the restored copy.
	Stale workerResult `json:"stale_worker"`
	// TargetBefore is the restored copy's target before A submitted.
	TargetBefore targetView `json:"target_before"`
	// TargetAfter is the target after.
	TargetAfter targetView `json:"target_after"`
	// VerifyChain is verify-chain's problem code for the restored database
	// against the current anchor.
	VerifyChain string `json:"verify_chain"`
	// VerifyDetail is its evidence.
	VerifyDetail string `json:"verify_detail,omitempty"`
}

// restoredReceiver runs demonstrations 4 and 5: the pre-hold copy of
// demonstration 1's receiver database is restored (into its own directory,
// with the receiver's current anchor and key) and worker A, still holding
// its old envelope, submits it. Without the anchor check the copy accepts
// it; with the check the receiver refuses to open.
func (l *lab) restoredReceiver(ctx context.Context, src, name string, anchored bool) (*restoredReport, error) {
	dir := filepath.Join(l.opts.Output, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	l.logf("%s: start", name)
	rep := &restoredReport{Demonstration: name, AnchorChecked: anchored}
	record := func(actor, action, result string) {
		rep.Steps = append(rep.Steps, step{At: time.Now().UTC(), Actor: actor, Action: action, Result: result})
	}
	rc := &receiverFiles{db: filepath.Join(dir, "receiver.db"), anchor: filepath.Join(dir, "receiver.anchor"),
		key: filepath.Join(dir, "receiver.key")}
	for from, to := range map[string]string{
		filepath.Join(src, preHoldCopy):       rc.db,
		filepath.Join(src, "receiver.anchor"): rc.anchor,
		filepath.Join(src, "receiver.key"):    rc.key,
		filepath.Join(src, "envelope-a.cbor"): filepath.Join(dir, "envelope-a.cbor"),
	} {
		if err := copyFile(from, to); err != nil {
			return nil, err
		}
	}
	record("operator", "restores the pre-hold database over the current one; the anchor stays current", "")
	priv, err := keyfile.LoadPrivate(rc.key)
	if err != nil {
		return nil, err
	}
	pub := priv.Public().(ed25519.PublicKey)
	before, err := readTarget(rc.db)
	if err != nil {
		return nil, err
	}
	rep.TargetBefore = before
	if before.Revision != 1 {
		return nil, fmt.Errorf("%w: %s: the restored copy's target is at revision %d, want the pre-hold 1", ErrPrecondition, name, before.Revision)
	}
	pre, err := kvfence.VerifyChain(rc.db, kvfence.VerifyOptions{Anchor: audit.FileAnchor{Path: rc.anchor}, PublicKey: pub})
	if err != nil {
		return nil, err
	}
	if pre.Problem != audit.ProblemRollbackDetected {
		return nil, fmt.Errorf("%w: %s: the restored copy is not behind its anchor (%s)", ErrPrecondition, name, pre.Problem)
	}

	var mode []string
	if !anchored {
		mode = append(mode, "--skip-anchor")
	}
	a, err := l.startWorker(ctx, rc, filepath.Join(dir, "envelope-a.cbor"), workerA, mode...)
	if err != nil {
		return nil, err
	}
	defer a.kill()
	rep.Stale, err = a.release()
	if err != nil {
		return nil, err
	}
	record("worker-a", "submit (old grant) to the restored receiver", decision(rep.Stale))

	if rep.TargetAfter, err = readTarget(rc.db); err != nil {
		return nil, err
	}
	v, err := kvfence.VerifyChain(rc.db, kvfence.VerifyOptions{Anchor: audit.FileAnchor{Path: rc.anchor}, PublicKey: pub})
	if err != nil {
		return nil, err
	}
	rep.VerifyChain, rep.VerifyDetail = string(v.Problem), v.Detail
	record("operator", "verify-chain against the current anchor", rep.VerifyChain)
	if err := writeJSON(filepath.Join(dir, "report.json"), rep); err != nil {
		return nil, err
	}
	l.logf("%s: worker-a %s; verify-chain %s", name, decision(rep.Stale), rep.VerifyChain)
	return rep, nil
}

// readTarget reads the fixture target read-only, without the anchor check:
// observation of a questioned database, never authorisation.
func readTarget(db string) (targetView, error) {
	r, err := kvfence.Open(db, &kvfence.Options{ReadOnly: true, LockTimeout: 10 * time.Second})
	if err != nil {
		return targetView{}, err
	}
	defer r.Close()
	t, err := r.Target(fixture.Target)
	if err != nil {
		return targetView{}, err
	}
	return targetView{t.Revision, string(t.Value)}, nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
