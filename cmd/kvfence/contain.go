package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/contain"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/ledger"
)

// ContainCommand holds an action at every boundary (package contain) and
// keeps the containment record in the ledger.
type ContainCommand struct{ m *Main }

// partialError reports a containment that is not full. The record has
// already been printed; this only sets the exit code.
type partialError struct{ state ledger.ContainmentState }

func (e *partialError) Error() string {
	return fmt.Sprintf("containment is %s: not every boundary acknowledged its hold", e.state)
}

// errNotReached means contain verify checked every acknowledgment offline
// but could not read the current epoch of some receiver: the check is not
// complete, so it is not reported as passed.
var errNotReached = errors.New("kvfence contain verify: some receivers were not reached; their epochs are unchecked")

// containFlags are the flags every contain subcommand shares: the
// ledger's, the coordinator's admin TLS identity for served receivers, and
// the keys of receivers on this host.
type containFlags struct {
	lf                     ledgerFlags
	tlsCert, tlsKey, tlsCA string
	serverUID              string
	serverUIDs             []uint32
	receiverKeys           stringList
	keys                   map[string]ed25519.PrivateKey
	timeout                time.Duration
}

func (cf *containFlags) register(fs *flag.FlagSet) {
	cf.lf.register(fs)
	fs.StringVar(&cf.tlsCert, "tls-cert", "", "")
	fs.StringVar(&cf.tlsKey, "tls-key", "", "")
	fs.StringVar(&cf.tlsCA, "tls-ca", "", "")
	fs.StringVar(&cf.serverUID, "server-uid", "", "")
	fs.Var(&cf.receiverKeys, "receiver-key", "")
	fs.DurationVar(&cf.timeout, "timeout", contain.DefaultTimeout, "")
}

// check validates the shared flags and loads the receiver keys, before
// the ledger is opened.
func (cf *containFlags) check(write bool) error {
	name := cf.lf.name
	if err := cf.lf.require(write); err != nil {
		return err
	}
	if cf.timeout <= 0 {
		return usageErrorf("kvfence %s: --timeout must be positive", name)
	}
	if (cf.tlsCert == "") != (cf.tlsKey == "") || (cf.tlsCert == "") != (cf.tlsCA == "") {
		return usageErrorf("kvfence %s: give --tls-cert, --tls-key and --tls-ca together, or none", name)
	}
	if cf.serverUID != "" {
		uid, err := strconv.ParseUint(cf.serverUID, 10, 32)
		if err != nil {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --server-uid %q is not a uid", name, cf.serverUID),
				hint: "give the numeric uid the receivers run as: id -u USER"}
		}
		cf.serverUIDs = []uint32{uint32(uid)}
	}
	cf.keys = map[string]ed25519.PrivateKey{}
	for _, kv := range cf.receiverKeys {
		n, file, ok := strings.Cut(kv, "=")
		if !ok || n == "" || file == "" {
			return usageErrorf("kvfence %s: --receiver-key %q: want NAME=FILE", name, kv)
		}
		if _, dup := cf.keys[n]; dup {
			return usageErrorf("kvfence %s: --receiver-key names %s twice", name, n)
		}
		priv, err := loadPrivate(file)
		if err != nil {
			return err
		}
		cf.keys[n] = priv
	}
	return nil
}

// servedBoundary is a served receiver's Boundary with its client, closed
// with the call that dialled it.
type servedBoundary struct {
	contain.Boundary
	cl *client.Client
}

func (s servedBoundary) Close() error { s.cl.Close(); return nil }

// dial reaches a registered receiver: over https with the coordinator's
// TLS identity, over its unix socket, or, for a receiver on this host,
// by opening its files with the key given by --receiver-key, which must be
// the pinned key's private half.
func (cf *containFlags) dial(ctx context.Context, r ledger.Receiver) (contain.Boundary, error) {
	switch {
	case strings.HasPrefix(r.Server, "https://"):
		if cf.tlsCert == "" {
			return nil, fmt.Errorf("receiver %s is served at %s: give --tls-cert, --tls-key and --tls-ca", r.Name, r.Server)
		}
		rf := remoteFlags{server: r.Server, tlsCert: cf.tlsCert, tlsKey: cf.tlsKey, tlsCA: cf.tlsCA}
		cl, err := rf.dial()
		if err != nil {
			return nil, err
		}
		return servedBoundary{contain.Served(cl), cl}, nil
	case strings.HasPrefix(r.Server, "unix://"):
		rf := remoteFlags{server: r.Server, serverUIDs: cf.serverUIDs}
		cl, err := rf.dial()
		if err != nil {
			return nil, err
		}
		return servedBoundary{contain.Served(cl), cl}, nil
	case r.DB != "":
		priv, ok := cf.keys[r.Name]
		if !ok {
			return nil, fmt.Errorf("receiver %s is on this host: give --receiver-key %s=FILE", r.Name, r.Name)
		}
		if !ed25519PublicOf(priv).Equal(r.PublicKey) {
			return nil, fmt.Errorf("--receiver-key %s: not the private half of the key the ledger pinned for %s", r.Name, r.Name)
		}
		return contain.Local(contain.LocalOptions{DB: r.DB, Anchor: r.Anchor, Key: priv, LockTimeout: cf.lf.lockTimeout})
	}
	return nil, fmt.Errorf("receiver %s has neither a server nor a database", r.Name)
}

// Run runs the command.
func (c *ContainCommand) Run(ctx context.Context, args []string) (err error) {
	sub := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	var cf containFlags
	cf.lf.name = strings.TrimSpace("contain " + sub)
	fs := newFlagSet(cf.lf.name)
	cf.register(fs)
	var check func() error
	var run func(co *contain.Coordinator) (any, error)
	write := true
	switch sub {
	case "":
		action, reason, operator := fs.String("action", "", ""), fs.String("reason", "", ""), fs.String("operator", "", "")
		check = func() error { return require("contain", [2]string{"action", *action}, [2]string{"reason", *reason}) }
		run = func(co *contain.Coordinator) (any, error) {
			if *operator == "" {
				*operator = "operator"
			}
			rec, err := co.Contain(ctx, contain.ContainRequest{Action: *action, Reason: *reason, Operator: *operator})
			if err != nil {
				return nil, err
			}
			return containmentJSONOf(rec), nil
		}
	case "alternate":
		action, boundary := fs.String("action", "", ""), fs.String("boundary", "", "")
		operator, reason := fs.String("operator", "", ""), fs.String("reason", "", "")
		check = func() error {
			return require("contain alternate", [2]string{"action", *action}, [2]string{"boundary", *boundary},
				[2]string{"operator", *operator}, [2]string{"reason", *reason})
		}
		run = func(co *contain.Coordinator) (any, error) {
			// N alone names the receiver's only boundary of the action; the
			// ledger refuses it when there are several.
			recv, scope, _ := strings.Cut(*boundary, ":")
			rec, err := co.Alternate(ctx, ledger.AlternateRequest{Action: *action, Receiver: recv, Scope: scope, Operator: *operator, Reason: *reason})
			if err != nil {
				return nil, err
			}
			return containmentJSONOf(rec), nil
		}
	case "show":
		write = false
		action := fs.String("action", "", "")
		check = func() error { return require("contain show", [2]string{"action", *action}) }
		run = func(co *contain.Coordinator) (any, error) {
			rec, err := co.Show(*action)
			if err != nil {
				return nil, err
			}
			return containmentJSONOf(rec), nil
		}
	case "verify":
		write = false
		action := fs.String("action", "", "")
		check = func() error { return require("contain verify", [2]string{"action", *action}) }
		run = func(co *contain.Coordinator) (any, error) {
			res, verr := co.Verify(ctx, *action)
			if verr != nil && !errors.Is(verr, contain.ErrVerifyMismatch) {
				return nil, verr
			}
			out := verifyJSONOf(res)
			if verr == nil && !out.OK {
				verr = errNotReached
			}
			return out, verr
		}
	case "activate":
		action, executor, claim := fs.String("action", "", ""), fs.String("executor", "", ""), fs.String("claim", "", "")
		reqFile, decision, ttl := fs.String("request", "", ""), fs.String("decision", "", ""), fs.Duration("ttl", 0, "")
		var b []byte
		check = func() (err error) {
			if err := require("contain activate", [2]string{"action", *action}, [2]string{"executor", *executor},
				[2]string{"claim", *claim}, [2]string{"request", *reqFile}, [2]string{"decision", *decision}); err != nil {
				return err
			}
			if *ttl < 0 {
				return usageErrorf("kvfence contain activate: --ttl must not be negative")
			}
			b, err = c.m.readInput(*reqFile)
			return err
		}
		run = func(co *contain.Coordinator) (any, error) {
			res, aerr := co.Activate(ctx, contain.ActivateRequest{Action: *action, Executor: *executor, Claim: *claim,
				Request: b, Decision: *decision, TTL: *ttl})
			// A refusal activated nothing and tried nothing: the error is
			// the answer. Otherwise say which boundaries took the grant.
			if aerr != nil && res.Activated == nil && res.NotActivated == nil {
				return nil, aerr
			}
			return containActivateJSONOf(res), aerr
		}
	default:
		return &usageError{msg: fmt.Sprintf("kvfence contain %s: unknown subcommand", sub), hint: "kvfence contain -h"}
	}
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.lf.resolve(fs, c.m.Getenv)
	if err := cf.check(write); err != nil {
		return err
	}
	// Every usage error comes before the ledger is opened: nothing is
	// locked or written for a command line that cannot run.
	if err := check(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l, err := cf.lf.open(write)
	if err != nil {
		return ledgerHint(err, cf.lf)
	}
	defer func() {
		if cerr := l.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	co, err := contain.New(contain.Options{Ledger: l, Dial: cf.dial, Timeout: cf.timeout})
	if err != nil {
		return err
	}
	out, rerr := run(co)
	if out == nil {
		return rerr
	}
	if cf.lf.json {
		err = writeJSON(c.m.Stdout, out)
	} else {
		err = printContain(c.m, out)
	}
	if err != nil {
		return err
	}
	if rerr != nil {
		return rerr
	}
	// full_with_alternate is contained (it says so, never full); partial
	// and none are not.
	if cj, ok := out.(containmentJSON); ok && sub == "" &&
		(cj.State == string(ledger.ContainmentPartial) || cj.State == string(ledger.ContainmentNone)) {
		return &partialError{state: ledger.ContainmentState(cj.State)}
	}
	return nil
}

// containmentJSON is a containment record in --json (README, docs/design.md §8.2).
type containmentJSON struct {
	Containment     string          `json:"containment"`
	Action          string          `json:"action"`
	SupersededClaim string          `json:"superseded_claim"`
	Reason          string          `json:"reason"`
	State           string          `json:"state"`
	Boundaries      []boundaryJSON  `json:"boundaries"`
	StartedAt       *string         `json:"started_at"`
	UpdatedAt       *string         `json:"updated_at"`
	Successor       []successorJSON `json:"successor"`
	AuditSeq        uint64          `json:"audit_seq"`
}

type boundaryJSON struct {
	Receiver             string          `json:"receiver"`
	Scope                string          `json:"scope"`
	HoldID               string          `json:"hold_id"`
	Result               string          `json:"result"`
	ErrorCode            string          `json:"error_code"`
	Error                string          `json:"error"`
	HoldRequestedAt      *string         `json:"hold_requested_at"`
	AcknowledgedAt       *string         `json:"acknowledged_at"`
	PreviousEpoch        uint64          `json:"previous_epoch"`
	InstalledEpoch       uint64          `json:"installed_epoch"`
	Checkpoint           *checkpointJSON `json:"checkpoint"`
	LastStaleRejectionAt *string         `json:"last_stale_rejection_at"`
	Outstanding          []effectJSON    `json:"outstanding"`
	ObservedAt           *string         `json:"observed_at"`
	ObservationError     string          `json:"observation_error"`
	Alternate            *alternateJSON  `json:"alternate"`
	Attempts             uint64          `json:"attempts"`
}

type checkpointJSON struct {
	Seq  uint64 `json:"seq"`
	Head string `json:"head"`
}

type effectJSON struct {
	Receiver  string  `json:"receiver"`
	Scope     string  `json:"scope"`
	Action    string  `json:"action"`
	AuditSeq  uint64  `json:"audit_seq"`
	AppliedAt *string `json:"applied_at"`
	Target    string  `json:"target"`
	Revision  uint64  `json:"revision"`
}

type alternateJSON struct {
	Operator string  `json:"operator"`
	Reason   string  `json:"reason"`
	At       *string `json:"at"`
}

type successorJSON struct {
	Receiver    string  `json:"receiver"`
	Scope       string  `json:"scope"`
	Grant       string  `json:"grant"`
	Epoch       uint64  `json:"epoch"`
	Executor    string  `json:"executor"`
	Claim       string  `json:"claim"`
	Decision    string  `json:"decision"`
	ActivatedAt *string `json:"activated_at"`
}

func containmentJSONOf(c ledger.Containment) containmentJSON {
	out := containmentJSON{Containment: c.ID, Action: c.Action, SupersededClaim: c.SupersededClaim, Reason: c.Reason,
		State: string(c.State), Boundaries: []boundaryJSON{}, StartedAt: api.Time(c.StartedAt), UpdatedAt: api.Time(c.UpdatedAt),
		Successor: []successorJSON{}, AuditSeq: c.AuditSeq}
	for _, b := range c.Boundaries {
		bj := boundaryJSON{Receiver: b.Receiver, Scope: b.Scope, HoldID: b.HoldID, Result: string(b.Result), ErrorCode: b.ErrorCode,
			Error: b.Error, HoldRequestedAt: api.Time(b.HoldRequestedAt), AcknowledgedAt: api.Time(b.AcknowledgedAt),
			PreviousEpoch: b.PreviousEpoch, InstalledEpoch: b.InstalledEpoch, LastStaleRejectionAt: api.Time(b.LastStaleRejectionAt),
			Outstanding: []effectJSON{}, ObservedAt: api.Time(b.ObservedAt), ObservationError: b.ObservationError, Attempts: b.Attempts}
		if len(b.Checkpoint) > 0 {
			if sc, err := audit.ParseSignedCheckpoint(b.Checkpoint); err == nil {
				bj.Checkpoint = &checkpointJSON{Seq: sc.Seq, Head: hex.EncodeToString(sc.Head[:])}
			}
		}
		for _, e := range b.Outstanding {
			bj.Outstanding = append(bj.Outstanding, effectJSON{Receiver: e.Receiver, Scope: e.Scope, Action: e.Action,
				AuditSeq: e.AuditSeq, AppliedAt: api.Time(e.AppliedAt), Target: e.Target, Revision: e.Revision})
		}
		if a := b.Alternate; a != nil {
			bj.Alternate = &alternateJSON{Operator: a.Operator, Reason: a.Reason, At: api.Time(a.At)}
		}
		out.Boundaries = append(out.Boundaries, bj)
	}
	for _, g := range c.Successor {
		out.Successor = append(out.Successor, successorJSON{Receiver: g.Receiver, Scope: g.Scope, Grant: g.Grant, Epoch: g.Epoch,
			Executor: g.Executor, Claim: g.Claim, Decision: g.Decision, ActivatedAt: api.Time(g.ActivatedAt)})
	}
	return out
}

// verifyJSON is contain verify's report.
type verifyJSON struct {
	OK          bool           `json:"ok"`
	Containment string         `json:"containment"`
	Action      string         `json:"action"`
	State       string         `json:"state"`
	Checked     []checkedJSON  `json:"checked"`
	Mismatches  []mismatchJSON `json:"mismatches"`
}

type checkedJSON struct {
	Receiver       string  `json:"receiver"`
	Scope          string  `json:"scope"`
	InstalledEpoch uint64  `json:"installed_epoch"`
	Reached        bool    `json:"reached"`
	CurrentEpoch   *uint64 `json:"current_epoch"`
	Error          string  `json:"error"`
}

type mismatchJSON struct {
	Receiver string `json:"receiver"`
	Scope    string `json:"scope"`
	Kind     string `json:"kind"`
	Detail   string `json:"detail"`
}

func verifyJSONOf(r contain.VerifyResult) verifyJSON {
	// A boundary not reached leaves its epoch unchecked: not ok, though
	// not a mismatch either.
	out := verifyJSON{OK: len(r.Mismatches) == 0, Containment: r.Containment.ID, Action: r.Containment.Action,
		State: string(r.Containment.State), Checked: []checkedJSON{}, Mismatches: []mismatchJSON{}}
	for _, c := range r.Checked {
		cj := checkedJSON{Receiver: c.Receiver, Scope: c.Scope, InstalledEpoch: c.InstalledEpoch, Reached: c.Reached, Error: c.Error}
		if c.Reached {
			e := c.CurrentEpoch
			cj.CurrentEpoch = &e
		} else {
			out.OK = false
		}
		out.Checked = append(out.Checked, cj)
	}
	for _, m := range r.Mismatches {
		out.Mismatches = append(out.Mismatches, mismatchJSON{m.Receiver, m.Scope, m.Kind, m.Detail})
	}
	return out
}

// containActivateJSON is contain activate's result.
type containActivateJSON struct {
	Containment  string          `json:"containment"`
	Action       string          `json:"action"`
	Activated    []successorJSON `json:"activated"`
	NotActivated []notActJSON    `json:"not_activated"`
}

type notActJSON struct {
	Receiver string `json:"receiver"`
	Scope    string `json:"scope"`
	Code     string `json:"code"`
	Error    string `json:"error"`
}

func containActivateJSONOf(r contain.ActivateResult) containActivateJSON {
	out := containActivateJSON{Containment: r.Containment.ID, Action: r.Containment.Action, Activated: []successorJSON{}, NotActivated: []notActJSON{}}
	for _, g := range r.Activated {
		out.Activated = append(out.Activated, successorJSON{Receiver: g.Receiver, Scope: g.Scope, Grant: g.Grant, Epoch: g.Epoch,
			Executor: g.Executor, Claim: g.Claim, Decision: g.Decision, ActivatedAt: api.Time(g.ActivatedAt)})
	}
	for _, o := range r.NotActivated {
		out.NotActivated = append(out.NotActivated, notActJSON{o.Receiver, o.Scope, o.Code, o.Error})
	}
	return out
}

// printContain prints a contain subcommand's result as text.
func printContain(m *Main, v any) error {
	tw := newTable(m.Stdout)
	switch o := v.(type) {
	case containmentJSON:
		fmt.Fprintf(tw, "containment\t%s\n", o.Containment)
		fmt.Fprintf(tw, "action\t%s\n", o.Action)
		fmt.Fprintf(tw, "superseded claim\t%s\n", o.SupersededClaim)
		fmt.Fprintf(tw, "state\t%s\n", o.State)
		for _, b := range o.Boundaries {
			line := b.Result
			if b.ErrorCode != "" {
				line += " (" + b.ErrorCode + ": " + b.Error + ")"
			}
			if b.Result == string(ledger.BoundaryAcknowledged) {
				line += fmt.Sprintf(" epoch %d -> %d at %s", b.PreviousEpoch, b.InstalledEpoch, timeOrDash(b.AcknowledgedAt))
			}
			if b.Alternate != nil {
				line += fmt.Sprintf(" (by %s: %s)", b.Alternate.Operator, b.Alternate.Reason)
			}
			fmt.Fprintf(tw, "boundary %s:%s\t%s\n", b.Receiver, b.Scope, line)
			fmt.Fprintf(tw, "  hold requested at\t%s\n", timeOrDash(b.HoldRequestedAt))
			fmt.Fprintf(tw, "  last stale rejection\t%s\n", timeOrDash(b.LastStaleRejectionAt))
			fmt.Fprintf(tw, "  observed at\t%s\n", timeOrDash(b.ObservedAt))
			if b.ObservationError != "" {
				fmt.Fprintf(tw, "  observation failed\t%s\n", b.ObservationError)
			}
			for _, e := range b.Outstanding {
				fmt.Fprintf(tw, "  outstanding\t%s on %s rev %d (audit seq %d, %s)\n", e.Action, e.Target, e.Revision, e.AuditSeq, timeOrDash(e.AppliedAt))
			}
		}
		for _, g := range o.Successor {
			fmt.Fprintf(tw, "successor %s:%s\tgrant %s at epoch %d\n", g.Receiver, g.Scope, g.Grant, g.Epoch)
		}
	case verifyJSON:
		fmt.Fprintf(tw, "containment\t%s (%s)\n", o.Containment, o.State)
		for _, c := range o.Checked {
			cur := "not reached: " + c.Error
			if c.CurrentEpoch != nil {
				cur = fmt.Sprintf("epoch %d", *c.CurrentEpoch)
			}
			fmt.Fprintf(tw, "boundary %s:%s\tinstalled %d, now %s\n", c.Receiver, c.Scope, c.InstalledEpoch, cur)
		}
		for _, mm := range o.Mismatches {
			fmt.Fprintf(tw, "MISMATCH %s:%s\t%s: %s\n", mm.Receiver, mm.Scope, mm.Kind, mm.Detail)
		}
		if o.OK {
			fmt.Fprintf(tw, "ok\tevery acknowledgment verifies; every receiver is at or above its installed epoch\n")
		} else if len(o.Mismatches) == 0 {
			fmt.Fprintf(tw, "incomplete\tevery acknowledgment verifies; the receivers not reached are unchecked\n")
		}
	case containActivateJSON:
		for _, g := range o.Activated {
			fmt.Fprintf(tw, "activated %s:%s\tgrant %s at epoch %d\n", g.Receiver, g.Scope, g.Grant, g.Epoch)
		}
		for _, n := range o.NotActivated {
			fmt.Fprintf(tw, "not activated %s:%s\t%s: %s\n", n.Receiver, n.Scope, n.Code, n.Error)
		}
	}
	return tw.Flush()
}

// Usage prints the command's help.
func (c *ContainCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence contain [subcommand] --ledger FILE --anchor FILE --key FILE [arguments]

Hold an approved action at every receiving boundary its approval names,
after its claim was superseded (ledger takeover), and keep the evidence in
the ledger. Receivers are reached as the ledger registered them: served
ones with --tls-cert, --tls-key and --tls-ca (https) or over their unix
socket, ones on this host with --receiver-key NAME=FILE.

	contain --action A --reason R [--operator O] [--timeout 10s]
	    Hold every boundary not yet acknowledged, with the containment's
	    hold ids (a rerun never issues a second generation), verify each
	    acknowledgment against the pinned key and record the result.
	    Exit 0 when the state is full (or full_with_alternate), 8 when
	    partial or none.
	contain alternate --action A --boundary N[:SCOPE] --operator O --reason R
	    Record that another authorised path contained a boundary; the
	    state then reads full_with_alternate, never full.
	contain show --action A
	    Print the containment record.
	contain verify --action A
	    Re-check every acknowledgment's signature and that each receiver's
	    epoch is not below the installed one (exit 4 on a mismatch).
	contain activate --action A --executor ID --claim REF --request REQ.cbor
	        --decision REF [--ttl D]
	    Activate the successor at every acknowledged boundary, at the
	    installed epoch. Refused (exit 3, nothing activated) unless the
	    state is full or full_with_alternate and the superseded claim is
	    reconciled.

Flags: --ledger, --anchor, --key (or KVFENCE_LEDGER, KVFENCE_LEDGER_ANCHOR,
KVFENCE_LEDGER_KEY), --lock-timeout, --server-uid UID (unix sockets),
--json.
`)
}

// timeOrDash returns a --json time for text, "-" when it never happened.
func timeOrDash(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}
