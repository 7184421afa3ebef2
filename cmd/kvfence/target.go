package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
)

// TargetCreateCommand creates a target in an existing scope at revision 1.
// It is privileged.
type TargetCreateCommand struct{ m *Main }

// targetCreateJSON is the --json shape of target create.
type targetCreateJSON struct {
	Target      string `json:"target"`
	Scope       string `json:"scope"`
	Revision    uint64 `json:"revision"`
	ValueSHA256 string `json:"value_sha256"`
}

// Run runs the command.
func (c *TargetCreateCommand) Run(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("target create")
	cf := commonFlags{name: "target create"}
	cf.register(fs, withDB|withKey)
	var rf remoteFlags
	rf.register(fs)
	scope := fs.String("scope", "", "")
	target := fs.String("target", "", "")
	value := fs.String("value", "", "")
	valueFile := fs.String("value-file", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "target create"); err != nil {
		return err
	}
	if !rf.on() {
		if err := cf.requireWriter(); err != nil {
			return err
		}
	}
	if err := require("target create", [2]string{"scope", *scope}, [2]string{"target", *target}); err != nil {
		return err
	}
	var v []byte
	switch hasValue, hasFile := isSet(fs, "value"), isSet(fs, "value-file"); {
	case hasValue && hasFile:
		return &usageError{msg: "kvfence target create: --value and --value-file are mutually exclusive", hint: "kvfence target create -h"}
	case hasValue:
		v = []byte(*value)
	case hasFile:
		if v, err = c.m.readInput(*valueFile); err != nil {
			return fmt.Errorf("read --value-file: %w", err)
		}
	default:
		return &usageError{msg: "kvfence target create: one of --value or --value-file is required", hint: "kvfence target create -h"}
	}
	t, err := either(&cf, &rf, true, c.m.warn,
		func(r *kvfence.Receiver) (kvfence.Target, error) {
			if err := localAdmin(r).CreateTarget(ctx, *scope, *target, v); err != nil {
				return kvfence.Target{}, err
			}
			return r.Target(*target)
		},
		func(cl *client.Client) (kvfence.Target, error) { return cl.CreateTarget(ctx, *scope, *target, v) })
	if err != nil {
		return err
	}
	sum := sha256.Sum256(t.Value)
	res := targetCreateJSON{Target: t.Name, Scope: t.Scope, Revision: t.Revision, ValueSHA256: hex.EncodeToString(sum[:])}
	if cf.json {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "target\t%s\n", res.Target)
	fmt.Fprintf(tw, "scope\t%s\n", res.Scope)
	fmt.Fprintf(tw, "revision\t%d\n", res.Revision)
	fmt.Fprintf(tw, "value sha256\t%s\n", res.ValueSHA256)
	return tw.Flush()
}

// Usage prints the command's help.
func (c *TargetCreateCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence target create --scope S --target K (--value V | --value-file F) [common arguments]

Creates target K in scope S at revision 1 with the given value.
Privileged: requires the receiver's private key.

Arguments:

	--scope S
	    The scope the target belongs to; it must exist.
	--target K
	    The target's name.
	--value V
	    The initial value, as given.
	--value-file F
	    Read the initial value from F, byte for byte ("-" for stdin).
`+usageKey+usageDB+usageServer+usageJSON)
}
