package audit

import (
	"encoding/hex"
	"time"
)

// EntryJSON is the JSON form of a stored entry, shared by every tool that
// prints the chain: digests and hashes in lowercase hex, the time in RFC
// 3339 with nanoseconds in UTC, and fields the entry does not have left out.
type EntryJSON struct {
	Seq           uint64  `json:"seq"`
	Hash          string  `json:"hash"`
	Prev          string  `json:"prev"`
	At            *string `json:"at"`
	Kind          string  `json:"kind"`
	Scope         string  `json:"scope,omitempty"`
	Epoch         uint64  `json:"epoch,omitempty"`
	Grant         string  `json:"grant,omitempty"`
	Executor      string  `json:"executor,omitempty"`
	Action        string  `json:"action,omitempty"`
	Outcome       string  `json:"outcome,omitempty"`
	Reason        string  `json:"reason,omitempty"`
	RequestSHA256 string  `json:"request_sha256,omitempty"`
	Target        string  `json:"target,omitempty"`
	RevBefore     uint64  `json:"rev_before,omitempty"`
	RevAfter      uint64  `json:"rev_after,omitempty"`
	ValueSHA256   string  `json:"value_sha256,omitempty"`
	Decision      string  `json:"decision,omitempty"`
	Note          string  `json:"note,omitempty"`
	Actor         string  `json:"actor,omitempty"`
	BaseSeq       uint64  `json:"base_seq,omitempty"`   // an archive entry's base seq
	BaseHash      string  `json:"base_hash,omitempty"`  // an archive entry's base hash, hex
	BaseFence     string  `json:"base_fence,omitempty"` // an archive entry's base record digest, hex
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
