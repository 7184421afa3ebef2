package main

import (
	"context"
	"fmt"
	"github.com/kvfence/kvfence/internal/api"

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
}

// Run runs the command.
func (c *ScopeCreateCommand) Run(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("scope create")
	cf := commonFlags{name: "scope create"}
	cf.register(fs, withDB|withKey)
	var rf remoteFlags
	rf.register(fs)
	scope := fs.String("scope", "", "")
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
	st, err := either(&cf, &rf, true, c.m.warn,
		func(r *kvfence.Receiver) (kvfence.ScopeStatus, error) {
			if err := localAdmin(r).CreateScope(ctx, *scope); err != nil {
				return kvfence.ScopeStatus{}, err
			}
			return r.Status(*scope)
		},
		func(cl *client.Client) (kvfence.ScopeStatus, error) { return cl.CreateScope(ctx, *scope) })
	if err != nil {
		return err
	}
	res := scopeCreateJSON{Scope: st.Scope, Epoch: st.Epoch, Mode: string(st.Mode), CreatedAt: api.Time(st.CreatedAt)}
	if cf.json {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "scope\t%s\n", res.Scope)
	fmt.Fprintf(tw, "epoch\t%d\n", res.Epoch)
	fmt.Fprintf(tw, "mode\t%s\n", res.Mode)
	fmt.Fprintf(tw, "created at\t%s\n", humanTime(st.CreatedAt))
	return tw.Flush()
}

// Usage prints the command's help.
func (c *ScopeCreateCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence scope create --scope S [common arguments]

Creates a protected scope at epoch 1, held, with no active grant.
Privileged: requires the receiver's private key.

Arguments:

	--scope S
	    The scope's name, e.g. configmap/prod/backup-policy.
`+usageKey+usageDB+usageServer+usageJSON)
}
