package main

import (
	"context"
	"fmt"

	"github.com/kvfence/kvfence/lab"
)

// LabCommand runs the fencing lab: its demonstrations in real processes,
// with their evidence written to a new directory.
type LabCommand struct{ m *Main }

// Run runs the command.
func (c *LabCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("lab")
	output := fs.String("output", "", "")
	asJSON := fs.Bool("json", false, "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	if err := require("lab", [2]string{"output", *output}); err != nil {
		return err
	}
	// Checked before anything is created: the workers this binary would
	// start could not run the lab's defective demonstrations.
	if !lab.Available() {
		return &usageError{msg: "kvfence lab: this kvfence binary was built without the lab; " +
			"its defective receivers exist only in a binary built with -tags " + lab.BuildTag,
			hint: "go run -tags " + lab.BuildTag + " ./cmd/kvfence lab --output DIR"}
	}
	sum, err := lab.Run(ctx, lab.Options{Output: *output, Progress: c.m.Stderr})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(c.m.Stdout, sum)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "stale_worker_accepted\t%v\n", sum.StaleWorkerAccepted)
	fmt.Fprintf(tw, "mutations_before_current_worker\t%d\n", sum.MutationsBeforeCurrentWorker)
	fmt.Fprintf(tw, "current_worker_accepted\t%v\n", sum.CurrentWorkerAccepted)
	fmt.Fprintf(tw, "defective_receiver_accepted_stale_worker\t%v\n", sum.DefectiveReceiverAcceptedStaleWorker)
	fmt.Fprintf(tw, "defective_receiver_caught_by_verify_chain\t%v\n", sum.DefectiveReceiverCaughtByVerifyChain)
	fmt.Fprintf(tw, "restored_ledger_accepted_claim\t%v\n", sum.RestoredLedgerAcceptedClaim)
	fmt.Fprintf(tw, "held_receiver_accepted_restored_work\t%v\n", sum.HeldReceiverAcceptedRestoredWork)
	fmt.Fprintf(tw, "restored_receiver_copy_accepted_old_grant\t%v\n", sum.RestoredReceiverCopyAcceptedOldGrant)
	fmt.Fprintf(tw, "restored_receiver_rollback_detected\t%v\n", sum.RestoredReceiverRollbackDetected)
	fmt.Fprintf(tw, "restored_ledger_rollback_detected\t%v\n", sum.RestoredLedgerRollbackDetected)
	fmt.Fprintf(tw, "served_wrong_identity_denied\t%v\n", sum.ServedWrongIdentityDenied)
	fmt.Fprintf(tw, "served_worker_hold_forbidden\t%v\n", sum.ServedWorkerHoldForbidden)
	fmt.Fprintf(tw, "served_hold_while_serving_denied_stale_worker\t%v\n", sum.ServedHoldWhileServingDeniedStaleWorker)
	fmt.Fprintf(tw, "served_current_worker_accepted\t%v\n", sum.ServedCurrentWorkerAccepted)
	fmt.Fprintf(tw, "production_authorization\t%s\n", sum.ProductionAuthorization)
	fmt.Fprintf(tw, "evidence\t%s (summary.json, report.md)\n", *output)
	return tw.Flush()
}

// Usage prints the command's help.
func (c *LabCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence lab --output DIR [--json]

Runs the receiver-fencing lab in real processes (this binary, re-executed
as paused workers and, for the served receiver, as kvfence serve with
workers that hold only their own test certificates) on the backup-policy
fixture, and writes the evidence to DIR: summary.json, report.md, source
and environment manifests, and per demonstration a report, the receiver
database, receipts and events. The served receiver's admin socket is made
in DIR, or in a private temporary directory when DIR's path is too long
for a unix socket's address.

The lab runs only in a binary built with the kvfencelab tag, the only one
that contains the defective receivers it demonstrates; other builds refuse
(exit 2) before creating anything:

	go run -tags kvfencelab ./cmd/kvfence lab --output DIR

DIR must not exist and its parent must. An interrupted run's output is kept.
The fixture is read from the source tree (testdata/backup-policy) and
checked against its SHA256SUMS manifest.
`)
}

// labWorkerCommand is the lab's own worker process; it is not listed in
// help, refuses to run outside a lab output directory, and refuses its
// defective modes in a binary built without the lab tag.
type labWorkerCommand struct{ m *Main }

func (c *labWorkerCommand) Run(ctx context.Context, args []string) error {
	if code := lab.WorkerMain(ctx, args, c.m.Stdin, c.m.Stdout, c.m.Stderr); code != 0 {
		return fmt.Errorf("lab worker exited with status %d", code)
	}
	return nil
}

func (c *labWorkerCommand) Usage() {}

// labServedWorkerCommand is the lab's worker of a served receiver: a client
// holding one certificate, with no mode a deployed client lacks. It is not
// listed in help.
type labServedWorkerCommand struct{ m *Main }

func (c *labServedWorkerCommand) Run(ctx context.Context, args []string) error {
	if code := lab.ServedWorkerMain(ctx, args, c.m.Stdin, c.m.Stdout, c.m.Stderr); code != 0 {
		return fmt.Errorf("lab served worker exited with status %d", code)
	}
	return nil
}

func (c *labServedWorkerCommand) Usage() {}
