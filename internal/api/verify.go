package api

import (
	"encoding/hex"

	"github.com/kvfence/kvfence/audit"
)

// VerifyChain is the answer of GET /v1/verify-chain: the shape of
// "kvfence verify-chain --json" (docs/design.md §9). Head and entries
// describe the part of the chain that verified; anchor_seq and
// anchor_head the anchor as read. A hash is lowercase hex, or "" when
// there is none. The separation facts are null: they are facts about the
// files of a database opened by the command, not of a served one.
type VerifyChain struct {
	// OK says the chain, the state and the anchor verified.
	OK bool `json:"ok"`
	// Problem is "ok" or the first problem found (audit.Problem).
	Problem string `json:"problem"`
	// Entries counts the stored entries that verified.
	Entries uint64 `json:"entries"`
	// Head is the hash of the newest entry that verified.
	Head string `json:"head"`
	// HeadSeq is that entry's seq.
	HeadSeq uint64 `json:"head_seq"`
	// AnchorSeq is the anchor's seq as read.
	AnchorSeq uint64 `json:"anchor_seq"`
	// AnchorHead is the anchor's hash as read.
	AnchorHead string `json:"anchor_head"`
	// Detail describes the problem; empty when OK.
	Detail string `json:"detail"`
	// AnchorDamage describes a damaged anchor slot, or is null.
	AnchorDamage *AnchorDamage `json:"anchor_damage"`
	// BaseSeq is where the stored chain begins after an archive, 0 if never.
	BaseSeq uint64 `json:"base_seq"`
	// BaseHash is the base's hash, "" if never archived.
	BaseHash string `json:"base_hash"`
	// Archived counts entries verified in archive files.
	Archived uint64 `json:"archived_entries"`
	// SameDevice is null over the API (see the type's comment).
	SameDevice *bool `json:"anchor_same_device"`
	// SameOwner is null over the API (see the type's comment).
	SameOwner *bool `json:"anchor_same_owner"`
}

// AnchorDamage describes a damaged slot of an anchor file, as in
// verify-chain's anchor_damage (audit.SlotDamage).
type AnchorDamage struct {
	// Slot is the damaged slot's index, 0 or 1.
	Slot int `json:"slot"`
	// Problem says why the slot is damaged.
	Problem string `json:"problem"`
	// ClaimedGeneration is the generation the slot was written at, or
	// null when it cannot be read.
	ClaimedGeneration *uint64 `json:"claimed_generation"`
	// CurrentGeneration is the generation of the slot the anchor is in.
	CurrentGeneration uint64 `json:"current_generation"`
	// Newer says the damaged slot claims the generation after it.
	Newer bool `json:"newer"`
	// Detail describes the damage as read.
	Detail string `json:"detail"`
}

// AnchorDamageOf returns d's JSON shape; nil stays nil (JSON null).
func AnchorDamageOf(d *audit.SlotDamage) *AnchorDamage {
	if d == nil {
		return nil
	}
	out := &AnchorDamage{Slot: d.Slot, Problem: string(d.Problem), CurrentGeneration: d.CurrentGeneration,
		Newer: d.Next(), Detail: d.Detail}
	if d.ClaimedGeneration != 0 {
		g := d.ClaimedGeneration
		out.ClaimedGeneration = &g
	}
	return out
}

// VerifyChainOf returns a verification report's answer.
func VerifyChainOf(rep audit.Report) VerifyChain {
	return VerifyChain{OK: rep.OK(), Problem: string(rep.Problem), Entries: rep.Entries, Head: headHex(rep.Head),
		HeadSeq: rep.Head.Seq, AnchorSeq: rep.Anchor.Seq, AnchorHead: headHex(rep.Anchor), Detail: rep.Detail,
		AnchorDamage: AnchorDamageOf(rep.AnchorDamage), BaseSeq: rep.Base.Seq, BaseHash: headHex(rep.Base),
		Archived: rep.Archived}
}

// headHex is a position's hash in lowercase hex, "" for the zero head.
func headHex(h audit.Head) string {
	if h == (audit.Head{}) {
		return ""
	}
	return hex.EncodeToString(h.Hash[:])
}
