package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
)

// verifyChain checks the ledger's audit chain against its anchor, with the
// receiver's verify-chain report, --json shape and exit codes.
func (c *LedgerCommand) verifyChain(ctx context.Context, args []string) error {
	lf := ledgerFlags{name: "ledger verify-chain"}
	fs := newFlagSet(lf.name)
	lf.register(fs)
	pubPath := fs.String("pub", "", "")
	maxAge := fs.Duration("max-age", 0, "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	lf.resolve(fs, c.m.Getenv)
	if err := lf.require(false); err != nil {
		return err
	}
	if lf.anchor == "" {
		return missingFlag(lf.name, "anchor", envLedgerAnchor)
	}
	if err := require(lf.name, [2]string{"pub", *pubPath}); err != nil {
		return err
	}
	if *maxAge < 0 {
		return &usageError{msg: "kvfence ledger verify-chain: --max-age must not be negative", hint: "kvfence ledger -h"}
	}
	pub, err := keyfile.LoadPublic(*pubPath)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	anchor, err := lf.anchorEtcd.open(lf.name, lf.anchor)
	if err != nil {
		return err
	}
	vopts := ledger.VerifyOptions{Anchor: anchor, PublicKey: pub,
		MaxAge: *maxAge, LockTimeout: lf.lockTimeout}
	vopts.WitnessFaults = lf.witness.faults
	if vopts.Witnesses, vopts.WitnessQuorum, err = lf.witness.load(lf.name); err != nil {
		return err
	}
	var rep audit.Report
	if lf.etcd.on() {
		e, eerr := lf.engine()
		if eerr != nil {
			return eerr
		}
		rep, err = ledger.VerifyChainEngine(e, vopts)
	} else {
		rep, err = ledger.VerifyChain(lf.path, vopts)
	}
	if err != nil {
		return ledgerHint(err, lf)
	}
	out := verifyChainJSON{OK: rep.OK(), Problem: string(rep.Problem), Entries: rep.Entries,
		Head: headHex(rep.Head), HeadSeq: rep.Head.Seq, AnchorSeq: rep.Anchor.Seq, AnchorHead: headHex(rep.Anchor),
		Detail: rep.Detail, AnchorDamage: anchorDamageOf(rep.AnchorDamage)}
	if lf.json {
		err = writeJSON(c.m.Stdout, out)
	} else {
		tw := newTable(c.m.Stdout)
		fmt.Fprintf(tw, "ok\t%v\n", out.OK)
		fmt.Fprintf(tw, "problem\t%s\n", out.Problem)
		fmt.Fprintf(tw, "entries\t%d\n", out.Entries)
		fmt.Fprintf(tw, "head\t%s\n", headText(rep.Head))
		fmt.Fprintf(tw, "anchor\t%s\n", headText(rep.Anchor))
		if *maxAge > 0 {
			fmt.Fprintf(tw, "max age\t%v\n", *maxAge)
		}
		if out.Detail != "" {
			fmt.Fprintf(tw, "detail\t%s\n", out.Detail)
		}
		if d := rep.AnchorDamage; d != nil {
			fmt.Fprintf(tw, "anchor damage\t%v\n", d)
		}
		err = tw.Flush()
	}
	if err != nil {
		return err
	}
	return verifyOutcome("kvfence ledger verify-chain", "ledger", rep, ledgerIntegrityHint)
}

// ledgerIntegrityHint says what a problem of the ledger's chain means. The
// ledger has no recovery admission: its approvals and claims are
// bookkeeping, and the receiver's fence, not the ledger, decides what
// commits.
func ledgerIntegrityHint(err error) string {
	switch {
	case errors.Is(err, audit.ErrRollbackDetected), errors.Is(err, audit.ErrForkDetected):
		return "the ledger file is older than its anchor or disagrees with it: a backup may have been restored " +
			"over it; keep both files as evidence, do not trust its approvals and claims, and find the newest ledger file"
	case errors.Is(err, audit.ErrAnchorMissing):
		return "there is no anchor file at --anchor: check that --anchor (or KVFENCE_LEDGER_ANCHOR) names this " +
			"ledger's anchor, not the receiver's, and restore it from where it is administered"
	case errors.Is(err, audit.ErrBadSignature), errors.Is(err, audit.ErrReceiverMismatch):
		return "check that --anchor and --pub belong to this ledger (the key given to kvfence ledger init, " +
			"not the receiver's); if they do, the anchor was altered or replaced"
	}
	return "the ledger file or its anchor cannot be trusted: keep both as evidence"
}

// events prints the ledger's audit chain.
func (c *LedgerCommand) events(ctx context.Context, args []string) (err error) {
	lf := ledgerFlags{name: "ledger events"}
	fs := newFlagSet(lf.name)
	lf.register(fs)
	since := fs.Uint64("since", 0, "")
	action := fs.String("action", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	lf.resolve(fs, c.m.Getenv)
	if err := lf.require(false); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l, err := lf.open(false)
	if err != nil {
		return ledgerHint(err, lf)
	}
	defer func() {
		if cerr := l.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	var p ledgerEventPrinter
	if lf.json {
		p = newLedgerJSONEvents(c.m.Stdout, l.ID())
	} else {
		p = newLedgerTextEvents(c.m.Stdout)
	}
	var werr error
	if err := l.Events(*since, func(ev ledger.Event) bool {
		if werr = ctx.Err(); werr != nil {
			return false
		}
		if *action != "" && ev.Entry.Action != *action {
			return true
		}
		werr = p.event(ev.Entry.JSON(ev.Hash))
		return werr == nil
	}); err != nil {
		return err
	}
	if werr != nil {
		return werr
	}
	return p.close()
}

// ledgerEventPrinter writes events as they are read, so a long chain is
// never held in memory.
type ledgerEventPrinter interface {
	event(audit.EntryJSON) error
	close() error
}

// ledgerJSONEvents writes {"ledger":ID,"events":[...]} one entry at a time.
type ledgerJSONEvents struct {
	w  *bufio.Writer
	id string
	n  int
}

func newLedgerJSONEvents(w io.Writer, id string) *ledgerJSONEvents {
	return &ledgerJSONEvents{w: bufio.NewWriter(w), id: id}
}

func (j *ledgerJSONEvents) head() string {
	id, _ := json.Marshal(j.id)
	return "{\n  \"ledger\": " + string(id) + ",\n  \"events\": ["
}

func (j *ledgerJSONEvents) event(e audit.EntryJSON) error {
	b, err := json.MarshalIndent(e, "    ", "  ")
	if err != nil {
		return err
	}
	sep := ",\n    "
	if j.n == 0 {
		sep = j.head() + "\n    "
	}
	j.n++
	j.w.WriteString(sep)
	_, err = j.w.Write(b)
	return err
}

func (j *ledgerJSONEvents) close() error {
	if j.n == 0 {
		j.w.WriteString(j.head() + "]\n}\n")
	} else {
		j.w.WriteString("\n  ]\n}\n")
	}
	return j.w.Flush()
}

// ledgerTextEvents writes one aligned line per entry. GENERATION is the
// claim's generation (the entry's epoch) and CLAIM its ref (the entry's
// decision).
type ledgerTextEvents struct {
	tw interface {
		io.Writer
		Flush() error
	}
}

func newLedgerTextEvents(w io.Writer) *ledgerTextEvents {
	t := &ledgerTextEvents{tw: newTable(w)}
	fmt.Fprintln(t.tw, "SEQ\tAT\tKIND\tACTION\tCLAIM\tGENERATION\tDETAIL")
	return t
}

func (t *ledgerTextEvents) event(e audit.EntryJSON) error {
	at := "-"
	if e.At != nil {
		at = *e.At
	}
	gen := "-"
	if e.Epoch != 0 {
		gen = fmt.Sprint(e.Epoch)
	}
	var d []string
	add := func(k, v string) {
		if v != "" {
			d = append(d, k+"="+quoteIfNeeded(v))
		}
	}
	// The approver for an approval, the worker or operator otherwise.
	add("by", e.Executor)
	add("outcome", e.Outcome)
	add("reason", e.Reason)
	add("request_sha256", e.RequestSHA256)
	add("note", e.Note)
	claim := e.Decision
	if e.Kind == ledger.KindApprove {
		// An approval's decision is the approver's reference, not a claim.
		add("decision", e.Decision)
		claim = ""
	}
	_, err := fmt.Fprintf(t.tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, at, e.Kind, quoteIfNeeded(orDash(e.Action)),
		orDash(claim), gen, strings.Join(d, " "))
	return err
}

func (t *ledgerTextEvents) close() error { return t.tw.Flush() }

// isLedgerFile reports whether path opens as an execution ledger. It is
// asked only after a receiver command found the file not to be a receiver
// database, to say what the file is instead.
func isLedgerFile(path string, lockTimeout time.Duration) bool {
	l, err := ledger.Open(path, &ledger.Options{ReadOnly: true, LockTimeout: lockTimeout})
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// isReceiverFile reports whether path opens as a receiver database; the
// ledger commands ask it of a file that is not a ledger.
func isReceiverFile(path string, lockTimeout time.Duration) bool {
	r, err := kvfence.Open(path, &kvfence.Options{ReadOnly: true, LockTimeout: lockTimeout, Warn: func(string) {}})
	if err != nil {
		return false
	}
	r.Close()
	return true
}

// notAReceiver explains a receiver command's kvfence.ErrBadFormat when the
// file is an execution ledger, and names the ledger's own command. Any
// other error is returned as it is.
func notAReceiver(cmd, path string, lockTimeout time.Duration, err error, ledgerCmd string) error {
	if !errors.Is(err, kvfence.ErrBadFormat) || !isLedgerFile(path, lockTimeout) {
		return err
	}
	return withHint(fmt.Errorf("kvfence %s: %s is an execution ledger file, not a receiver database: %w", cmd, path, err),
		ledgerCmd+" --ledger "+path+" --anchor LEDGER_ANCHOR --pub LEDGER_KEY.pub, for the ledger's chain")
}
