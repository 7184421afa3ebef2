package audit

import (
	"encoding/hex"
	"time"
)

// EntryJSON is the JSON form of a stored entry, shared by every tool that
// prints the chain: digests and hashes in lowercase hex, the time in RFC
// 3339 with nanoseconds in UTC, and fields the entry does not have left out.
type EntryJSON struct {
	// Seq is the entry's position in the chain, from 1.
	Seq uint64 `json:"seq"`
	// Hash is the entry's link hash, in hex.
	Hash string `json:"hash"`
	// Prev is the previous entry's hash in hex; 64 zeros for seq 1.
	Prev string `json:"prev"`
	// At is the entry's time, RFC 3339 in UTC; null when the entry has none.
	At *string `json:"at"`
	// Kind is what the entry records: init, scope_created, target_created,
	// activate, hold, grant_extended, submit, recovered, reanchored,
	// archived, or a ledger kind.
	Kind string `json:"kind"`
	// Scope is the scope the entry concerns.
	Scope string `json:"scope,omitempty"`
	// Epoch is the scope epoch the entry names: the new one for a hold, the
	// envelope's for a decision.
	Epoch uint64 `json:"epoch,omitempty"`
	// Grant is the grant id the entry names.
	Grant string `json:"grant,omitempty"`
	// Executor is the caller of a decision, or the executor of an activated
	// grant.
	Executor string `json:"executor,omitempty"`
	// Action is the action the entry names.
	Action string `json:"action,omitempty"`
	// Outcome is a decision's outcome: applied, already_applied or denied.
	Outcome string `json:"outcome,omitempty"`
	// Reason is a denial's stable reason code.
	Reason string `json:"reason,omitempty"`
	// RequestSHA256 is the SHA-256 of the request bytes, in hex.
	RequestSHA256 string `json:"request_sha256,omitempty"`
	// Target is the target the entry names.
	Target string `json:"target,omitempty"`
	// RevBefore is the target's revision before an applied mutation.
	RevBefore uint64 `json:"rev_before,omitempty"`
	// RevAfter is the target's revision after the entry's change.
	RevAfter uint64 `json:"rev_after,omitempty"`
	// ValueSHA256 is the SHA-256 of the target's new value, in hex.
	ValueSHA256 string `json:"value_sha256,omitempty"`
	// Decision is the review reference of an activation (in a ledger, the
	// claim ref).
	Decision string `json:"decision,omitempty"`
	// Note is free text for operators, such as a hold's reason; it is not
	// stable.
	Note string `json:"note,omitempty"`
	// Actor is the authenticated administrator who made the change, if one
	// was named.
	Actor string `json:"actor,omitempty"`
	// BaseSeq is what an archive entry records of the base it moved the
	// stored chain to: the newest archived entry's seq.
	BaseSeq uint64 `json:"base_seq,omitempty"`
	// BaseHash is an archive entry's base hash, in hex.
	BaseHash string `json:"base_hash,omitempty"`
	// BaseFence is an archive entry's base record digest, in hex.
	BaseFence string `json:"base_fence,omitempty"`
}

// JSON returns the JSON form of e, whose link hash is hash.
func (e *Entry) JSON(hash Hash) EntryJSON {
	out := EntryJSON{Seq: e.Seq, Hash: hex.EncodeToString(hash[:]), Prev: hex.EncodeToString(e.Prev),
		Kind: e.Kind, Scope: e.Scope, Epoch: e.Epoch, Grant: e.Grant, Executor: e.Executor, Action: e.Action,
		Outcome: e.Outcome, Reason: e.Reason, Target: e.Target, RevBefore: e.RevBefore, RevAfter: e.RevAfter,
		Decision: e.Decision, Note: e.Note, Actor: e.Actor, BaseSeq: e.BaseSeq}
	if e.At != 0 {
		at := time.Unix(0, e.At).UTC().Format(time.RFC3339Nano)
		out.At = &at
	}
	if len(e.RequestSHA256) > 0 {
		out.RequestSHA256 = hex.EncodeToString(e.RequestSHA256)
	}
	if len(e.ValueSHA256) > 0 {
		out.ValueSHA256 = hex.EncodeToString(e.ValueSHA256)
	}
	if len(e.BaseHash) > 0 {
		out.BaseHash = hex.EncodeToString(e.BaseHash)
	}
	if len(e.BaseFence) > 0 {
		out.BaseFence = hex.EncodeToString(e.BaseFence)
	}
	return out
}
