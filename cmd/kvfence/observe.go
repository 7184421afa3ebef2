package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/kvfence/kvfence/internal/api"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/receiptproof"
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
	// Kind and Effect are given for a target of another kind than
	// internal (an embedder's func target), so that the output of an
	// internal target is as it was.
	Kind   string `json:"kind,omitempty"`
	Effect string `json:"effect,omitempty"`
	// Key is an etcd target's key; its revision and value are then the
	// key's live mod revision and value, and Writes counts the fence's
	// writes to it (the revisions its receipts name).
	Key    string `json:"key,omitempty"`
	Writes uint64 `json:"writes,omitempty"`
	// Object and UID are a kubernetes target's object and the incarnation
	// it stands for. With --kubeconfig the object is read live: its value
	// is then the object's, ResourceVersion its version, and LastDispatch
	// the kvfence.dev/receipt stamp of the write that changed it last (a
	// warning on stderr says why it could not be read).
	Object          string `json:"object,omitempty"`
	UID             string `json:"uid,omitempty"`
	ResourceVersion string `json:"resource_version,omitempty"`
	LiveUID         string `json:"live_uid,omitempty"`
	LastDispatch    string `json:"last_dispatch,omitempty"`
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
		return &usageError{msg: "kvfence observe: missing subcommand (target, receipt, receipts, grant or events)", hint: "kvfence observe -h"}
	}
	switch args[0] {
	case "target":
		return c.target(ctx, args[1:])
	case "receipt":
		return c.receipt(ctx, args[1:])
	case "receipts":
		return c.receipts(ctx, args[1:])
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
	if err := parseInterspersed(fs, c.Usage, args, func(a string) error { names = append(names, a); return nil }); err != nil {
		return err
	}
	if len(names) != 1 {
		return &usageError{msg: "kvfence observe target: exactly one target name is required", hint: "kvfence observe -h"}
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "observe target"); err != nil {
		return err
	}
	// Both ways read a kubernetes target's object through the receiver's
	// identity: this command's --kubeconfig, or the served receiver's.
	lt, err := either(&cf, &rf, false, c.m.warn,
		func(r *kvfence.Receiver) (kvfence.LiveTarget, error) { return r.ObserveTarget(ctx, names[0]) },
		func(cl *client.Client) (kvfence.LiveTarget, error) { return cl.ObserveTarget(ctx, names[0]) })
	if err != nil {
		return err
	}
	t, live := lt.Target, lt.Live
	if lt.LiveErr != nil && !errors.Is(lt.LiveErr, kvfence.ErrNoDispatcher) {
		c.m.warn(fmt.Sprintf("kvfence observe target: the object %s could not be read: %v", t.Object, lt.LiveErr))
	}
	out := observeTargetJSON{Target: t.Name, Scope: t.Scope, Revision: t.Revision,
		ValueB64: base64.StdEncoding.EncodeToString(t.Value)}
	if t.Object != nil {
		out.Object, out.UID = t.Object.String(), t.UID
		if live != nil {
			out.ResourceVersion, out.LiveUID, out.LastDispatch = live.Version, live.UID, live.Stamp.Receipt
		}
	}
	if utf8.Valid(t.Value) {
		s := string(t.Value)
		out.Value = &s
	}
	if t.Kind != "" && t.Kind != kvfence.TargetInternal {
		out.Kind, out.Effect, out.Key, out.Writes = string(t.Kind), t.Effect, t.Key, t.Writes
	}
	if cf.json {
		return writeJSON(c.m.Stdout, out)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "target\t%s\n", out.Target)
	fmt.Fprintf(tw, "scope\t%s\n", out.Scope)
	fmt.Fprintf(tw, "revision\t%d\n", out.Revision)
	switch {
	case out.Key != "":
		fmt.Fprintf(tw, "kind\t%s\n", out.Kind)
		fmt.Fprintf(tw, "key\t%s\n", out.Key)
		fmt.Fprintf(tw, "fence writes\t%d\n", out.Writes)
	case out.Object != "":
		fmt.Fprintf(tw, "kind\t%s\n", out.Kind)
		fmt.Fprintf(tw, "object\t%s\n", out.Object)
		fmt.Fprintf(tw, "uid\t%s\n", out.UID)
		if live != nil {
			fmt.Fprintf(tw, "resource version\t%s\n", out.ResourceVersion)
			fmt.Fprintf(tw, "live uid\t%s\n", out.LiveUID)
			fmt.Fprintf(tw, "last dispatch\t%s\n", out.LastDispatch)
		} else {
			fmt.Fprintf(tw, "value\tnot read (%s)\n", notReadHint(rf.on(), lt.LiveErr))
		}
	case out.Kind != "":
		fmt.Fprintf(tw, "kind\t%s (effect %s)\n", out.Kind, out.Effect)
	}
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
	cf.register(fs, withDB|withKey)
	var rf remoteFlags
	rf.register(fs)
	scope := fs.String("scope", "", "")
	action := fs.String("action", "", "")
	proof := fs.Bool("proof", false, "")
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
	if *proof {
		return c.receiptProof(ctx, &cf, &rf, *scope, *action)
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
	if rc.Dispatch != "" {
		fmt.Fprintf(tw, "dispatch\t%s %s\n", rc.Dispatch, rc.DispatchID)
		fmt.Fprintf(tw, "object version\t%s -> %s (uid %s)\n", rc.Precondition, rc.Version, rc.UID)
		fmt.Fprintf(tw, "deadline\t%s\n", humanTime(rc.Deadline))
	}
	return tw.Flush()
}

// receiptProof prints a receipt with its proof: with --json the proof file
// that verify-receipt checks (receiptproof), and otherwise the same parts
// for people, the note as it is. Locally it needs the receiver's --key,
// which signs the checkpoint note; a served receiver signs with its own.
func (c *ObserveCommand) receiptProof(ctx context.Context, cf *commonFlags, rf *remoteFlags, scope, action string) error {
	if !rf.on() {
		if cf.key == "" {
			return missingFlag("observe receipt --proof", "key", envKey)
		}
		priv, err := loadPrivate(cf.key)
		if err != nil {
			return err
		}
		cf.signKey = priv
	}
	rp, err := either(cf, rf, false, c.m.warn,
		func(r *kvfence.Receiver) (kvfence.ReceiptProof, error) { return r.ReceiptProof(scope, action) },
		func(cl *client.Client) (kvfence.ReceiptProof, error) { return cl.ReceiptProof(ctx, scope, action) })
	if err != nil {
		return err
	}
	p := receiptproof.Proof{Receipt: api.ReceiptOf(rp.Receipt), Entry: rp.Entry, Checkpoint: rp.Checkpoint, Inclusion: rp.Proof}
	if cf.json {
		out, err := p.Marshal()
		if err != nil {
			return err
		}
		_, err = c.m.Stdout.Write(out)
		return err
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "scope\t%s\n", p.Receipt.Scope)
	fmt.Fprintf(tw, "action\t%s\n", p.Receipt.Action)
	fmt.Fprintf(tw, "grant\t%s\n", p.Receipt.Grant)
	fmt.Fprintf(tw, "request sha256\t%s\n", p.Receipt.RequestSHA256)
	fmt.Fprintf(tw, "target\t%s\n", p.Receipt.Target)
	fmt.Fprintf(tw, "audit seq\t%d\n", p.Receipt.AuditSeq)
	fmt.Fprintf(tw, "tree size\t%d\n", rp.TreeSize)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.m.Stdout, "audit entry (base64)\n%s\n", base64.StdEncoding.EncodeToString(p.Entry))
	fmt.Fprintf(c.m.Stdout, "inclusion proof (%d hashes, base64)\n", len(p.Inclusion))
	for _, h := range p.Inclusion {
		fmt.Fprintf(c.m.Stdout, "%s\n", base64.StdEncoding.EncodeToString(h[:]))
	}
	_, err = fmt.Fprintf(c.m.Stdout, "checkpoint\n%s", p.Checkpoint)
	return err
}

// observeReceiptsJSON is the --json shape of observe receipts, the served
// answer's.
type observeReceiptsJSON = api.Receipts

// receipts prints the receipts a claim's grants applied in one scope: the
// effects a superseded worker left, which a takeover must reconcile.
func (c *ObserveCommand) receipts(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("observe receipts")
	cf := commonFlags{name: "observe receipts"}
	cf.register(fs, withDB)
	var rf remoteFlags
	rf.register(fs)
	scope := fs.String("scope", "", "")
	claim := fs.String("claim", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "observe receipts"); err != nil {
		return err
	}
	if err := require("observe receipts", [2]string{"scope", *scope}, [2]string{"claim", *claim}); err != nil {
		return err
	}
	rcs, err := either(&cf, &rf, false, c.m.warn,
		func(r *kvfence.Receiver) ([]kvfence.Receipt, error) { return r.ReceiptsByClaim(*scope, *claim) },
		func(cl *client.Client) ([]kvfence.Receipt, error) { return cl.ReceiptsByClaim(ctx, *scope, *claim) })
	if err != nil {
		return err
	}
	out := observeReceiptsJSON{Receipts: []api.Receipt{}}
	for _, rc := range rcs {
		out.Receipts = append(out.Receipts, api.ReceiptOf(rc))
	}
	if cf.json {
		return writeJSON(c.m.Stdout, out)
	}
	tw := newTable(c.m.Stdout)
	if len(rcs) == 0 {
		fmt.Fprintf(tw, "no receipt in scope %s under claim %s: nothing applied under its grants\n", *scope, *claim)
		return tw.Flush()
	}
	fmt.Fprintln(tw, "AUDIT SEQ\tAT\tACTION\tTARGET\tREVISION\tGRANT")
	for _, rc := range rcs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d -> %d\t%s\n", rc.AuditSeq, humanTime(rc.At), quoteIfNeeded(rc.Action),
			quoteIfNeeded(rc.Target), rc.RevBefore, rc.RevAfter, quoteIfNeeded(rc.Grant))
	}
	return tw.Flush()
}

func (c *ObserveCommand) events(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("observe events")
	cf := commonFlags{name: "observe events"}
	cf.register(fs, withDB)
	var rf remoteFlags
	rf.register(fs)
	var f eventFilter
	since := fs.Uint64("since", 0, "")
	fs.StringVar(&f.scope, "scope", "", "")
	fs.Var(&f.kinds, "kind", "")
	until := fs.Uint64("until", 0, "")
	follow := fs.Bool("follow", false, "")
	interval := fs.Duration("interval", time.Second, "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "observe events"); err != nil {
		return err
	}
	f.untilSet, f.until = isSet(fs, "until"), *until
	switch {
	case f.untilSet && *until < *since:
		return &usageError{msg: fmt.Sprintf("kvfence observe events: --until %d is before --since %d", *until, *since), hint: "kvfence observe -h"}
	case isSet(fs, "interval") && !*follow:
		return &usageError{msg: "kvfence observe events: --interval applies only with --follow", hint: "kvfence observe -h"}
	case *interval <= 0:
		return &usageError{msg: "kvfence observe events: --interval must be positive", hint: "kvfence observe -h"}
	}
	for _, k := range f.kinds {
		if !slices.Contains(eventKinds, k) {
			// A mistyped kind would otherwise match nothing, silently.
			return &usageError{msg: fmt.Sprintf("kvfence observe events: unknown --kind %q", k),
				hint: "one of " + strings.Join(eventKinds, ", ")}
		}
	}
	var p eventPrinter
	switch {
	case cf.json && *follow:
		p = newJSONLines(c.m.Stdout)
	case cf.json:
		p = newJSONEvents(c.m.Stdout)
	default:
		p = newTextEvents(c.m.Stdout)
	}
	fw := eventFollower{filter: f, p: p, next: *since}
	warn := c.m.warn
	for {
		done, err := fw.poll(ctx, &cf, &rf, warn)
		switch {
		case *follow && err != nil && ctx.Err() != nil:
			return p.close()
		case *follow && errors.Is(err, kvfence.ErrStorageBusy):
			// A writer holds the database for a moment; the next poll
			// reads what it committed.
		case err != nil:
			return err
		}
		// A damaged anchor slot is worth one warning, not one a poll.
		warn = func(string) {}
		if done || !*follow {
			return p.close()
		}
		if err := p.flush(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			// Interrupted: what was read is printed, and that is success.
			return p.close()
		case <-time.After(*interval):
		}
	}
}

// eventKinds are the kinds of entry a receiver writes, which --kind accepts.
var eventKinds = []string{audit.KindInit, audit.KindScopeCreated, audit.KindTargetCreated, audit.KindActivate,
	audit.KindHold, audit.KindGrantExtended, audit.KindSubmit, kvfence.KindDispatch, audit.KindRecovered, audit.KindReanchored, audit.KindArchived}

// eventFilter selects the events observe events prints.
type eventFilter struct {
	scope    string
	kinds    stringList
	until    uint64
	untilSet bool
}

func (f *eventFilter) match(e *kvfence.Event) bool {
	if f.scope != "" && e.Scope != f.scope {
		return false
	}
	return len(f.kinds) == 0 || slices.Contains(f.kinds, e.Kind)
}

// eventFollower reads the chain in polls, each in a read-only open of its
// own, so that between polls no lock is held and writers go on; it checks
// that each poll continues the chain where the one before ended.
type eventFollower struct {
	filter eventFilter
	p      eventPrinter
	next   uint64
	last   *kvfence.Event
}

// poll prints the events after the last one read and reports whether
// --until was reached.
func (fw *eventFollower) poll(ctx context.Context, cf *commonFlags, rf *remoteFlags, warn func(string)) (done bool, err error) {
	var werr error
	each := func(ev kvfence.Event) bool {
		if werr = ctx.Err(); werr != nil {
			return false
		}
		switch {
		case fw.last == nil:
		case ev.Seq > fw.last.Seq+1:
			// Not an integrity error by itself: an archive run between two
			// reads removes entries this follower has not printed yet.
			werr = fmt.Errorf("kvfence observe events: entries %d to %d are no longer in the database: archived since "+
				"the previous read (kvfence audit archive), or removed; kvfence verify-chain tells which",
				fw.last.Seq+1, ev.Seq-1)
			return false
		case !bytes.Equal(ev.Prev, fw.last.Hash[:]):
			werr = fmt.Errorf("%w: entry %d does not link to entry %d as read before (%x): the chain changed between reads",
				audit.ErrBrokenLink, ev.Seq, fw.last.Seq, fw.last.Hash[:])
			return false
		}
		fw.last, fw.next = &ev, ev.Seq+1
		if fw.filter.untilSet && ev.Seq > fw.filter.until {
			done = true
			return false
		}
		if fw.filter.match(&ev) {
			if werr = fw.p.event(eventOf(ev)); werr != nil {
				return false
			}
		}
		if fw.filter.untilSet && ev.Seq == fw.filter.until {
			done = true
			return false
		}
		return true
	}
	if _, err := either(cf, rf, false, warn,
		func(r *kvfence.Receiver) (struct{}, error) { return struct{}{}, r.Events(fw.next, each) },
		func(cl *client.Client) (struct{}, error) { return struct{}{}, cl.Events(ctx, fw.next, each) }); err != nil {
		return false, err
	}
	if errors.Is(werr, context.Canceled) {
		return true, nil
	}
	return done, werr
}

// eventOf converts an audit entry to its JSON shape.
func eventOf(ev kvfence.Event) eventJSON { return ev.Entry.JSON(ev.Hash) }

// eventPrinter writes events as they are read, so a long chain is never
// held in memory.
type eventPrinter interface {
	event(eventJSON) error
	// flush writes out what is buffered, between polls of --follow.
	flush() error
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

// flush is a no-op: the document is written whole at close, since a
// followed stream is printed as JSON lines instead.
func (j *jsonEvents) flush() error { return nil }

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
	addN("base_seq", e.BaseSeq)
	add("note", e.Note)
	_, err := fmt.Fprintf(t.tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, at, e.Kind, orDash(e.Scope), epoch, strings.Join(d, " "))
	return err
}

func (t *textEvents) flush() error { return t.tw.Flush() }

func (t *textEvents) close() error { return t.tw.Flush() }

// jsonLines writes one JSON object per line, for --follow --json, whose
// output has no end at which to close a document.
type jsonLines struct {
	w   *bufio.Writer
	enc *json.Encoder
}

func newJSONLines(w io.Writer) *jsonLines {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return &jsonLines{w: bw, enc: enc}
}

func (j *jsonLines) event(e eventJSON) error { return j.enc.Encode(e) }
func (j *jsonLines) flush() error            { return j.w.Flush() }
func (j *jsonLines) close() error            { return j.w.Flush() }

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
	kvfence observe receipt --scope S --action A [--proof [--key FILE]] [common arguments]
	kvfence observe receipts --scope S --claim C [common arguments]
	kvfence observe grant ID [common arguments]
	kvfence observe events [--since SEQ] [--until SEQ] [--scope S] [--kind K ...]
	                       [--follow [--interval DURATION]] [common arguments]

Prints state without changing it; the database is opened read-only.

	target    a target's scope, revision and value. With --json, "value"
	          is the value as text when it is valid UTF-8 (else null) and
	          "value_b64" is always the value in base64. For a target of
	          kind etcd, also its kind and key; its revision and value are
	          the key's live mod revision and value, read from etcd.
	receipt   the receipt of an applied action: grant, request digest,
	          revisions before and after, audit seq and time. With
	          --proof (and the receiver's --key, which signs the
	          checkpoint note), also its audit entry's bytes, the
	          receiver's signed checkpoint note and the inclusion proof
	          of the entry in the note's Merkle tree; with --json, the
	          proof file that kvfence verify-receipt checks offline.
	          With --server the served receiver signs the note.
	receipts  the receipts of scope S applied under grants that carried
	          the ledger claim C, oldest first: what that claim's worker
	          already did there, to reconcile after a takeover. With
	          --json, {"receipts":[...]}, each in observe receipt's shape.
	grant     a grant by id: scope, epoch, executor, claim, action,
	          request digest, validity window ("expired" once the
	          receiver's clock is past it), decision, its activate entry's
	          audit seq and the recovery that revoked it, if any. A stored
	          grant is evidence; only a scope's active grant authorises.
	events    the audit chain from SEQ on (default: from the start, or
	          from the base once older entries were archived). With
	          --json, {"events":[...]} in chain order; each entry has seq,
	          hash, prev, at and kind, and only the other fields it has.
	          With --follow it keeps printing new entries until
	          interrupted, as JSON lines (one object per line) with --json.

Arguments:

	--scope S, --action A
	    The receipt's scope and logical action id.
	--scope S, --claim C
	    For receipts: the scope and the ledger claim ref the grants bound.
	--since SEQ
	    The first audit seq to print.
	--until SEQ
	    The last audit seq to print; with --follow, stop once it is read.
	--scope S
	    Print only the entries that name scope S.
	--kind K
	    Print only entries of kind K (init, scope_created, target_created,
	    activate, hold, submit, recovered, reanchored, archived); repeat
	    for several.
	--follow
	    Poll for new entries until interrupted. Each poll opens the
	    database read-only and closes it again, so no lock is held between
	    polls and writers are never kept waiting; a poll that finds the
	    database locked is skipped. Each poll must continue the chain where
	    the last one ended: an entry that no longer links to the one read
	    before exits 4; entries archived before they were read exit 1.
	    With --server it polls the served receiver the same way.
	--interval DURATION
	    Time between polls with --follow (default 1s).
`+usageDBRead+usageServer+usageJSON)
}

// notReadHint says why a kubernetes target's object was not read, and how
// to have it read.
func notReadHint(served bool, err error) string {
	switch {
	case !errors.Is(err, kvfence.ErrNoDispatcher):
		return "the read failed: see the warning above"
	case served:
		return "the served receiver has no Kubernetes identity: kvfence serve --kubeconfig"
	}
	return "give --kubeconfig to read the object"
}
