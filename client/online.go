package client

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/backup"
	"github.com/kvfence/kvfence/internal/api"
)

// ChainReport is a served receiver's verification of its own chain
// (GET /v1/verify-chain), as kvfence.Receiver.VerifyOnline reports it.
// It is the receiver's word: a compromised receiver can answer anything.
// kvfence.VerifyChain on a backup, with your own copy of the public key,
// is the independent check.
type ChainReport struct {
	// OK says the chain, the state and the anchor verified.
	OK bool
	// Problem is audit.ProblemOK or the first problem found.
	Problem audit.Problem
	// Detail describes the problem; empty when OK.
	Detail string
	// Entries counts the stored entries that verified, from Base on.
	Entries uint64
	// Head is the newest entry that verified.
	Head audit.Head
	// Anchor is the anchor's position as read.
	Anchor audit.Head
	// Base is where the stored chain begins after an archive; zero if
	// never archived.
	Base audit.Head
	// Archived counts entries verified in archives: 0 here, the receiver
	// verifies what it stores.
	Archived uint64
	// AnchorDamage describes a damaged anchor slot, or is nil.
	AnchorDamage *AnchorDamage
}

// AnchorDamage is a damaged slot of the receiver's anchor file, as
// verify-chain's anchor_damage describes it.
type AnchorDamage struct {
	// Slot is the damaged slot's index, 0 or 1.
	Slot int
	// Problem says why the slot is damaged (audit.SlotProblem).
	Problem string
	// ClaimedGeneration is the generation the slot was written at, nil
	// when it cannot be read.
	ClaimedGeneration *uint64
	// CurrentGeneration is the generation of the slot the anchor is in.
	CurrentGeneration uint64
	// Newer says the damaged slot claims the generation after it.
	Newer bool
	// Detail describes the damage as read.
	Detail string
}

// VerifyChain has the receiver verify its audit chain, state digest and
// anchor from one consistent view while it serves (admin). A problem is
// in the report, not the error; the error is for a call that failed or
// an answer that is not a report (ErrProtocol).
func (c *Client) VerifyChain(ctx context.Context) (ChainReport, error) {
	var out api.VerifyChain
	if err := c.call(ctx, http.MethodGet, api.PathVerifyChain, "", nil, &out); err != nil {
		return ChainReport{}, err
	}
	rep := ChainReport{OK: out.OK, Problem: audit.Problem(out.Problem), Detail: out.Detail, Entries: out.Entries,
		Archived: out.Archived}
	var err error
	if rep.Head, err = headOf(out.HeadSeq, out.Head); err != nil {
		return ChainReport{}, fmt.Errorf("%w: %s: head: %v", ErrProtocol, api.PathVerifyChain, err)
	}
	if rep.Anchor, err = headOf(out.AnchorSeq, out.AnchorHead); err != nil {
		return ChainReport{}, fmt.Errorf("%w: %s: anchor: %v", ErrProtocol, api.PathVerifyChain, err)
	}
	if rep.Base, err = headOf(out.BaseSeq, out.BaseHash); err != nil {
		return ChainReport{}, fmt.Errorf("%w: %s: base: %v", ErrProtocol, api.PathVerifyChain, err)
	}
	if rep.OK != (rep.Problem == audit.ProblemOK) {
		return ChainReport{}, fmt.Errorf("%w: %s: ok is %v with problem %q", ErrProtocol, api.PathVerifyChain, rep.OK, rep.Problem)
	}
	if d := out.AnchorDamage; d != nil {
		rep.AnchorDamage = &AnchorDamage{Slot: d.Slot, Problem: d.Problem, ClaimedGeneration: d.ClaimedGeneration,
			CurrentGeneration: d.CurrentGeneration, Newer: d.Newer, Detail: d.Detail}
	}
	return rep, nil
}

// headOf parses a position's hex hash: "" only for the zero position.
func headOf(seq uint64, h string) (audit.Head, error) {
	if h == "" {
		if seq != 0 {
			return audit.Head{}, fmt.Errorf("seq %d without a hash", seq)
		}
		return audit.Head{}, nil
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != len(audit.Hash{}) || h != strings.ToLower(h) {
		return audit.Head{}, fmt.Errorf("hash %q is not %d bytes in lowercase hex", h, len(audit.Hash{}))
	}
	out := audit.Head{Seq: seq}
	copy(out.Hash[:], b)
	return out, nil
}

// Backup fetches a consistent snapshot of the receiver's storage with the
// signed checkpoint it matches (GET /v1/backup, admin) and saves it as
// opts.Out with backup.Save: written to a temporary file, fsynced,
// verified against opts.PublicKey (the checkpoint's signature, then the
// chain and state of the snapshot against the checkpoint), and only then
// renamed into place. A stream cut short, altered, or not matching its
// checkpoint leaves no file.
func (c *Client) Backup(ctx context.Context, opts backup.SaveOptions) (backup.Result, error) {
	if err := opts.Check(); err != nil {
		return backup.Result{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+api.PathBackup, nil)
	if err != nil {
		return backup.Result{}, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Accept", api.ContentBackup+", "+api.ContentJSON)
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		return backup.Result{}, fmt.Errorf("client: GET %s: %w", api.PathBackup, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorAnswer))
		if err != nil {
			return backup.Result{}, fmt.Errorf("client: GET %s: reading the answer: %w", api.PathBackup, err)
		}
		var e api.Error
		if err := api.DecodeAnswer(raw, &e); err != nil || e.Error.Code == "" {
			return backup.Result{}, &Error{Status: resp.StatusCode, Message: strings.TrimSpace(string(raw)), err: statusErr(resp.StatusCode)}
		}
		return backup.Result{}, errorOf(resp.StatusCode, e.Error)
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != api.ContentBackup {
		return backup.Result{}, fmt.Errorf("%w: GET %s: answered %q, not %s", ErrProtocol, api.PathBackup,
			resp.Header.Get("Content-Type"), api.ContentBackup)
	}
	res, err := backup.Save(ctx, resp.Body, opts)
	if err != nil {
		return backup.Result{}, fmt.Errorf("client: GET %s: %w", api.PathBackup, err)
	}
	return res, nil
}

// maxErrorAnswer bounds an error answer's body.
const maxErrorAnswer = 1 << 20
