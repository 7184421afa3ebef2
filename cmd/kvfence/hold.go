package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// HoldCommand advances the epoch of one or more scopes, clears their
// active grants and holds them, in one transaction. It is privileged.
type HoldCommand struct{ m *Main }

// holdScopeJSON is one scope of a hold's --json shape (docs/design.md §9), as
// hold, recover and the served receiver print it.
type holdScopeJSON = api.HoldScope

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// Run runs the command.
func (c *HoldCommand) Run(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("hold")
	cf := commonFlags{name: "hold"}
	cf.register(fs, withDB|withKey)
	var rf remoteFlags
	rf.register(fs)
	var scopes stringList
	fs.Var(&scopes, "scope", "")
	reason := fs.String("reason", "", "")
	all := fs.Bool("all", false, "")
	holdID := fs.String("hold-id", "", "")
	expectEpoch := fs.Uint64("expect-epoch", 0, "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "hold"); err != nil {
		return err
	}
	if !rf.on() {
		if err := cf.requireWriter(); err != nil {
			return err
		}
	}
	switch {
	case *all && len(scopes) > 0:
		return &usageError{msg: "kvfence hold: --all and --scope are mutually exclusive", hint: "kvfence hold -h"}
	case !*all && len(scopes) == 0:
		return &usageError{msg: "kvfence hold: --scope or --all is required", hint: "kvfence hold -h"}
	case *all && (isSet(fs, "hold-id") || isSet(fs, "expect-epoch")):
		return &usageError{msg: "kvfence hold: --hold-id and --expect-epoch name scopes; they do not go with --all",
			hint: "kvfence hold -h"}
	case isSet(fs, "hold-id") && *holdID == "":
		return &usageError{msg: "kvfence hold: --hold-id is empty", hint: "kvfence hold -h"}
	case isSet(fs, "expect-epoch") && *expectEpoch == 0:
		return &usageError{msg: "kvfence hold: --expect-epoch must be an epoch, 1 or more", hint: "kvfence hold -h"}
	case *expectEpoch != 0 && len(scopes) != 1:
		return &usageError{msg: "kvfence hold: --expect-epoch compares one scope's epoch; name exactly one --scope",
			hint: "kvfence hold -h"}
	}
	if err := require("hold", [2]string{"reason", *reason}); err != nil {
		return err
	}
	if *all {
		return c.holdAll(ctx, &cf, &rf, *reason)
	}
	req := kvfence.HoldRequest{Scopes: scopes, Reason: *reason, ID: *holdID, ExpectEpoch: *expectEpoch}
	res, err := either(&cf, &rf, true, c.m.warn,
		func(r *kvfence.Receiver) (kvfence.HoldResult, error) { return localAdmin(r).Hold(ctx, req) },
		func(cl *client.Client) (kvfence.HoldResult, error) { return cl.Hold(ctx, req) })
	if err != nil {
		return err
	}
	out := api.HoldOf(res)
	if cf.json {
		return writeJSON(c.m.Stdout, out)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintln(tw, "SCOPE\tPREVIOUS EPOCH\tEPOCH\tMODE")
	for _, s := range out.Scopes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", s.Scope, s.PreviousEpoch, s.Epoch, s.Mode)
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "hold requested at\t%s\n", humanTime(res.HoldRequestedAt))
	fmt.Fprintf(tw, "hold committed at\t%s\n", humanTime(res.HoldCommittedAt))
	fmt.Fprintf(tw, "audit seq\t%d\n", res.AuditSeq)
	printHoldEvidence(tw, req.ID, res)
	return tw.Flush()
}

// printHoldEvidence prints what makes a hold checkable and repeatable:
// its id, whether this run repeated it, and the signed checkpoint.
func printHoldEvidence(w io.Writer, id string, res kvfence.HoldResult) {
	if id != "" {
		fmt.Fprintf(w, "hold id\t%s\n", id)
	}
	if cp := res.Checkpoint; cp != (audit.SignedCheckpoint{}) {
		fmt.Fprintf(w, "checkpoint seq\t%d\n", cp.Seq)
		fmt.Fprintf(w, "checkpoint head\t%x\n", cp.Head[:])
		fmt.Fprintf(w, "key fingerprint\t%s\n", cp.Key)
	}
	// Writes to remote targets whose outcome is unknown: each may have
	// reached its object before the fencing write; containment and the
	// operator reconcile them.
	for _, o := range res.Outstanding {
		fmt.Fprintf(w, "outstanding write\t%s %s on %s (grant %s, dispatch %s, fenced at version %s)\n",
			o.Scope, o.Action, o.Object, o.Grant, o.DispatchID, o.Version)
	}
	if res.Repeated {
		// Last, and without a tab: the epochs above are the first hold's,
		// and this says so in words a reader cannot miss.
		fmt.Fprintln(w, "repeated: no new generation; this hold id was held before, and the result above is that hold's")
	}
}

// holdAllJSON is the --json shape of hold --all: hold's shape, with the
// scopes that were held already.
type holdAllJSON = api.HoldAll

// holdAll holds every open scope in one transaction.
func (c *HoldCommand) holdAll(ctx context.Context, cf *commonFlags, rf *remoteFlags, reason string) error {
	res, err := either(cf, rf, true, c.m.warn,
		func(r *kvfence.Receiver) (kvfence.HoldAllResult, error) { return localAdmin(r).HoldAll(ctx, reason) },
		func(cl *client.Client) (kvfence.HoldAllResult, error) { return cl.HoldAll(ctx, reason) })
	if err != nil {
		return err
	}
	out := holdAllJSON(api.HoldAllOf(res))
	if cf.json {
		return writeJSON(c.m.Stdout, out)
	}
	tw := newTable(c.m.Stdout)
	if len(out.Scopes) == 0 {
		fmt.Fprintln(tw, "no open scope: nothing held, nothing written")
	} else {
		fmt.Fprintln(tw, "SCOPE\tPREVIOUS EPOCH\tEPOCH\tMODE")
		for _, s := range out.Scopes {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", s.Scope, s.PreviousEpoch, s.Epoch, s.Mode)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "already held\t%s\n", orDash(strings.Join(out.AlreadyHeld, ", ")))
	if len(out.Scopes) > 0 {
		fmt.Fprintf(tw, "hold requested at\t%s\n", humanTime(res.HoldRequestedAt))
		fmt.Fprintf(tw, "hold committed at\t%s\n", humanTime(res.HoldCommittedAt))
	}
	fmt.Fprintf(tw, "audit seq\t%d\n", res.AuditSeq)
	if len(out.Scopes) > 0 {
		printHoldEvidence(tw, "", res.HoldResult)
	}
	return tw.Flush()
}

// Usage prints the command's help.
func (c *HoldCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence hold --scope S [--scope S2 ...] --reason R
                    [--hold-id ID] [--expect-epoch N] [common arguments]
       kvfence hold --all --reason R [common arguments]

Holds the named scopes: each one's epoch advances by one, its active grant
is cleared and it stops accepting requests, all in one transaction (every
scope is held, or none is). From the moment the hold commits, envelopes
that carry the superseded grant or epoch are denied. Hold never authorises
anything; activate a new grant afterwards.
Privileged: requires the receiver's private key.

Arguments:

	--scope S
	    A scope to hold; repeat for several.
	--all
	    Hold every open scope, in one transaction: the incident button.
	    No submit in any scope is accepted after the first of its holds;
	    one audit entry per scope, anchored once. Scopes already held are
	    listed ("already held") and left at their epoch.
	--reason R
	    Why, recorded in the audit chain.
	--hold-id ID
	    Make the hold idempotent: the first hold with ID advances the
	    epochs; running the same command again (the same ID, scopes,
	    reason and --expect-epoch) writes nothing and prints the first
	    hold's result with "repeated", even if a scope was activated
	    since. Use it whenever the command may be repeated, as after a
	    lost answer. The same ID with other scopes, another reason or
	    another --expect-epoch is refused (hold_id_conflict, exit 3).
	    At most 128 bytes.
	--expect-epoch N
	    Hold only if the one named scope is at epoch N; otherwise
	    epoch_mismatch (exit 3) and nothing changes.

The result carries the receiver's signed checkpoint that covers the hold
and, per scope, the receiver's signed acknowledgment of it (with --json,
"checkpoint" and "ack", each with "signed_b64"): checkable offline with
the receiver's public key.
`+usageKey+usageDB+usageServer+usageJSON)
}
