package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"

	"github.com/kvfence/kvfence/kvfence"
)

// RequestBuildCommand encodes an approved request as canonical CBOR: the
// exact bytes an approver reviews and a grant binds by their SHA-256.
type RequestBuildCommand struct{ m *Main }

// requestBuildJSON is the --json shape of request build.
type requestBuildJSON struct {
	Out           string `json:"out"`
	Action        string `json:"action"`
	Target        string `json:"target"`
	RequestSHA256 string `json:"request_sha256"`
	Bytes         int    `json:"bytes"`
}

// Run runs the command.
func (c *RequestBuildCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("request build")
	cf := commonFlags{name: "request build"}
	cf.register(fs, 0)
	action := fs.String("action", "", "")
	target := fs.String("target", "", "")
	expectRevision := fs.Uint64("expect-revision", 0, "")
	expectValue := fs.String("expect-value", "", "")
	set := fs.String("set", "", "")
	setFile := fs.String("set-file", "", "")
	patchFile := fs.String("patch-file", "", "")
	out := fs.String("out", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	if err := require("request build", [2]string{"action", *action}, [2]string{"target", *target},
		[2]string{"out", *out}); err != nil {
		return err
	}
	if err := checkOut("request build", *out, cf.json); err != nil {
		return err
	}
	req := &kvfence.Request{V: kvfence.WireVersion, Action: *action, Target: *target}
	if isSet(fs, "expect-revision") {
		req.ExpectRevision = expectRevision
	}
	if isSet(fs, "expect-value") {
		v := []byte(*expectValue)
		req.ExpectValue = &v
	}
	var mutations int
	for _, name := range []string{"set", "set-file", "patch-file"} {
		if isSet(fs, name) {
			mutations++
		}
	}
	if mutations != 1 {
		return &usageError{msg: "kvfence request build: exactly one of --set, --set-file or --patch-file is required",
			hint: "kvfence request build -h"}
	}
	switch {
	case isSet(fs, "set"):
		v := []byte(*set)
		req.Set = &v
	case isSet(fs, "set-file"):
		v, err := c.m.readInput(*setFile)
		if err != nil {
			return fmt.Errorf("read --set-file: %w", err)
		}
		req.Set = &v
	default:
		p, err := c.m.readInput(*patchFile)
		if err != nil {
			return fmt.Errorf("read --patch-file: %w", err)
		}
		// A patch the receiver would refuse is a mistake in the command
		// line's input, caught before anyone reviews or approves it.
		if err := kvfence.ValidatePatch(p); err != nil {
			return &usageError{msg: fmt.Sprintf("kvfence request build: --patch-file: %v", err),
				hint: "kvfence request build -h", err: err}
		}
		// The patch is carried byte for byte: what the approver reviewed.
		req.Patch = p
	}
	b, err := kvfence.EncodeRequest(req)
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
	sum := kvfence.RequestDigest(b)
	res := requestBuildJSON{Out: *out, Action: req.Action, Target: req.Target,
		RequestSHA256: hex.EncodeToString(sum[:]), Bytes: len(b)}
	if cf.json {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(summary)
	fmt.Fprintf(tw, "request\t%s (%d bytes)\n", res.Out, res.Bytes)
	fmt.Fprintf(tw, "action\t%s\n", res.Action)
	fmt.Fprintf(tw, "target\t%s\n", res.Target)
	fmt.Fprintf(tw, "request sha256\t%s\n", res.RequestSHA256)
	return tw.Flush()
}

// Usage prints the command's help.
func (c *RequestBuildCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence request build --action A --target K [--expect-revision N] [--expect-value V]
                             (--set V | --set-file F | --patch-file F) --out REQ.cbor [--json]

Encodes an approved request as canonical CBOR and writes it to a new file.
These exact bytes are what an approver reviews and what a grant binds by
their SHA-256; they are carried unchanged inside every envelope.

Arguments:

	--action A
	    The logical action id, unique within the scope.
	--target K
	    The target the request changes.
	--expect-revision N
	    Precondition: the target is at revision N.
	--expect-value V
	    Precondition: the target's value is exactly V.
	--set V
	    Replace the value with V.
	--set-file F
	    Replace the value with the bytes of F ("-" for stdin).
	--patch-file F
	    Apply the RFC 6902 JSON Patch in F, byte for byte ("-" for stdin).
	    The patch must be strictly well formed: an array of operations,
	    each with exactly the members RFC 6902 defines for its op, no
	    member name twice in any object, and valid RFC 6901 pointers.
	--out REQ.cbor
	    The file to create (mode 0644); an existing file is never replaced.
	    "-" writes the bytes to stdout, and the summary to stderr.
`+usageJSON)
}

// RequestShowCommand decodes a request file and prints exactly what it
// asks for, and the SHA-256 a grant for it binds: what an approver
// reviews before approving it.
type RequestShowCommand struct{ m *Main }

// Run runs the command.
func (c *RequestShowCommand) Run(ctx context.Context, args []string) error {
	path, b, asJSON, err := c.m.showInput("request show", c.Usage, args)
	if err != nil {
		return err
	}
	req, err := decodeRequest("request show", path, b)
	if err != nil {
		return err
	}
	res := requestShowOf(req, b)
	if asJSON {
		return writeJSON(c.m.Stdout, res)
	}
	fmt.Fprintf(c.m.Stdout, "request %s\n", path)
	return printRequest(c.m.Stdout, "", res)
}

// Usage prints the command's help.
func (c *RequestShowCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence request show FILE [--json]

Decodes the request in FILE ("-" for stdin) strictly, as the receiver
does, and prints all of it: action, target, preconditions, the value to
set (as text when it is printable, else in hex) or the JSON Patch
(pretty-printed), and the request's SHA-256, the digest a grant for it
binds. An envelope given instead is named as one (exit code 2), as is
any file that is not a well-formed request.

With --json: {"kind":"request","bytes","request_sha256","v","action",
"target","expect_revision","expect_value","mutation":"set|patch","set",
"patch","patch_bytes"}; a value is {"text","hex","bytes"}, text null
unless UTF-8, and patch is the patch as JSON (null for set).

Arguments:

`+usageJSON)
}

// showInput parses a show command's flags and reads the FILE it names: its
// path, its bytes and whether --json was given.
func (m *Main) showInput(name string, usage func(), args []string) (path string, b []byte, asJSON bool, err error) {
	fs := newFlagSet(name)
	cf := commonFlags{name: name}
	cf.register(fs, 0)
	if path, err = parseFile(fs, usage, args); err != nil {
		return "", nil, false, err
	}
	if b, err = m.readArtefact(path); err != nil {
		return "", nil, false, err
	}
	return path, b, cf.json, nil
}

// parseFile parses a show command's flags, which may come before or after
// its one FILE argument, and returns FILE.
func parseFile(fs *flag.FlagSet, usage func(), args []string) (string, error) {
	var files []string
	for {
		if err := parseFlags(fs, usage, args, 1<<30); err != nil {
			return "", err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			files = append(files, rest...)
			break
		}
		files, args = append(files, rest[0]), rest[1:]
	}
	if len(files) != 1 {
		return "", &usageError{msg: fmt.Sprintf("%s: exactly one FILE (or - for stdin) is required", fs.Name()),
			hint: fs.Name() + " -h"}
	}
	return files[0], nil
}
