package main

import (
	"context"
	"fmt"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// GrantExtendCommand moves an active grant's end of validity later, within
// its scope's maximum from the grant's activation. It is privileged.
type GrantExtendCommand struct{ m *Main }

// grantExtendJSON is the --json shape of grant extend, the served
// receiver's response too: activate's shape with created_at.
type grantExtendJSON = api.GrantExtend

// Run runs the command.
func (c *GrantExtendCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("grant extend")
	cf := commonFlags{name: "grant extend"}
	cf.register(fs, withDB|withKey)
	var rf remoteFlags
	rf.register(fs)
	grant := fs.String("grant", "", "")
	ttl := fs.Duration("ttl", 0, "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "grant extend"); err != nil {
		return err
	}
	if !rf.on() {
		if err := cf.requireWriter(); err != nil {
			return err
		}
	}
	if err := require("grant extend", [2]string{"grant", *grant}); err != nil {
		return err
	}
	if *ttl <= 0 {
		return &usageError{msg: "kvfence grant extend: --ttl is required and must be positive", hint: "kvfence grant extend -h"}
	}
	req := kvfence.ExtendRequest{Grant: *grant, TTL: *ttl}
	g, err := either(&cf, &rf, true, c.m.warn,
		func(r *kvfence.Receiver) (kvfence.Grant, error) { return localAdmin(r).ExtendGrant(ctx, req) },
		func(cl *client.Client) (kvfence.Grant, error) { return cl.ExtendGrant(ctx, req) })
	if err != nil {
		return err
	}
	res := api.GrantExtendOf(g)
	if cf.json {
		return writeJSON(c.m.Stdout, grantExtendJSON(res))
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "grant\t%s\n", res.Grant)
	fmt.Fprintf(tw, "scope\t%s\n", res.Scope)
	fmt.Fprintf(tw, "epoch\t%d\n", res.Epoch)
	fmt.Fprintf(tw, "executor\t%s\n", res.Executor)
	fmt.Fprintf(tw, "created at\t%s\n", humanTime(g.CreatedAt))
	fmt.Fprintf(tw, "not after\t%s\n", humanTime(g.NotAfter))
	return tw.Flush()
}

// Usage prints the command's help.
func (c *GrantExtendCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence grant extend --grant G --ttl DURATION [common arguments]

Moves the end of validity of a scope's active grant to now plus --ttl, on
the receiver's clock, and records a grant_extended audit entry. The end is
set, not added to: repeating the command with the same --ttl keeps the
grant valid for that long from the moment of the repeat.

The new end may not be later than the grant's activation time plus its
scope's maximum grant ttl (kvfence scope list; init and scope create
--max-ttl, default 24h): the bound counts from the activation, so no
number of extensions keeps one approval usable for longer. A longer task
is approved and activated again.

Refused with exit code 3, nothing written, when the grant is not its
scope's active grant (grant_not_active: unknown, revoked, or the scope was
held or activated again since: an extension never revives a grant a hold
fenced), when it has expired (grant_expired), or when the new end would
pass the maximum (ttl_too_long). A new end not later than the current
one is invalid_window (exit code 1).
Privileged: requires the receiver's private key.

Arguments:

	--grant G
	    The active grant's id (kvfence status shows each scope's).
	--ttl DURATION
	    How long the grant stays valid from now, e.g. 30m.
`+usageKey+usageDB+usageServer+usageJSON)
}
