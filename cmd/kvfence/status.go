package main

import (
	"context"
	"fmt"
	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/api"
	"sort"
	"strings"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/separation"
	"github.com/kvfence/kvfence/kvfence"
)

// StatusCommand prints the control state of every scope, or of one. It
// opens the database read-only.
type StatusCommand struct{ m *Main }

// statusJSON is the --json shape of status (docs/design.md §9).
// AnchorChecked says whether the database was checked against its anchor
// (--anchor given); without that check the state shown may be a restored
// copy's. AnchorDamage describes a damaged slot of the anchor file, or is
// null.
type statusJSON struct {
	Scopes        []scopeStatusJSON `json:"scopes"`
	AuditSeq      uint64            `json:"audit_seq"`
	AnchorChecked bool              `json:"anchor_checked"`
	AnchorDamage  *anchorDamageJSON `json:"anchor_damage"`
	// The file anchor's separation facts (null for an etcd store or
	// anchor, without --anchor, or over --server).
	separationJSON
	// Witnesses are the --witness witnesses, each with its latest
	// cosigned size of this receiver as the check at open learned it
	// (empty without witnesses; null over --server, whose receiver's
	// witnesses are its own), and WitnessQuorum is K (0 without).
	Witnesses     []witnessStatusJSON `json:"witnesses"`
	WitnessQuorum int                 `json:"witness_quorum"`
}

// witnessStatusJSON is one witness in status: CosignedSize is null when
// the witness did not answer (or answered nothing this receiver could
// use), else the size of the largest tree of this receiver it cosigned.
type witnessStatusJSON struct {
	Name         string  `json:"name"`
	CosignedSize *uint64 `json:"cosigned_size"`
}

// witnessStatusOf converts the receiver's witnesses to their JSON shape:
// an empty list, never null, for none.
func witnessStatusOf(ws []kvfence.WitnessStatus) []witnessStatusJSON {
	out := []witnessStatusJSON{}
	for _, w := range ws {
		j := witnessStatusJSON{Name: w.Name}
		if w.Known {
			size := w.Size
			j.CosignedSize = &size
		}
		out = append(out, j)
	}
	return out
}

// scopeStatusJSON is one scope's control state. Its four timestamps are
// different events and are never collapsed into one. Denials counts every
// denial in the scope by reason (an empty object when there are none);
// stale_rejections counts only the stale-authority ones.
type scopeStatusJSON = api.ScopeStatus

// Run runs the command.
func (c *StatusCommand) Run(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("status")
	cf := commonFlags{name: "status"}
	cf.register(fs, withDB)
	var rf remoteFlags
	rf.register(fs)
	scope := fs.String("scope", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "status"); err != nil {
		return err
	}
	if isSet(fs, "scope") && *scope == "" {
		return &usageError{msg: "kvfence status: --scope is empty", hint: "kvfence status -h"}
	}
	var damage *audit.SlotDamage
	var witnesses []kvfence.WitnessStatus
	var quorum int
	got, err := either(&cf, &rf, false, c.m.warn,
		func(r *kvfence.Receiver) (client.Status, error) {
			st := client.Status{AuditSeq: r.Head().Seq}
			damage = r.AnchorDamage()
			witnesses, quorum = r.Witnesses()
			var err error
			if *scope != "" {
				s, err := r.Status(*scope)
				st.Scopes = []kvfence.ScopeStatus{s}
				return st, err
			}
			st.Scopes, err = r.Scopes()
			return st, err
		},
		func(cl *client.Client) (client.Status, error) { return cl.Status(ctx, *scope) })
	if err != nil {
		return err
	}
	scopes := got.Scopes
	// A served receiver checked its anchor when it opened.
	out := statusJSON{Scopes: []scopeStatusJSON{}, AuditSeq: got.AuditSeq, AnchorChecked: cf.anchor != "" || rf.on(),
		AnchorDamage: anchorDamageOf(damage)}
	for _, st := range scopes {
		out.Scopes = append(out.Scopes, api.ScopeStatusOf(st))
	}
	var sep *separation.Facts
	if !rf.on() {
		sep = cf.anchorSeparation()
	}
	out.separationJSON = separationOf(sep)
	if !rf.on() {
		out.Witnesses, out.WitnessQuorum = witnessStatusOf(witnesses), quorum
	}
	if cf.json {
		return writeJSON(c.m.Stdout, out)
	}
	tw := newTable(c.m.Stdout)
	if len(scopes) == 0 {
		fmt.Fprintln(tw, "no scopes")
		fmt.Fprintln(tw)
	}
	for _, st := range scopes {
		// A blank line after each scope ends its alignment block.
		fmt.Fprintf(tw, "scope\t%s\n", st.Scope)
		fmt.Fprintf(tw, "epoch\t%d\n", st.Epoch)
		fmt.Fprintf(tw, "mode\t%s\n", st.Mode)
		fmt.Fprintf(tw, "active grant\t%s\n", orDash(st.ActiveGrant))
		if g := st.Grant; g != nil {
			fmt.Fprintf(tw, "grant executor\t%s\n", g.Executor)
			fmt.Fprintf(tw, "grant claim\t%s\n", g.Claim)
			fmt.Fprintf(tw, "grant action\t%s\n", g.Action)
			fmt.Fprintf(tw, "grant expires\t%s\n", expiryText(*g, st.GrantExpired))
		}
		fmt.Fprintf(tw, "max grant ttl\t%s\n", orDash(maxTTLText(st.MaxGrantTTL)))
		fmt.Fprintf(tw, "activated at\t%s\n", humanTime(st.ActivatedAt))
		fmt.Fprintf(tw, "hold requested at\t%s\n", humanTime(st.HoldRequestedAt))
		fmt.Fprintf(tw, "hold committed at\t%s\n", humanTime(st.HoldCommittedAt))
		fmt.Fprintf(tw, "last stale rejection at\t%s\n", humanTime(st.LastStaleRejectionAt))
		fmt.Fprintf(tw, "stale rejections\t%d\n", st.StaleRejections)
		fmt.Fprintf(tw, "denials\t%s\n", denialsText(st.Denials))
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "audit seq\t%d\n", out.AuditSeq)
	if out.AnchorChecked {
		fmt.Fprintf(tw, "anchor\tchecked\n")
	} else {
		fmt.Fprintf(tw, "anchor\tnot checked (no --anchor)\n")
	}
	if d := damage; d != nil {
		fmt.Fprintf(tw, "anchor damage\t%v\n", d)
	}
	printSeparation(tw, sep)
	if len(out.Witnesses) > 0 {
		fmt.Fprintf(tw, "witness quorum\t%d of %d\n", out.WitnessQuorum, len(out.Witnesses))
	}
	for _, w := range out.Witnesses {
		size := "unknown (no answer)"
		if w.CosignedSize != nil {
			size = fmt.Sprintf("cosigned size %d", *w.CosignedSize)
		}
		fmt.Fprintf(tw, "witness %s\t%s\n", w.Name, size)
	}
	return tw.Flush()
}

// denialsText formats denial counts as "reason=N ..." sorted by reason,
// or "-".
func denialsText(d map[kvfence.Reason]uint64) string {
	if len(d) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(d))
	for k, v := range d {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// Usage prints the command's help.
func (c *StatusCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence status [--scope S] [common arguments]

Prints the control state of every scope, or of scope S: epoch, mode, active
grant (its executor, claim, action and expiry, "(expired)" once the
receiver's clock is past it; with --json, "grant", or null when held), the
scope's maximum grant lifetime, the four distinct timestamps (activated, hold requested, hold
committed, last stale rejection), the stale-rejection count and the denial
counts by reason, followed by the audit chain's head seq and whether the
database was checked against its anchor. Opens the database read-only.
Pass --anchor (or set KVFENCE_ANCHOR) so that a restored or rewritten
database is refused with exit code 4 instead of being described. A damaged
slot of the anchor file is shown ("anchor damage"; with --json,
"anchor_damage", as in verify-chain) and printed as a warning on stderr.
With a database file and an anchor file, it shows whether both are on the
same file system ("anchor same device"; with --json,
"anchor_same_device") and owned by the same uid ("anchor same owner";
"anchor_same_owner"): facts, not a verdict (null where they do not apply).
With --witness, it shows K ("witness quorum"; "witness_quorum") and each
witness's latest cosigned size of this receiver, as the check at open
learned it ("witness NAME"; "witnesses": [{"name","cosigned_size"}],
cosigned_size null for a witness that did not answer).

Arguments:

	--scope S
	    Show only this scope.
`+usageDBRead+usageServer+usageJSON)
}
