package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/kvfence/kvfence/internal/api"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
)

// ObserveCommand prints a target, a receipt or the audit events. It opens
// the database read-only. Nothing it prints authorises anything: a receipt
// is evidence, not permission.
type ObserveCommand struct{ m *Main }

// observeTargetJSON is the --json shape of observe target (docs/design.md §9).
// Value is the value as text when it is valid UTF-8 and null otherwise;
// value_b64 is always the value in standard base64.
type observeTargetJSON struct {
	Target   string  `json:"target"`
	Scope    string  `json:"scope"`
	Revision uint64  `json:"revision"`
	Value    *string `json:"value"`
	ValueB64 string  `json:"value_b64"`
}

// observeReceiptJSON is the --json shape of observe receipt.
type observeReceiptJSON = api.Receipt

// eventJSON is one audit entry in the --json output of observe events,
// which is {"events":[...]} in chain order. seq, hash, prev (lowercase hex),
// at and kind are always present; the other keys only when the entry has
// them (non-empty, non-zero), as in the entry's own canonical encoding.
type eventJSON = audit.EntryJSON

// Run runs the command.
func (c *ObserveCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && isHelpFlag(args[0]) {
			c.Usage()
			return flag.ErrHelp
		}
		return &usageError{msg: "kvfence observe: missing subcommand (target, receipt, grant or events)", hint: "kvfence observe -h"}
	}
	switch args[0] {
	case "target":
		return c.target(ctx, args[1:])
	case "receipt":
		return c.receipt(ctx, args[1:])
	case "events":
		return c.events(ctx, args[1:])
	case "grant":
		return c.grant(ctx, args[1:])
	}
	return &usageError{msg: fmt.Sprintf("kvfence observe %s: unknown subcommand", args[0]), hint: "kvfence observe -h"}
}

func (c *ObserveCommand) target(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("observe target")
	cf := commonFlags{name: "observe target"}
	cf.register(fs, withDB)
	var rf remoteFlags
	rf.register(fs)
	// The target's name is positional and flags may follow it.
	var names []string
	for {
		if err := parseFlags(fs, c.Usage, args, 1<<30); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			names = append(names, rest...)
			break
		}
		names, args = append(names, rest[0]), rest[1:]
	}
	if len(names) != 1 {
		return &usageError{msg: "kvfence observe target: exactly one target name is required", hint: "kvfence observe -h"}
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "observe target"); err != nil {
		return err
	}
	t, err := either(&cf, &rf, false, c.m.warn,
		func(r *kvfence.Receiver) (kvfence.Target, error) { return r.Target(names[0]) },
		func(cl *client.Client) (kvfence.Target, error) { return cl.Target(ctx, names[0]) })
	if err != nil {
		return err
	}
	out := observeTargetJSON{Target: t.Name, Scope: t.Scope, Revision: t.Revision,
		ValueB64: base64.StdEncoding.EncodeToString(t.Value)}
	if utf8.Valid(t.Value) {
		s := string(t.Value)
		out.Value = &s
	}
	if cf.json {
		return writeJSON(c.m.Stdout, out)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "target\t%s\n", out.Target)
	fmt.Fprintf(tw, "scope\t%s\n", out.Scope)
	fmt.Fprintf(tw, "revision\t%d\n", out.Revision)
	if err := tw.Flush(); err != nil {
		return err
	}
	// The value goes after the table, untouched by tabwriter, as text when
	// it is safe to print and in base64 otherwise.
	if printable(t.Value) {
		_, err = fmt.Fprintf(c.m.Stdout, "value\n%s\n", t.Value)
	} else {
		_, err = fmt.Fprintf(c.m.Stdout, "value (base64)\n%s\n", out.ValueB64)
	}
	return err
}

func (c *ObserveCommand) receipt(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("observe receipt")
	cf := commonFlags{name: "observe receipt"}
	cf.register(fs, withDB)
	var rf remoteFlags
	rf.register(fs)
	scope := fs.String("scope", "", "")
	action := fs.String("action", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "observe receipt"); err != nil {
		return err
	}
	if err := require("observe receipt", [2]string{"scope", *scope}, [2]string{"action", *action}); err != nil {
		return err
	}
	rc, err := either(&cf, &rf, false, c.m.warn,
		func(r *kvfence.Receiver) (kvfence.Receipt, error) { return r.Receipt(*scope, *action) },
		func(cl *client.Client) (kvfence.Receipt, error) { return cl.Receipt(ctx, *scope, *action) })
	if err != nil {
		return err
	}
	out := api.ReceiptOf(rc)
	if cf.json {
		return writeJSON(c.m.Stdout, out)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "scope\t%s\n", out.Scope)
	fmt.Fprintf(tw, "action\t%s\n", out.Action)
	fmt.Fprintf(tw, "grant\t%s\n", out.Grant)
	fmt.Fprintf(tw, "request sha256\t%s\n", out.RequestSHA256)
	fmt.Fprintf(tw, "target\t%s\n", out.Target)
	fmt.Fprintf(tw, "revision\t%d -> %d\n", out.RevBefore, out.RevAfter)
	fmt.Fprintf(tw, "audit seq\t%d\n", out.AuditSeq)
	fmt.Fprintf(tw, "at\t%s\n", humanTime(rc.At))
	return tw.Flush()
}

func (c *ObserveCommand) events(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("observe events")
	cf := commonFlags{name: "observe events"}
	cf.register(fs, withDB)
	var rf remoteFlags
	rf.register(fs)
	since := fs.Uint64("since", 0, "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "observe events"); err != nil {
		return err
	}
	var p eventPrinter
	if cf.json {
		p = newJSONEvents(c.m.Stdout)
	} else {
		p = newTextEvents(c.m.Stdout)
	}
	var werr error
	each := func(ev kvfence.Event) bool {
		if werr = ctx.Err(); werr != nil {
			return false
		}
		werr = p.event(eventOf(ev))
		return werr == nil
	}
	if _, err := either(&cf, &rf, false, c.m.warn,
		func(r *kvfence.Receiver) (struct{}, error) { return struct{}{}, r.Events(*since, each) },
		func(cl *client.Client) (struct{}, error) { return struct{}{}, cl.Events(ctx, *since, each) }); err != nil {
		return err
	}
	if werr != nil {
		return werr
	}
	return p.close()
}

// eventOf converts an audit entry to its JSON shape.
func eventOf(ev kvfence.Event) eventJSON { return ev.Entry.JSON(ev.Hash) }

// eventPrinter writes events as they are read, so a long chain is never
// held in memory.
type eventPrinter interface {
	event(eventJSON) error
	close() error
}

// jsonEvents writes {"events":[...]} one entry at a time.
type jsonEvents struct {
	w *bufio.Writer
	n int
}

func newJSONEvents(w io.Writer) *jsonEvents { return &jsonEvents{w: bufio.NewWriter(w)} }

func (j *jsonEvents) event(e eventJSON) error {
	b, err := json.MarshalIndent(e, "    ", "  ")
	if err != nil {
		return err
	}
	sep := ",\n    "
	if j.n == 0 {
		sep = "{\n  \"events\": [\n    "
	}
	j.n++
	j.w.WriteString(sep)
	_, err = j.w.Write(b)
	return err
}

func (j *jsonEvents) close() error {
	if j.n == 0 {
		j.w.WriteString("{\n  \"events\": []\n}\n")
	} else {
		j.w.WriteString("\n  ]\n}\n")
	}
	return j.w.Flush()
}

// textEvents writes one aligned line per entry.
type textEvents struct {
	tw interface {
		io.Writer
		Flush() error
	}
}

func newTextEvents(w io.Writer) *textEvents {
	t := &textEvents{tw: newTable(w)}
	fmt.Fprintln(t.tw, "SEQ\tAT\tKIND\tSCOPE\tEPOCH\tDETAIL")
	return t
}

func (t *textEvents) event(e eventJSON) error {
	at := "-"
	if e.At != nil {
		at = *e.At
	}
	epoch := "-"
	if e.Epoch != 0 {
		epoch = fmt.Sprint(e.Epoch)
	}
	var d []string
	add := func(k, v string) {
		if v != "" {
			d = append(d, k+"="+quoteIfNeeded(v))
		}
	}
	addN := func(k string, v uint64) {
		if v != 0 {
			d = append(d, fmt.Sprintf("%s=%d", k, v))
		}
	}
	add("outcome", e.Outcome)
	add("reason", e.Reason)
	add("grant", e.Grant)
	add("executor", e.Executor)
	add("action", e.Action)
	add("target", e.Target)
	addN("rev_before", e.RevBefore)
	addN("rev_after", e.RevAfter)
	add("decision", e.Decision)
	add("actor", e.Actor)
	add("note", e.Note)
	_, err := fmt.Fprintf(t.tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, at, e.Kind, orDash(e.Scope), epoch, strings.Join(d, " "))
	return err
}

func (t *textEvents) close() error { return t.tw.Flush() }

// quoteIfNeeded quotes s when it would not read as one token.
func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"=") || !printable([]byte(s)) {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// Usage prints the command's help.
func (c *ObserveCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage:

	kvfence observe target K [common arguments]
	kvfence observe receipt --scope S --action A [common arguments]
	kvfence observe grant ID [common arguments]
	kvfence observe events [--since SEQ] [common arguments]

Prints state without changing it; the database is opened read-only.

	target    a target's scope, revision and value. With --json, "value"
	          is the value as text when it is valid UTF-8 (else null) and
	          "value_b64" is always the value in base64.
	receipt   the receipt of an applied action: grant, request digest,
	          revisions before and after, audit seq and time.
	grant     a grant by id: scope, epoch, executor, claim, action,
	          request digest, validity window ("expired" once the
	          receiver's clock is past it), decision, its activate entry's
	          audit seq and the recovery that revoked it, if any. A stored
	          grant is evidence; only a scope's active grant authorises.
	events    the audit chain from SEQ on (default: from the start). With
	          --json, {"events":[...]} in chain order; each entry has seq,
	          hash, prev, at and kind, and only the other fields it has.

Arguments:

	--scope S, --action A
	    The receipt's scope and logical action id.
	--since SEQ
	    The first audit seq to print.
`+usageDBRead+usageServer+usageJSON)
}
