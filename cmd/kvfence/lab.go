package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

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
	kubeFlag := fs.String("kube", string(lab.KubeAuto), "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	kube, err := lab.ParseKubeMode(*kubeFlag)
	if err != nil {
		return &usageError{msg: "kvfence " + err.Error(), hint: "kvfence lab -h"}
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
	sum, err := lab.Run(ctx, lab.Options{Output: *output, Progress: c.m.Stderr, Kube: kube})
	if err != nil {
		return err
	}
	if *asJSON {
		if err := writeJSON(c.m.Stdout, sum); err != nil {
			return err
		}
		return labVerdict(sum, *output)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "CHECK\tOBSERVED\tEXPECTED\tKIND\n")
	for _, k := range lab.Keys() {
		ch := sum.Checks[k]
		mark, observed := "", any(ch.Observed)
		switch {
		case ch.NotRun != "":
			mark, observed = "  <- not run", "-"
		case !ch.AsExpected:
			mark = "  <- NOT AS EXPECTED"
		}
		fmt.Fprintf(tw, "%s\t%v\t%v\t%s%s\n", k, observed, ch.Expected, ch.Kind, mark)
	}
	fmt.Fprintf(tw, "verdict\t%s\t%s\n", sum.Verdict, sum.VerdictDetail)
	fmt.Fprintf(tw, "evidence\t%s (summary.json, report.md)\n", *output)
	if err := tw.Flush(); err != nil {
		return err
	}
	return labVerdict(sum, *output)
}

// labVerdict fails the command when an observation is not the expected
// one, so that a script that reads only the exit code notices; the
// evidence is written either way.
func labVerdict(sum *lab.Summary, output string) error {
	if bad := sum.Unexpected(); len(bad) > 0 {
		return withHint(fmt.Errorf("kvfence lab: %d checks not as expected: %s", len(bad), strings.Join(bad, ", ")),
			"read "+filepath.Join(output, "report.md")+" for the demonstrations they name")
	}
	return nil
}

// Usage prints the command's help.
func (c *LabCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence lab --output DIR [--kube auto|on|off] [--json]

Runs the receiver-fencing lab in real processes (this binary, re-executed
as paused workers and, for the served receiver, as kvfence serve with
workers that hold only their own test certificates, and as the operator's
ledger and contain commands for a workflow contained across two served
receivers) on the backup-policy fixture, and writes the evidence to DIR: summary.json, report.md, source
and environment manifests, and per demonstration a report, the receiver
database, receipts and events. summary.json keeps one flat key per
observation and, under "checks", each with its expected value, whether it
is as expected, its kind (success, a counterexample kept on purpose, or a
stated limit) and its meaning; "verdict" is as_expected or
not_as_expected. The command exits 1 when any check is not as expected. The served receiver's admin socket is made
in DIR, or in a private temporary directory when DIR's path is too long
for a unix socket's address.

The lab runs only in a binary built with the kvfencelab tag, the only one
that contains the defective receivers it demonstrates; other builds refuse
(exit 2) before creating anything:

	go run -tags kvfencelab ./cmd/kvfence lab --output DIR

Demonstration 8 fences a ConfigMap on a real kube-apiserver (with its own
etcd), changed by kvfence serve with the receiver's own identity. --kube
auto (the default) runs it when a kube-apiserver is at hand without a
build ($KVFENCE_KUBE_APISERVER_BIN, or one built earlier into the user's
cache) and otherwise reports its four checks as not run, saying why; --kube
on builds kube-apiserver first if needed (minutes and over 2 GB of memory,
once, with the go command and the module proxy, in the source tree);
--kube off skips it. Checks not run count neither way in the verdict.

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
