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
	OK           bool          `json:"ok"`
	Problem      string        `json:"problem"`
	Entries      uint64        `json:"entries"`
	Head         string        `json:"head"`
	HeadSeq      uint64        `json:"head_seq"`
	AnchorSeq    uint64        `json:"anchor_seq"`
	AnchorHead   string        `json:"anchor_head"`
	Detail       string        `json:"detail"`
	AnchorDamage *AnchorDamage `json:"anchor_damage"`
	BaseSeq      uint64        `json:"base_seq"`
	BaseHash     string        `json:"base_hash"`
	Archived     uint64        `json:"archived_entries"`
	SameDevice   *bool         `json:"anchor_same_device"`
	SameOwner    *bool         `json:"anchor_same_owner"`
}

// AnchorDamage describes a damaged slot of an anchor file, as in
// verify-chain's anchor_damage.
type AnchorDamage struct {
	Slot              int     `json:"slot"`
	Problem           string  `json:"problem"`
	ClaimedGeneration *uint64 `json:"claimed_generation"`
	CurrentGeneration uint64  `json:"current_generation"`
	Newer             bool    `json:"newer"`
	Detail            string  `json:"detail"`
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
