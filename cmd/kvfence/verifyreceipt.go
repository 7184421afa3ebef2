package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/receiptproof"
)

// VerifyReceiptCommand checks a receipt's proof (observe receipt --proof
// --json) offline, with nothing but the receiver's public key: the
// checkpoint note's signature, the inclusion proof of the audit entry in
// its tree, and that the entry is the receipt's applied decision.
type VerifyReceiptCommand struct{ m *Main }

// verifyReceiptJSON is the --json shape of verify-receipt on success
// (docs/design.md §9): the receipt's seq and the checkpoint it was proven
// in. A failure is the usual error object.
type verifyReceiptJSON struct {
	OK       bool   `json:"ok"`
	Scope    string `json:"scope"`
	Action   string `json:"action"`
	AuditSeq uint64 `json:"audit_seq"`
	Origin   string `json:"origin"`
	// Receiver is the receiver id the checkpoint's origin names.
	Receiver string `json:"receiver"`
	TreeSize uint64 `json:"tree_size"`
	Root     string `json:"root"`
	// Witnesses are the witnesses whose cosignatures of the checkpoint
	// verified, with --witness-pub; absent without.
	Witnesses []string `json:"witnesses,omitempty"`
}

// Run runs the command.
func (c *VerifyReceiptCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("verify-receipt")
	pubPath := fs.String("pub", "", "")
	receiver := fs.String("receiver", "", "")
	file := fs.String("file", "", "")
	asJSON := fs.Bool("json", false, "")
	pubs := namedValues{flag: "witness-pub", what: "FILE"}
	fs.Var(&pubs, "witness-pub", "")
	quorum := fs.Int("witness-quorum", 0, "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	if len(pubs.names) == 0 && isSet(fs, "witness-quorum") || len(pubs.names) > 0 && (*quorum < 0 || *quorum > len(pubs.names)) {
		return &usageError{msg: fmt.Sprintf("kvfence verify-receipt: --witness-quorum %d with %d --witness-pub", *quorum, len(pubs.names)),
			hint: "--witness-pub NAME=FILE for each witness, and --witness-quorum K, 1 <= K <= N (default N)"}
	}
	wopts := receiptproof.VerifyOptions{Receiver: *receiver}
	for _, name := range pubs.names {
		wpub, err := keyfile.LoadPublic(pubs.values[name])
		if err != nil {
			return err
		}
		v, err := checkpoint.NewCosignatureVerifier(name, wpub, checkpoint.CosignatureVerifierOptions{})
		if err != nil {
			return &usageError{msg: fmt.Sprintf("kvfence verify-receipt: witness %s: %v", name, err), hint: "kvfence verify-receipt -h", err: err}
		}
		wopts.Witnesses = append(wopts.Witnesses, v)
	}
	if wopts.Quorum = *quorum; len(pubs.names) > 0 && *quorum == 0 {
		wopts.Quorum = len(pubs.names)
	}
	if *pubPath == "" {
		return &usageError{msg: "kvfence verify-receipt: --pub (the receiver's public key file) is required", hint: "kvfence verify-receipt -h"}
	}
	pub, err := keyfile.LoadPublic(*pubPath)
	if err != nil {
		return err
	}
	var in io.Reader = c.m.Stdin
	if in == nil {
		in = eofReader{}
	}
	if *file != "" && *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	data, err := io.ReadAll(io.LimitReader(in, receiptproof.MaxSize+1))
	if err != nil {
		return err
	}
	p, err := receiptproof.Parse(data)
	if err != nil {
		return &usageError{msg: fmt.Sprintf("kvfence verify-receipt: %v", err), hint: "kvfence verify-receipt -h", err: err}
	}
	v, err := receiptproof.VerifyWith(p, pub, wopts)
	if err != nil {
		return fmt.Errorf("kvfence verify-receipt: %w", err)
	}
	out := verifyReceiptJSON{OK: true, Scope: p.Receipt.Scope, Action: p.Receipt.Action, AuditSeq: p.Receipt.AuditSeq,
		Origin: v.Checkpoint.Origin, Receiver: v.Receiver, TreeSize: v.Checkpoint.Size, Root: hex.EncodeToString(v.Checkpoint.Root[:]), Witnesses: v.Witnesses}
	if *asJSON {
		return writeJSON(c.m.Stdout, out)
	}
	if _, err = fmt.Fprintf(c.m.Stdout, "ok: receipt of action %s in scope %s is audit entry %d, in the checkpoint of %d entries signed by %s\n",
		out.Action, out.Scope, out.AuditSeq, out.TreeSize, out.Origin); err != nil || len(out.Witnesses) == 0 {
		return err
	}
	_, err = fmt.Fprintf(c.m.Stdout, "cosigned by %d of %d witnesses: %s\n", len(out.Witnesses), wopts.Quorum, strings.Join(out.Witnesses, ", "))
	return err
}

// Usage prints the command's help.
func (c *VerifyReceiptCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `usage: kvfence verify-receipt --pub RECEIVER.pub [--receiver ID] [--file F]
	[--witness-pub NAME=FILE ... [--witness-quorum K]] [--json]

Checks offline the proof of a receipt that "kvfence observe receipt
--proof --json" printed: that the checkpoint note is signed by the
receiver key in --pub and names it in its origin, that the audit entry is
in the note's Merkle tree (the inclusion proof leads from its leaf hash to
the note's root), and that the entry is the applied decision the receipt
describes. It reads the proof from --file, or from stdin.

Arguments:

  --pub FILE
    The receiver's public key, as the operator holds it.
  --receiver ID
    The receiver's id: the checkpoint's origin must name it. Without it a
    proof from any receiver that signs with this key passes.
  --file F
    The proof file; "-" or none reads stdin.
  --witness-pub NAME=FILE
    A witness's public key (repeatable; NAME its id): the checkpoint note
    must then carry valid cosignatures by K of these witnesses (a proof
    that a receiver with witnesses printed is to the note they cosigned).
  --witness-quorum K
    How many of them, 1 to N (default N).
  --json
    Print {"ok","scope","action","audit_seq","origin","receiver","tree_size","root"},
    and "witnesses" (the names whose cosignatures verified) with
    --witness-pub.

Exit codes: 0 proven, 2 a malformed proof file or usage, 4 not proven
(a note not signed by the key, a proof that does not verify, an entry
that is not the receipt's decision, or fewer than K cosignatures).
`)
}

// eofReader is an empty stdin.
type eofReader struct{}

// Read returns io.EOF.
func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
