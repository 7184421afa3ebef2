package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// WorkerCommand is the hidden subcommand under which the lab re-executes its
// own binary as a worker process.
const WorkerCommand = "lab-worker"

// markerFile marks a directory as a lab's output. A lab worker refuses a
// database outside such a directory, so its defective mode can never be
// pointed at a receiver in service.
const markerFile = "KVFENCE-LAB"

// workerResult is what a worker process prints as its last line.
type workerResult struct {
	Outcome  string `json:"outcome"`
	Reason   string `json:"reason,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Revision uint64 `json:"revision,omitempty"`
	AuditSeq uint64 `json:"audit_seq"`
	// ReadyAt is when the worker held its envelope; SubmittedAt when it
	// sent it, after the parent released it.
	ReadyAt     time.Time `json:"ready_at"`
	SubmittedAt time.Time `json:"submitted_at"`
	DecidedAt   time.Time `json:"decided_at"`
}

// WorkerMain is a worker process: it reads its envelope, says "ready", waits
// until the parent writes a line on stdin (the pause), then opens the
// receiver and submits. It prints one JSON result line and returns an exit
// code. It is the lab's own machinery, not an administrative command.
func WorkerMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(WorkerCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", "receiver database inside a lab output directory")
	envPath := fs.String("envelope", "", "envelope file")
	anchor := fs.String("anchor", "", "the receiver's anchor file")
	key := fs.String("key", "", "the receiver's signing key")
	as := fs.String("as", "", "the worker's authenticated identity")
	defective := fs.Bool("defective", false, "skip checks 2-4 (lab demonstration only)")
	skipAnchor := fs.Bool("skip-anchor", false, "open without the anchor check (lab demonstration only)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := runWorker(ctx, workerArgs{*db, *anchor, *key, *envPath, *as, *defective, *skipAnchor}, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "lab worker: %v\n", err)
		return 1
	}
	return 0
}

type workerArgs struct {
	db, anchor, key, envelope, as string
	defective, skipAnchor         bool
}

func runWorker(ctx context.Context, a workerArgs, stdin io.Reader, stdout io.Writer) error {
	if a.db == "" || a.anchor == "" || a.key == "" || a.envelope == "" || a.as == "" {
		return errors.New("--db, --anchor, --key, --envelope and --as are required")
	}
	if err := inLabDir(a.db); err != nil {
		return err
	}
	env, err := os.ReadFile(a.envelope)
	if err != nil {
		return err
	}
	priv, err := keyfile.LoadPrivate(a.key)
	if err != nil {
		return err
	}
	res := workerResult{ReadyAt: time.Now().UTC()}
	if _, err := fmt.Fprintln(stdout, "ready"); err != nil {
		return err
	}
	// The pause: everything the worker needs is already in memory.
	if _, err := bufio.NewReader(stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for release: %w", err)
	}
	var opened any
	opts := &kvfence.Options{LockTimeout: 10 * time.Second, Key: priv, Anchor: audit.FileAnchor{Path: a.anchor}}
	if a.defective || a.skipAnchor {
		opened, err = defect.Open(a.db, opts, defect.Variant{SkipAuthority: a.defective, SkipAnchor: a.skipAnchor})
	} else {
		opened, err = kvfence.Open(a.db, opts)
	}
	if kvfence.IsIntegrityError(err) {
		// A receiver that refuses to open accepts nothing: that is a
		// decision the lab reports, not a failure of the worker.
		res.SubmittedAt, res.DecidedAt = time.Now().UTC(), time.Now().UTC()
		res.Outcome, res.Detail = OutcomeRefusedAtOpen, err.Error()
		return printResult(stdout, res)
	}
	if err != nil {
		return err
	}
	r := opened.(*kvfence.Receiver)
	defer r.Close()
	res.SubmittedAt = time.Now().UTC()
	out, err := r.Submit(ctx, a.as, env)
	if err != nil {
		return err
	}
	res.DecidedAt = time.Now().UTC()
	res.Outcome, res.Reason, res.Detail = string(out.Outcome), string(out.Reason), out.Detail
	res.Revision, res.AuditSeq = out.Revision, out.AuditSeq
	return printResult(stdout, res)
}

// OutcomeRefusedAtOpen is a lab worker's outcome when the receiver refused
// to open (an integrity error such as a detected rollback).
const OutcomeRefusedAtOpen = "refused_at_open"

func printResult(stdout io.Writer, res workerResult) error {
	line, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", line)
	return err
}

// inLabDir refuses a database whose directory, or that directory's parent,
// does not carry the lab marker.
func inLabDir(db string) error {
	abs, err := filepath.Abs(db)
	if err != nil {
		return err
	}
	dir := filepath.Dir(abs)
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if _, err := os.Stat(filepath.Join(d, markerFile)); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%s is not inside a lab output directory; the lab worker runs only there", db)
}
