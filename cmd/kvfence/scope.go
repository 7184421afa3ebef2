package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/kvfence/kvfence/internal/api"
	"strings"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
)

// ScopeCreateCommand creates a protected scope at epoch 1, held, with no
// active grant. It is privileged.
type ScopeCreateCommand struct{ m *Main }

// scopeCreateJSON is the --json shape of scope create.
type scopeCreateJSON struct {
	Scope     string  `json:"scope"`
	Epoch     uint64  `json:"epoch"`
	Mode      string  `json:"mode"`
	CreatedAt *string `json:"created_at"`
	// MaxGrantTTL is the scope's maximum grant lifetime ("24h0m0s"), or
	// "" when a served receiver did not say.
	MaxGrantTTL string `json:"max_grant_ttl"`
}

// Run runs the command.
func (c *ScopeCreateCommand) Run(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("scope create")
	cf := commonFlags{name: "scope create"}
	cf.register(fs, withDB|withKey)
	var rf remoteFlags
	rf.register(fs)
	scope := fs.String("scope", "", "")
	maxTTL := fs.Duration("max-ttl", 0, "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "scope create"); err != nil {
		return err
	}
	if !rf.on() {
		if err := cf.requireWriter(); err != nil {
			return err
		}
	}
	if err := require("scope create", [2]string{"scope", *scope}); err != nil {
		return err
	}
	if isSet(fs, "max-ttl") && *maxTTL <= 0 {
		return &usageError{msg: "kvfence scope create: --max-ttl must be positive", hint: "kvfence scope create -h"}
	}
	st, err := either(&cf, &rf, true, c.m.warn,
		func(r *kvfence.Receiver) (kvfence.ScopeStatus, error) {
			return localAdmin(r).CreateScopeWith(ctx, *scope, kvfence.ScopeOptions{MaxGrantTTL: *maxTTL})
		},
		func(cl *client.Client) (kvfence.ScopeStatus, error) {
			return cl.CreateScopeWith(ctx, *scope, kvfence.ScopeOptions{MaxGrantTTL: *maxTTL})
		})
	if err != nil {
		return err
	}
	res := scopeCreateJSON{Scope: st.Scope, Epoch: st.Epoch, Mode: string(st.Mode), CreatedAt: api.Time(st.CreatedAt),
		MaxGrantTTL: maxTTLText(st.MaxGrantTTL)}
	if cf.json {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "scope\t%s\n", res.Scope)
	fmt.Fprintf(tw, "epoch\t%d\n", res.Epoch)
	fmt.Fprintf(tw, "mode\t%s\n", res.Mode)
	fmt.Fprintf(tw, "created at\t%s\n", humanTime(st.CreatedAt))
	fmt.Fprintf(tw, "max grant ttl\t%s\n", orDash(res.MaxGrantTTL))
	return tw.Flush()
}

// Usage prints the command's help.
func (c *ScopeCreateCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence scope create --scope S [--max-ttl DURATION] [common arguments]

Creates a protected scope at epoch 1, held, with no active grant.
Privileged: requires the receiver's private key.

Arguments:

	--scope S
	    The scope's name, e.g. configmap/prod/backup-policy.
	--max-ttl DURATION
	    The longest a grant of this scope may stay valid after its
	    activation (default: the receiver's maximum, set by init
	    --max-ttl). It may tighten the receiver's maximum, never exceed
	    it; it is fixed when the scope is created, recorded in the scope's
	    state (covered by every signed checkpoint) and in the audit chain.
`+usageKey+usageDB+usageServer+usageJSON)
}

// maxTTLText formats a maximum grant lifetime, "" when it is unknown.
func maxTTLText(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return d.String()
}

// ScopeListCommand lists the scopes with their epoch, mode, active grant
// and maximum grant lifetime. It opens the database read-only.
type ScopeListCommand struct{ m *Main }

// scopeListJSON is the --json shape of scope list: {"scopes":[...]} by
// name. active_grant is "" for a held scope; grant_not_after is null then.
type scopeListJSON struct {
	// Scopes are the scopes, ordered by name.
	Scopes []scopeListEntryJSON `json:"scopes"`
	// MaxGrantTTL is the receiver-wide maximum ("24h0m0s"), or "" when
	// a served receiver was asked.
	MaxGrantTTL string `json:"max_grant_ttl"`
}

// scopeListEntryJSON is one scope of scope list.
type scopeListEntryJSON struct {
	// Scope is the scope's name.
	Scope string `json:"scope"`
	// Epoch is the scope's current epoch.
	Epoch uint64 `json:"epoch"`
	// Mode is "held" or "open".
	Mode string `json:"mode"`
	// ActiveGrant is the active grant's id, "" when held.
	ActiveGrant string `json:"active_grant"`
	// GrantNotAfter is when the active grant stops being valid, or null.
	GrantNotAfter *string `json:"grant_not_after"`
	// GrantExpired says the receiver's clock is past GrantNotAfter.
	GrantExpired bool `json:"grant_expired"`
	// MaxGrantTTL is the scope's maximum grant lifetime ("24h0m0s").
	MaxGrantTTL string `json:"max_grant_ttl"`
}

// Run runs the command.
func (c *ScopeListCommand) Run(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("scope list")
	cf := commonFlags{name: "scope list"}
	cf.register(fs, withDB)
	var rf remoteFlags
	rf.register(fs)
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "scope list"); err != nil {
		return err
	}
	var receiverMax time.Duration
	scopes, err := either(&cf, &rf, false, c.m.warn,
		func(r *kvfence.Receiver) ([]kvfence.ScopeStatus, error) {
			var err error
			if receiverMax, err = r.MaxGrantTTL(); err != nil {
				return nil, err
			}
			return r.Scopes()
		},
		func(cl *client.Client) ([]kvfence.ScopeStatus, error) {
			st, err := cl.Status(ctx, "")
			return st.Scopes, err
		})
	if err != nil {
		return err
	}
	out := scopeListJSON{Scopes: []scopeListEntryJSON{}, MaxGrantTTL: maxTTLText(receiverMax)}
	for _, st := range scopes {
		e := scopeListEntryJSON{Scope: st.Scope, Epoch: st.Epoch, Mode: string(st.Mode), ActiveGrant: st.ActiveGrant,
			GrantExpired: st.GrantExpired, MaxGrantTTL: maxTTLText(st.MaxGrantTTL)}
		if st.Grant != nil {
			e.GrantNotAfter = api.Time(st.Grant.NotAfter)
		}
		out.Scopes = append(out.Scopes, e)
	}
	if cf.json {
		return writeJSON(c.m.Stdout, out)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintln(tw, "SCOPE\tEPOCH\tMODE\tACTIVE GRANT\tGRANT EXPIRES\tMAX GRANT TTL")
	for _, e := range out.Scopes {
		expires := "-"
		if e.GrantNotAfter != nil {
			expires = *e.GrantNotAfter
			if e.GrantExpired {
				expires += " (expired)"
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", e.Scope, e.Epoch, e.Mode, orDash(e.ActiveGrant), expires, orDash(e.MaxGrantTTL))
	}
	if out.MaxGrantTTL != "" {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "receiver max grant ttl\t%s\n", out.MaxGrantTTL)
	}
	return tw.Flush()
}

// Usage prints the command's help.
func (c *ScopeListCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence scope list [common arguments]

Lists the scopes by name: epoch, mode, active grant and when it expires
("(expired)" once the receiver's clock is past it), and the scope's maximum
grant lifetime, followed by the receiver-wide maximum. Opens the database
read-only; "kvfence status" shows a scope in full.

Arguments:

`+usageDBRead+usageServer+usageJSON)
}

// subcommand is one subcommand of a command group such as "scope".
type subcommand struct {
	name string
	cmd  command
}

// commandGroup is a command such as "scope" whose first argument names one
// of its subcommands. Its usage is theirs, one after the other.
type commandGroup struct {
	m    *Main
	name string
	subs []subcommand
}

// lookup finds the subcommand args name, returning the arguments left for
// it. For help, a group without a subcommand (or with -h) is the group.
func (g *commandGroup) lookup(args []string, forHelp bool) (command, []string, error) {
	if (len(args) == 0 && forHelp) || (len(args) > 0 && isHelpFlag(args[0])) {
		return g, args, nil
	}
	var names []string
	for _, s := range g.subs {
		names = append(names, s.name)
	}
	list := strings.Join(names, " or ")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return nil, nil, &usageError{msg: fmt.Sprintf("kvfence %s: missing subcommand (%s)", g.name, list),
			hint: fmt.Sprintf("kvfence %s -h", g.name)}
	}
	for _, s := range g.subs {
		if s.name == args[0] {
			return s.cmd, args[1:], nil
		}
	}
	msg := fmt.Sprintf("kvfence %s %s: unknown subcommand (want %s)", g.name, args[0], list)
	if near := closest(args[0], names); near != "" {
		msg = fmt.Sprintf("kvfence %s %s: unknown subcommand (did you mean %s?)", g.name, args[0], near)
	}
	return nil, nil, &usageError{msg: msg, hint: fmt.Sprintf("kvfence %s -h", g.name)}
}

// Run is reached only for help: lookup returns the subcommand otherwise.
func (g *commandGroup) Run(ctx context.Context, args []string) error {
	g.Usage()
	return flag.ErrHelp
}

// Usage prints the usage of every subcommand.
func (g *commandGroup) Usage() {
	for i, s := range g.subs {
		if i > 0 {
			fmt.Fprintln(g.m.Stderr)
		}
		s.cmd.Usage()
	}
}
