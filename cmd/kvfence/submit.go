package main

import (
	"context"
	"fmt"
	"github.com/kvfence/kvfence/internal/api"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
)

// SubmitCommand submits an envelope as the worker named by --as, which
// stands in for the identity an embedding application would authenticate
// on its own channel; it is never read from the envelope. A denial prints
// the result and exits with code 3.
type SubmitCommand struct{ m *Main }

// submitJSON is the --json shape of submit (docs/design.md §9), the served
// receiver's response too. Reason and detail are empty unless the outcome is
// denied; fields a denial could not know are zero.
type submitJSON = api.Submit

// Run runs the command.
func (c *SubmitCommand) Run(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("submit")
	cf := commonFlags{name: "submit"}
	cf.register(fs, withDB|withKey)
	var rf remoteFlags
	rf.register(fs)
	as := fs.String("as", "", "")
	envelope := fs.String("envelope", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "submit"); err != nil {
		return err
	}
	if rf.on() {
		if isSet(fs, "as") {
			return &usageError{msg: "kvfence submit: --as does not go with --server: the identity is your certificate's",
				hint: "drop --as; pass the worker's certificate as --tls-cert and --tls-key"}
		}
	} else {
		if err := cf.requireWriter(); err != nil {
			return err
		}
		if err := require("submit", [2]string{"as", *as}); err != nil {
			return err
		}
	}
	if err := require("submit", [2]string{"envelope", *envelope}); err != nil {
		return err
	}
	env, err := c.m.readInput(*envelope)
	if err != nil {
		return fmt.Errorf("read --envelope: %w", err)
	}
	res, err := either(&cf, &rf, true, c.m.warn,
		func(r *kvfence.Receiver) (kvfence.Result, error) { return r.Submit(ctx, *as, env) },
		func(cl *client.Client) (kvfence.Result, error) { return cl.Submit(ctx, env) })
	if err != nil {
		return err
	}
	out := api.SubmitOf(res)
	if cf.json {
		err = writeJSON(c.m.Stdout, out)
	} else {
		err = printSubmit(c.m, out)
	}
	if err != nil {
		return err
	}
	if res.Outcome == kvfence.Denied {
		return &deniedError{reason: res.Reason, detail: res.Detail}
	}
	return nil
}

func printSubmit(m *Main, out submitJSON) error {
	tw := newTable(m.Stdout)
	fmt.Fprintf(tw, "outcome\t%s\n", out.Outcome)
	if out.Reason != "" {
		fmt.Fprintf(tw, "reason\t%s\n", out.Reason)
		fmt.Fprintf(tw, "detail\t%s\n", orDash(out.Detail))
	}
	fmt.Fprintf(tw, "scope\t%s\n", orDash(out.Scope))
	fmt.Fprintf(tw, "epoch\t%d\n", out.Epoch)
	fmt.Fprintf(tw, "grant\t%s\n", orDash(out.Grant))
	fmt.Fprintf(tw, "action\t%s\n", orDash(out.Action))
	fmt.Fprintf(tw, "target\t%s\n", orDash(out.Target))
	if out.Revision != 0 {
		fmt.Fprintf(tw, "revision\t%d\n", out.Revision)
	}
	fmt.Fprintf(tw, "audit seq\t%d\n", out.AuditSeq)
	if out.ReceiptSeq != 0 {
		// The caller's own request, applied before: a stale retry, not a
		// lost effect.
		fmt.Fprintf(tw, "receipt seq\t%d\n", out.ReceiptSeq)
	}
	return tw.Flush()
}

// Usage prints the command's help.
func (c *SubmitCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence submit --as W --envelope ENV.cbor [common arguments]

Submits an envelope to the receiver as worker W and prints the decision:
applied, already_applied, or denied with a stable reason code. Every
decision is recorded in the audit chain.

--as stands in for the identity an embedding application authenticates on
its own channel (mTLS, a local socket's peer); the receiver never takes it
from the envelope, and denies an envelope whose executor differs.

The command stands in for the embedding service, which runs the receiver:
it needs the receiver's private key (--key), because every decision is
covered by a checkpoint signed with it and written to the anchor before the
result is returned. Workers never hold that key.

With --server, the command is the worker itself, not the embedding
service: the envelope goes to the running receiver, which takes the
identity from your client certificate's SPIFFE ID (--tls-cert, --tls-key),
so --as is refused, and --key, --db and --anchor are not taken; the
receiver signs and anchors the decision before it answers. A denial is
exit 3 as it is locally.

Exit codes: 0 applied or already_applied, 3 denied, 4 the database or its
anchor failed the integrity check (nothing was decided or changed).

Arguments:

	--as W
	    The worker identity submitting the envelope (not with --server).
	--envelope ENV.cbor
	    The envelope (from "kvfence envelope build"; "-" for stdin).
`+usageKey+usageDB+usageServer+usageJSON)
}
