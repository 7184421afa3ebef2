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
	"github.com/kvfence/kvfence/ledger"
)

// WorkerCommand is the hidden subcommand under which the lab re-executes its
// own binary as a worker process.
const WorkerCommand = "lab-worker"

// DefaultWorkerTimeout bounds a worker process's whole life, from its start
// to its last result, unless Options.WorkerTimeout says otherwise: a
// demonstration's pause takes seconds, so a worker still running after it
// is stuck, and the lab reports it instead of waiting for it.
const DefaultWorkerTimeout = 2 * time.Minute

// timeoutFlag is the worker commands' flag for their own bound.
const timeoutFlag = "timeout"

// readLine reads one line from in, or returns ctx's error when ctx ends
// first: a parent that never writes cannot keep the worker past its bound.
// The reading goroutine ends when in is closed, as the process exits.
func readLine(ctx context.Context, in *bufio.Reader) (string, error) {
	type line struct {
		s   string
		err error
	}
	ch := make(chan line, 1)
	go func() {
		s, err := in.ReadString('\n')
		ch <- line{s, err}
	}()
	select {
	case l := <-ch:
		return l.s, l.err
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
}

// errWorkerTimeout is the cause of a worker's own deadline.
var errWorkerTimeout = errors.New("the worker ran past its time bound (--timeout)")

// withBound returns ctx bounded by d, whose cause says so.
func withBound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		d = DefaultWorkerTimeout
	}
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("%w of %v", errWorkerTimeout, d))
}

// markerFile marks a directory as a lab's output. A lab worker refuses a
// database outside such a directory, so that even the lab build's defective
// modes cannot be pointed at a receiver in service.
const markerFile = "KVFENCE-LAB"

// BuildTag is the build tag of the lab build. Only a binary built with it
// (go build -tags kvfencelab) contains the defective receiver and ledger
// openers that the lab's demonstrations 2, 3a and 4 need; in every other
// build they do not exist.
const BuildTag = "kvfencelab"

// ErrNotLabBuild means the lab, or a lab worker's defective mode, was asked
// of a binary built without BuildTag.
var ErrNotLabBuild = errors.New("lab: this binary was built without the kvfencelab tag; " +
	"run the lab with go run -tags kvfencelab ./cmd/kvfence lab --output DIR")

// Available reports whether this binary is the lab build, the only one whose
// workers can open the defective receivers and ledgers the lab demonstrates.
func Available() bool { return defect.Open != nil && defect.OpenLedger != nil }

// workerResult is what a worker process prints as its last line.
type workerResult struct {
	// Outcome is the receiver's decision (applied, already_applied,
	// denied), or what kept the worker from one (not_submitted,
	// refused_at_open, forbidden, call_failed).
	Outcome string `json:"outcome"`
	// Reason is a denial's stable reason.
	Reason string `json:"reason,omitempty"`
	// Detail is the decision's or the refusal's detail.
	Detail string `json:"detail,omitempty"`
	// Revision is the target's revision after an applied request.
	Revision uint64 `json:"revision,omitempty"`
	// AuditSeq is the decision's entry in the receiver's audit chain.
	AuditSeq uint64 `json:"audit_seq"`
	// ReadyAt is when the worker held its envelope.
	ReadyAt time.Time `json:"ready_at"`
	// SubmittedAt is when it sent the envelope, after the parent released it.
	SubmittedAt time.Time `json:"submitted_at"`
	// DecidedAt is when the answer came back.
	DecidedAt time.Time `json:"decided_at"`
	// Ledger is the worker's claim in the execution ledger, when it was
	// told to claim before submitting.
	Ledger *ledgerResult `json:"ledger,omitempty"`
	// HTTPStatus is a served receiver's HTTP status, when it refused the
	// call instead of deciding it.
	HTTPStatus int `json:"http_status,omitempty"`
	// ErrorCode is that refusal's error code.
	ErrorCode string `json:"error_code,omitempty"`
	// Dispatch is the state of a remote target's write as the answer
	// left it (applied, conflict, unknown, …).
	Dispatch string `json:"dispatch,omitempty"`
	// Version is the remote object's version the write left.
	Version string `json:"version,omitempty"`
}

// ledgerResult is a worker's attempt to claim its action in the ledger.
type ledgerResult struct {
	// Outcome is "claimed", "claim_refused" (the ledger's rules said no)
	// or refused_at_open (the ledger failed its anchor check).
	Outcome string `json:"outcome"`
	// Claim is the ref of the claim the ledger gave.
	Claim string `json:"claim,omitempty"`
	// Generation is that claim's generation.
	Generation uint64 `json:"generation,omitempty"`
	// Detail is the ledger's refusal, in its own words.
	Detail string `json:"detail,omitempty"`
	// AuditSeq is the claim's entry in the ledger's audit chain.
	AuditSeq uint64 `json:"audit_seq,omitempty"`
}

// Ledger outcomes of a worker.
const (
	ledgerClaimed      = "claimed"
	ledgerClaimRefused = "claim_refused"
)

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
	var la ledgerArgs
	fs.StringVar(&la.db, "ledger", "", "claim --action in this ledger file before submitting")
	fs.StringVar(&la.anchor, "ledger-anchor", "", "the ledger's anchor file")
	fs.StringVar(&la.key, "ledger-key", "", "the ledger's signing key")
	fs.StringVar(&la.action, "action", "", "the action to claim")
	fs.BoolVar(&la.claimOnly, "claim-only", false, "claim, then stop without submitting")
	fs.BoolVar(&la.skipAnchor, "skip-ledger-anchor", false, "open the ledger without its anchor check (lab demonstration only)")
	timeout := fs.Duration(timeoutFlag, DefaultWorkerTimeout, "the worker's whole life, after which it gives up")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := withBound(ctx, *timeout)
	defer cancel()
	if err := runWorker(ctx, workerArgs{*db, *anchor, *key, *envPath, *as, *defective, *skipAnchor, la}, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "lab worker: %v\n", err)
		return 1
	}
	return 0
}

type workerArgs struct {
	db, anchor, key, envelope, as string
	defective, skipAnchor         bool
	ledger                        ledgerArgs
}

// ledgerArgs tell a worker to claim its action in the ledger first.
type ledgerArgs struct {
	db, anchor, key, action string
	claimOnly, skipAnchor   bool
}

func runWorker(ctx context.Context, a workerArgs, stdin io.Reader, stdout io.Writer) error {
	// Refused before anything is read or opened: in a binary without the
	// lab build's openers, a defective mode must not fall back to a normal
	// one, nor get as far as the database.
	if (a.defective || a.skipAnchor) && defect.Open == nil {
		return fmt.Errorf("--defective and --skip-anchor: %w", ErrNotLabBuild)
	}
	if a.ledger.skipAnchor && defect.OpenLedger == nil {
		return fmt.Errorf("--skip-ledger-anchor: %w", ErrNotLabBuild)
	}
	if a.db == "" || a.anchor == "" || a.key == "" || a.envelope == "" || a.as == "" {
		return errors.New("--db, --anchor, --key, --envelope and --as are required")
	}
	// The worker opens the resolved path, the one that was checked, so
	// that a link swapped after the check changes nothing.
	var err error
	if a.db, err = inLabDir(a.db); err != nil {
		return err
	}
	if a.ledger.db != "" {
		if a.ledger.db, err = inLabDir(a.ledger.db); err != nil {
			return err
		}
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
	// The pause: everything the worker needs is already in memory. It
	// ends with the parent's line, or with the worker's own bound.
	if _, err := readLine(ctx, bufio.NewReader(stdin)); err != nil {
		return fmt.Errorf("waiting for release: %w", err)
	}
	if a.ledger.db != "" {
		lr, err := claimInLedger(ctx, a.ledger, a.as)
		if err != nil {
			return err
		}
		res.Ledger = lr
		if lr.Outcome != ledgerClaimed || a.ledger.claimOnly {
			res.SubmittedAt, res.DecidedAt = time.Now().UTC(), time.Now().UTC()
			res.Outcome = "not_submitted"
			return printResult(stdout, res)
		}
		// The worker names its ledger claim in its envelope; the claim
		// gives it no authority at the receiver.
		e, err := kvfence.DecodeEnvelope(env, 0)
		if err != nil {
			return err
		}
		e.Claim = lr.Claim
		if env, err = kvfence.EncodeEnvelope(e); err != nil {
			return err
		}
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

// claimInLedger claims a.action for worker in the ledger. A refusal by the
// ledger's rules or its anchor check is a result, not an error.
func claimInLedger(ctx context.Context, a ledgerArgs, worker string) (*ledgerResult, error) {
	priv, err := keyfile.LoadPrivate(a.key)
	if err != nil {
		return nil, err
	}
	opts := &ledger.Options{LockTimeout: 10 * time.Second, Key: priv, Anchor: audit.FileAnchor{Path: a.anchor}}
	var l *ledger.Ledger
	if a.skipAnchor {
		var x any
		x, err = defect.OpenLedger(a.db, opts, defect.Variant{SkipAnchor: true})
		if err == nil {
			l = x.(*ledger.Ledger)
		}
	} else {
		l, err = ledger.Open(a.db, opts)
	}
	if kvfence.IsIntegrityError(err) {
		return &ledgerResult{Outcome: OutcomeRefusedAtOpen, Detail: err.Error()}, nil
	}
	if err != nil {
		return nil, err
	}
	defer l.Close()
	c, err := l.Claim(ctx, ledger.ClaimRequest{Action: a.action, Worker: worker})
	if ledger.IsRefusal(err) {
		return &ledgerResult{Outcome: ledgerClaimRefused, Detail: err.Error()}, nil
	}
	if err != nil {
		return nil, err
	}
	return &ledgerResult{Outcome: ledgerClaimed, Claim: c.Ref, Generation: c.Generation, AuditSeq: c.AuditSeq}, nil
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

// inLabDir returns db with every symbolic link resolved, or an error if the
// resolved file's directory, or that directory's parent, does not carry the
// lab marker. Resolving first matters: a lab directory holding the marker
// and a link to a database elsewhere must not pass. A database file with
// more than one hard link is refused for the same reason; the lab never
// makes one.
func inLabDir(db string) (string, error) {
	notLab := fmt.Errorf("%s is not inside a lab output directory; the lab worker runs only there", db)
	resolved, err := filepath.EvalSymlinks(db)
	if err != nil {
		return "", fmt.Errorf("%w: %w", notLab, err)
	}
	if resolved, err = filepath.Abs(resolved); err != nil {
		return "", fmt.Errorf("%w: %w", notLab, err)
	}
	fi, err := os.Lstat(resolved)
	if err != nil {
		return "", fmt.Errorf("%w: %w", notLab, err)
	}
	if !fi.Mode().IsRegular() || linkCount(fi) > 1 {
		return "", fmt.Errorf("%w: %s is not a regular file with a single link", notLab, resolved)
	}
	dir := filepath.Dir(resolved)
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if m, err := os.Lstat(filepath.Join(d, markerFile)); err == nil && m.Mode().IsRegular() {
			return resolved, nil
		}
	}
	return "", notLab
}
