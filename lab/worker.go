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

	"github.com/kvfence/kvfence/internal/defect"
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
	as := fs.String("as", "", "the worker's authenticated identity")
	defective := fs.Bool("defective", false, "skip checks 2-4 (lab demonstration only)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := runWorker(ctx, *db, *envPath, *as, *defective, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "lab worker: %v\n", err)
		return 1
	}
	return 0
}

func runWorker(ctx context.Context, db, envPath, as string, defective bool, stdin io.Reader, stdout io.Writer) error {
	if db == "" || envPath == "" || as == "" {
		return errors.New("--db, --envelope and --as are required")
	}
	if err := inLabDir(db); err != nil {
		return err
	}
	env, err := os.ReadFile(envPath)
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
	opts := &kvfence.Options{LockTimeout: 10 * time.Second}
	if defective {
		opened, err = defect.Open(db, opts, defect.Variant{SkipAuthority: true})
	} else {
		opened, err = kvfence.Open(db, opts)
	}
	if err != nil {
		return err
	}
	r := opened.(*kvfence.Receiver)
	defer r.Close()
	res.SubmittedAt = time.Now().UTC()
	out, err := r.Submit(ctx, as, env)
	if err != nil {
		return err
	}
	res.DecidedAt = time.Now().UTC()
	res.Outcome, res.Reason, res.Detail = string(out.Outcome), string(out.Reason), out.Detail
	res.Revision, res.AuditSeq = out.Revision, out.AuditSeq
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
