package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/kvfence/kvfence/client"
)

// runRemote asks a running receiver to verify itself (GET
// /v1/verify-chain) and prints its report in verify-chain's shapes, with
// its exit codes.
func (c *VerifyChainCommand) runRemote(ctx context.Context, rf *remoteFlags, asJSON bool) error {
	cl, err := rf.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	rep, err := cl.VerifyChain(ctx)
	if err != nil {
		return fmt.Errorf("kvfence verify-chain: %w", err)
	}
	out := verifyChainJSON{OK: rep.OK, Problem: string(rep.Problem), Entries: rep.Entries, Head: headHex(rep.Head),
		HeadSeq: rep.Head.Seq, AnchorSeq: rep.Anchor.Seq, AnchorHead: headHex(rep.Anchor), Detail: rep.Detail,
		BaseSeq: rep.Base.Seq, BaseHash: headHex(rep.Base), Archived: rep.Archived}
	if d := rep.AnchorDamage; d != nil {
		out.AnchorDamage = &anchorDamageJSON{Slot: d.Slot, Problem: d.Problem, ClaimedGeneration: d.ClaimedGeneration,
			CurrentGeneration: d.CurrentGeneration, Newer: d.Newer, Detail: d.Detail}
	}
	if asJSON {
		err = writeJSON(c.m.Stdout, out)
	} else {
		tw := newTable(c.m.Stdout)
		fmt.Fprintf(tw, "ok\t%v\n", out.OK)
		fmt.Fprintf(tw, "problem\t%s\n", fromServer(out.Problem))
		fmt.Fprintf(tw, "entries\t%d\n", out.Entries)
		if rep.Base.Seq > 0 {
			fmt.Fprintf(tw, "base\t%s\n", headText(rep.Base))
		}
		fmt.Fprintf(tw, "head\t%s\n", headText(rep.Head))
		fmt.Fprintf(tw, "anchor\t%s\n", headText(rep.Anchor))
		if out.Detail != "" {
			fmt.Fprintf(tw, "detail\t%s\n", fromServer(out.Detail))
		}
		if d := out.AnchorDamage; d != nil {
			fmt.Fprintf(tw, "anchor damage\tslot %d: %s: %s\n", d.Slot, fromServer(d.Problem), fromServer(d.Detail))
		}
		fmt.Fprintf(tw, "verified by\tthe receiver itself, at %s\n", rf.server)
		err = tw.Flush()
	}
	if err != nil {
		return err
	}
	return remoteOutcome(rep)
}

// remoteOutcome is verifyOutcome for a served receiver's own report: the
// same exit codes (0 ok, 4 a problem, 6 ok beside a damaged anchor slot).
func remoteOutcome(rep client.ChainReport) error {
	const cmd = "kvfence verify-chain"
	const independent = "this is the receiver's own report; the independent check is kvfence verify-chain --db on a backup " +
		"(kvfence backup) with your copy of the public key"
	switch {
	case rep.OK && rep.AnchorDamage != nil:
		d := rep.AnchorDamage
		return &warningError{msg: fmt.Sprintf("%s: the chain verifies, but anchor slot %d is damaged: %s: %s", cmd, d.Slot,
			fromServer(d.Problem), fromServer(d.Detail)),
			hint: "a crash during an anchor write leaves a damaged slot, and the receiver's next write replaces it; " +
				"if there was no crash, the anchor file was altered: keep a copy as evidence and find out by whom"}
	case rep.OK:
		return nil
	}
	detail := strings.TrimSpace(rep.Detail)
	if detail == "" {
		detail = "no detail given"
	}
	return withHint(fmt.Errorf("%s: %s: %s: %w", cmd, fromServer(string(rep.Problem)), fromServer(detail), client.ErrIntegrity), independent)
}

// fromServer is text a server sent, for a terminal: quoted when it holds
// what would not read as itself (terminal escapes, bidirectional
// overrides, zero-width characters), as is.
func fromServer(s string) string {
	if printable([]byte(s)) {
		return s
	}
	return fmt.Sprintf("%q", s)
}
