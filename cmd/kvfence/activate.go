package main

import (
	"context"
	"fmt"
	"github.com/kvfence/kvfence/internal/api"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
)

// ActivateCommand mints a grant for a held scope at its current epoch and
// opens the scope with it. It is privileged, and never advances the epoch.
type ActivateCommand struct{ m *Main }

// activateJSON is the --json shape of activate (docs/design.md §9), the served
// receiver's response too.
type activateJSON = api.Activate

// Run runs the command.
func (c *ActivateCommand) Run(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("activate")
	cf := commonFlags{name: "activate"}
	cf.register(fs, withDB|withKey)
	var rf remoteFlags
	rf.register(fs)
	scope := fs.String("scope", "", "")
	executor := fs.String("executor", "", "")
	claim := fs.String("claim", "", "")
	request := fs.String("request", "", "")
	ttl := fs.Duration("ttl", kvfence.DefaultGrantTTL, "")
	decision := fs.String("decision", "", "")
	epoch := fs.Uint64("epoch", 0, "")
	assignmentOut := fs.String("assignment-out", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "activate"); err != nil {
		return err
	}
	if !rf.on() {
		if err := cf.requireWriter(); err != nil {
			return err
		}
	}
	if err := require("activate", [2]string{"scope", *scope}, [2]string{"executor", *executor},
		[2]string{"claim", *claim}, [2]string{"request", *request}); err != nil {
		return err
	}
	if *ttl <= 0 {
		return &usageError{msg: "kvfence activate: --ttl must be positive", hint: "kvfence activate -h"}
	}
	if isSet(fs, "epoch") && *epoch == 0 {
		return &usageError{msg: "kvfence activate: --epoch 0 never matches (epochs start at 1)", hint: "kvfence status --scope S"}
	}
	if *assignmentOut == outStdout {
		return &usageError{msg: "kvfence activate: --assignment-out takes a file, not -", hint: "pass --assignment-out FILE (use ./- for a file named -)"}
	}
	reqBytes, err := c.m.readInput(*request)
	if err != nil {
		return fmt.Errorf("read --request: %w", err)
	}
	// The file is created before the grant is minted, so that an existing
	// file or an unwritable directory refuses the activation rather than
	// leave a grant no worker was handed.
	var out *assignmentFile
	if *assignmentOut != "" {
		if out, err = createAssignmentFile(*assignmentOut); err != nil {
			return fmt.Errorf("--assignment-out: %w", err)
		}
		defer out.abandon()
	}
	req := kvfence.ActivateRequest{Scope: *scope, Executor: *executor, Claim: *claim,
		Request: reqBytes, Epoch: *epoch, TTL: *ttl, Decision: *decision}
	g, err := either(&cf, &rf, true, c.m.warn,
		func(r *kvfence.Receiver) (kvfence.Grant, error) { return localAdmin(r).Activate(ctx, req) },
		func(cl *client.Client) (kvfence.Grant, error) {
			a, err := cl.Activate(ctx, req)
			return a.Grant, err
		})
	if err != nil {
		return err
	}
	if out != nil {
		a, err := client.NewAssignment(g, reqBytes)
		if err == nil {
			err = out.commit(a)
		}
		if err != nil {
			return fmt.Errorf("grant %s is active, but --assignment-out %s was not written: %w", g.ID, *assignmentOut, err)
		}
	}
	res := api.ActivateOf(g)
	if cf.json {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "grant\t%s\n", res.Grant)
	fmt.Fprintf(tw, "scope\t%s\n", res.Scope)
	fmt.Fprintf(tw, "epoch\t%d\n", res.Epoch)
	fmt.Fprintf(tw, "executor\t%s\n", res.Executor)
	fmt.Fprintf(tw, "claim\t%s\n", res.Claim)
	fmt.Fprintf(tw, "action\t%s\n", res.Action)
	fmt.Fprintf(tw, "request sha256\t%s\n", res.RequestSHA256)
	fmt.Fprintf(tw, "not before\t%s\n", humanTime(g.NotBefore))
	fmt.Fprintf(tw, "not after\t%s\n", humanTime(g.NotAfter))
	fmt.Fprintf(tw, "decision\t%s\n", orDash(res.Decision))
	fmt.Fprintf(tw, "audit seq\t%d\n", res.AuditSeq)
	return tw.Flush()
}

// Usage prints the command's help.
func (c *ActivateCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence activate --scope S --executor W --claim C --request REQ.cbor
                        [--ttl 15m] [--decision REF] [--epoch N]
                        [--assignment-out FILE] [common arguments]

Mints a grant for exactly one request, bound to the held scope's current
epoch, the executor, the claim, the SHA-256 of the request bytes and a
validity window, and opens the scope with it. Activation never advances the
epoch; hold the scope first if it is open. Prints the grant.
Privileged: requires the receiver's private key.

With --server, the running receiver activates the grant: you need an
identity it lists as an administrator (--admin, or a uid admitted on the
admin socket), not --key, --db or --anchor; the audit entry records that
identity as the actor instead of your local uid; and the validity window is
set by the receiver's clock, from its now for --ttl. --assignment-out is
still written here, on this machine.

Arguments:

	--scope S
	    The held scope to open.
	--executor W
	    The worker identity that alone may submit under the grant.
	--claim C
	    The ledger claim the worker holds.
	--request REQ.cbor
	    The approved request bytes (from "kvfence request build"; "-" for stdin).
	--ttl DURATION
	    The grant's lifetime from now (default 15m). Over the scope's
	    maximum (kvfence status; init and scope create --max-ttl, default
	    24h) it is refused with exit code 3 and nothing is written.
	--decision REF
	    A reference to the review that approved the grant.
	--epoch N
	    Refuse unless the scope is at epoch N: a compare-and-swap against
	    a hold the approver did not see.
	--assignment-out FILE
	    Also write the worker's assignment (scope, epoch, grant, executor,
	    claim, request_b64) as JSON, which client.LoadAssignment reads.
	    The file is created 0600 before the grant is minted; an existing
	    one is refused and nothing is activated. Written and fsynced
	    before activate returns, locally and with --server.
`+usageKey+usageDB+usageServer+usageJSON)
}
