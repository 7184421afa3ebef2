package main

import (
	"context"
	"fmt"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/keyfile"
)

// KeygenCommand creates an Ed25519 key pair in OpenSSH format: the private
// key at --out (mode 0600) and the public key at --out.pub. It never
// overwrites a file.
type KeygenCommand struct{ m *Main }

// keygenJSON is the --json shape of keygen.
type keygenJSON struct {
	PrivateKeyFile string `json:"private_key_file"`
	PublicKeyFile  string `json:"public_key_file"`
	PublicKey      string `json:"public_key"`
	// Fingerprint is the public key's SHA256 fingerprint, as ssh-keygen -l,
	// the anchor's checkpoints and kvfence's messages print it.
	Fingerprint string `json:"fingerprint"`
}

// Run runs the command.
func (c *KeygenCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("keygen")
	cf := commonFlags{name: "keygen"}
	cf.register(fs, 0)
	out := fs.String("out", "", "")
	comment := fs.String("comment", "kvfence", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	if err := require("keygen", [2]string{"out", *out}); err != nil {
		return err
	}
	if err := refuseOutStdout("keygen", *out, "two files (FILE and FILE.pub)"); err != nil {
		return err
	}
	pub, priv, err := keyfile.Generate(nil)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := keyfile.Write(*out, priv, *comment); err != nil {
		return err
	}
	res := keygenJSON{PrivateKeyFile: *out, PublicKeyFile: *out + ".pub", PublicKey: publicLine(pub),
		Fingerprint: audit.KeyFingerprint(pub).String()}
	if cf.json {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "private key\t%s (mode 0600)\n", res.PrivateKeyFile)
	fmt.Fprintf(tw, "public key\t%s\n", res.PublicKeyFile)
	fmt.Fprintf(tw, "\t%s\n", res.PublicKey)
	fmt.Fprintf(tw, "fingerprint\t%s\n", res.Fingerprint)
	return tw.Flush()
}

// Usage prints the command's help.
func (c *KeygenCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence keygen --out FILE [--comment TEXT] [--json]

Creates an Ed25519 key pair in OpenSSH format: the private key at FILE
(mode 0600) and the public key at FILE.pub (one ssh-ed25519 line). Keys made
by "ssh-keygen -t ed25519 -N ''" work as well. Existing files are never
overwritten.

Arguments:

	--out FILE
	    Where to write the private key; the public key goes to FILE.pub.
	--comment TEXT
	    Comment stored with both keys (default "kvfence").
`+usageJSON)
}
