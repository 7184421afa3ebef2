package main

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/kvfence/kvfence/kvfence"
)

// EnvelopeBuildCommand wraps approved request bytes, unchanged, with the
// authority a worker claims to hold: scope, epoch, grant, executor, claim.
// It checks nothing against a receiver; the receiver checks at submit.
type EnvelopeBuildCommand struct{ m *Main }

// envelopeBuildJSON is the --json shape of envelope build.
type envelopeBuildJSON struct {
	Out           string `json:"out"`
	Scope         string `json:"scope"`
	Epoch         uint64 `json:"epoch"`
	Grant         string `json:"grant"`
	Executor      string `json:"executor"`
	Claim         string `json:"claim"`
	RequestSHA256 string `json:"request_sha256"`
	Bytes         int    `json:"bytes"`
}

// Run runs the command.
func (c *EnvelopeBuildCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("envelope build")
	cf := commonFlags{name: "envelope build"}
	cf.register(fs, 0)
	scope := fs.String("scope", "", "")
	epoch := fs.Uint64("epoch", 0, "")
	grant := fs.String("grant", "", "")
	executor := fs.String("executor", "", "")
	claim := fs.String("claim", "", "")
	request := fs.String("request", "", "")
	out := fs.String("out", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	if err := require("envelope build", [2]string{"scope", *scope}); err != nil {
		return err
	}
	if !isSet(fs, "epoch") {
		return missingFlag("envelope build", "epoch", "")
	}
	if err := require("envelope build", [2]string{"grant", *grant}, [2]string{"executor", *executor},
		[2]string{"claim", *claim}, [2]string{"request", *request}, [2]string{"out", *out}); err != nil {
		return err
	}
	if err := checkOut("envelope build", *out, cf.json); err != nil {
		return err
	}
	reqBytes, err := c.m.readInput(*request)
	if err != nil {
		return fmt.Errorf("read --request: %w", err)
	}
	b, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: kvfence.WireVersion, Scope: *scope, Epoch: *epoch,
		Grant: *grant, Executor: *executor, Claim: *claim, Request: reqBytes})
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	summary, err := c.m.writeOut(*out, b, 0o644)
	if err != nil {
		return err
	}
	sum := kvfence.RequestDigest(reqBytes)
	res := envelopeBuildJSON{Out: *out, Scope: *scope, Epoch: *epoch, Grant: *grant, Executor: *executor,
		Claim: *claim, RequestSHA256: hex.EncodeToString(sum[:]), Bytes: len(b)}
	if cf.json {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(summary)
	fmt.Fprintf(tw, "envelope\t%s (%d bytes)\n", res.Out, res.Bytes)
	fmt.Fprintf(tw, "scope\t%s\n", shownName(res.Scope))
	fmt.Fprintf(tw, "epoch\t%d\n", res.Epoch)
	fmt.Fprintf(tw, "grant\t%s\n", shownName(res.Grant))
	fmt.Fprintf(tw, "executor\t%s\n", shownName(res.Executor))
	fmt.Fprintf(tw, "claim\t%s\n", shownName(res.Claim))
	fmt.Fprintf(tw, "request sha256\t%s\n", res.RequestSHA256)
	return tw.Flush()
}

// Usage prints the command's help.
func (c *EnvelopeBuildCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence envelope build --scope S --epoch N --grant G --executor W --claim C
                              --request REQ.cbor --out ENV.cbor [--json]

Wraps the approved request bytes, unchanged, in a canonical CBOR envelope
that names the authority the worker claims: scope, epoch, grant, executor
and claim. Nothing is checked here; the receiver decides at submit.

Arguments:

	--scope S, --epoch N, --grant G, --executor W, --claim C
	    The authority the envelope claims (as printed by "kvfence activate").
	--request REQ.cbor
	    The approved request bytes ("-" for stdin).
	--out ENV.cbor
	    The file to create (mode 0644); an existing file is never replaced.
	    "-" writes the bytes to stdout, and the summary to stderr.
`+usageJSON)
}

// EnvelopeShowCommand decodes an envelope file and prints the authority it
// claims and the request it carries.
type EnvelopeShowCommand struct{ m *Main }

// Run runs the command.
func (c *EnvelopeShowCommand) Run(ctx context.Context, args []string) error {
	path, b, asJSON, err := c.m.showInput("envelope show", c.Usage, args)
	if err != nil {
		return err
	}
	env, err := decodeEnvelope("envelope show", path, b)
	if err != nil {
		return err
	}
	req, err := kvfence.DecodeRequest(env.Request, 0)
	if err != nil {
		return &usageError{msg: fmt.Sprintf("kvfence envelope show: %s is a well-formed envelope, but the request it "+
			"carries is not (a submit of it is denied malformed_request): %v", path, err), err: err}
	}
	res := envelopeShowJSON{Kind: "envelope", Bytes: len(b), V: env.V, Scope: env.Scope, Epoch: env.Epoch,
		Grant: env.Grant, Executor: env.Executor, Claim: env.Claim, Request: requestShowOf(req, env.Request)}
	if asJSON {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "envelope\t%s\n", path)
	fmt.Fprintf(tw, "bytes\t%d\n", res.Bytes)
	fmt.Fprintf(tw, "version\t%d\n", res.V)
	fmt.Fprintf(tw, "scope\t%s\n", shownName(res.Scope))
	fmt.Fprintf(tw, "epoch\t%d\n", res.Epoch)
	fmt.Fprintf(tw, "grant\t%s\n", shownName(res.Grant))
	fmt.Fprintf(tw, "executor\t%s\n", shownName(res.Executor))
	fmt.Fprintf(tw, "claim\t%s\n", shownName(res.Claim))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.m.Stdout, "request (carried unchanged)")
	return printRequest(c.m.Stdout, "  ", res.Request)
}

// Usage prints the command's help.
func (c *EnvelopeShowCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence envelope show FILE [--json]

Decodes the envelope in FILE ("-" for stdin) strictly, as the receiver
does, and prints the authority it claims (scope, epoch, grant, executor,
claim) and the request it carries, decoded as "kvfence request show"
prints it, with the request's SHA-256. It checks nothing against a
receiver. A request given instead is named as one (exit code 2), as is
any file that is not a well-formed envelope.

With --json: {"kind":"envelope","bytes","v","scope","epoch","grant",
"executor","claim","request":{...as request show...}}.

Arguments:

`+usageJSON)
}
