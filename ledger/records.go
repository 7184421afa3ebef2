package ledger

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/kvfence/kvfence/engine"
)

// Bucket names and meta keys. Keys: approvals and actions by action name,
// claims by claim ref, audit by 8-byte big-endian seq.
var (
	bucketMeta        = []byte("meta")
	bucketApprovals   = []byte("approvals")
	bucketActions     = []byte("actions")
	bucketClaims      = []byte("claims")
	bucketAudit       = []byte("audit")
	bucketCheckpoints = []byte("checkpoints")
	// bucketTree keeps the RFC 6962 tree over the audit entries, whose
	// root every checkpoint signs (chain.Layout.Tree).
	bucketTree = []byte("tree")

	allBuckets = [][]byte{bucketMeta, bucketApprovals, bucketActions, bucketClaims, bucketAudit, bucketCheckpoints, bucketTree}

	// Buckets added after format kvfence-ledger/1 was first written: a
	// file without them is read as having none of their records, and the
	// first write that needs one creates it.
	bucketReceivers    = []byte("receivers")
	bucketContainments = []byte("containments")

	metaFormat     = []byte("format")
	metaLedger     = []byte("ledger")
	metaKey        = []byte("ledger_key")
	metaClaimCount = []byte("claim_count")

	checkpointLatest = []byte("latest")
)

// formatVersion is the on-disk format this package reads and writes.
// Format kvfence-ledger/2 added the Merkle tree over the audit entries
// (bucketTree), whose root checkpoints sign.
const formatVersion = "kvfence-ledger/2"

// formatVersion1 is the format before the tree; it is refused with a
// message that says so, not upgraded: no checkpoint it holds signs a root.
const formatVersion1 = "kvfence-ledger/1"

// Stored records. Times are Unix nanoseconds; zero means never. Each
// field is stored as the public field of the same name describes it.

// approvalRecord is an Approval as stored under its action.
type approvalRecord struct {
	// Action is Approval.Action.
	Action string `cbor:"action"`
	// RequestSHA256 is Approval.RequestSHA256 (32 bytes).
	RequestSHA256 []byte `cbor:"request_sha256"`
	// ActionChecked is Approval.ActionChecked; absent (false) in files
	// written before the check existed, whose approvals were not checked.
	ActionChecked bool `cbor:"action_checked,omitempty"`
	// Approver is Approval.Approver.
	Approver string `cbor:"approver"`
	// Decision is Approval.Decision.
	Decision string `cbor:"decision,omitempty"`
	// ApprovedAt is Approval.ApprovedAt.
	ApprovedAt int64 `cbor:"approved_at"`
	// ExpiresAt is Approval.ExpiresAt.
	ExpiresAt int64 `cbor:"expires_at"`
	// AuditSeq is Approval.AuditSeq.
	AuditSeq uint64 `cbor:"audit_seq"`
	// Boundaries is Approval.Boundaries; absent in files written before
	// boundaries existed, and for an approval that names none.
	Boundaries []boundaryRecord `cbor:"boundaries,omitempty"`
}

// boundaryRecord is a Boundary as stored in its approval.
type boundaryRecord struct {
	// Receiver is Boundary.Receiver.
	Receiver string `cbor:"receiver"`
	// Scope is Boundary.Scope.
	Scope string `cbor:"scope"`
}

// actionRecord is an action's claims, stored under its name.
type actionRecord struct {
	// Live is the ref of the action's live claim, or empty.
	Live string `cbor:"live,omitempty"`
	// Claims are the refs of its claims, oldest first.
	Claims []string `cbor:"claims"`
}

// claimRecord is a Claim as stored under its ref.
type claimRecord struct {
	// Ref is Claim.Ref.
	Ref string `cbor:"ref"`
	// Action is Claim.Action.
	Action string `cbor:"action"`
	// Worker is Claim.Worker.
	Worker string `cbor:"worker"`
	// Generation is Claim.Generation.
	Generation uint64 `cbor:"generation"`
	// State is Claim.State.
	State State `cbor:"state"`
	// ClaimedAt is Claim.ClaimedAt.
	ClaimedAt int64 `cbor:"claimed_at"`
	// HeartbeatAt is Claim.HeartbeatAt.
	HeartbeatAt int64 `cbor:"heartbeat_at"`
	// LeaseExpiresAt is the lease's expiry as last set; it is kept after
	// the claim settles, but not reported then (see public).
	LeaseExpiresAt int64 `cbor:"lease_expires_at"`
	// DispatchedAt is Claim.DispatchedAt.
	DispatchedAt int64 `cbor:"dispatched_at,omitempty"`
	// SettledAt is Claim.SettledAt.
	SettledAt int64 `cbor:"settled_at,omitempty"`
	// SupersededBy is Claim.SupersededBy.
	SupersededBy string `cbor:"superseded_by,omitempty"`
	// SupersededState is Claim.SupersededState.
	SupersededState State `cbor:"superseded_state,omitempty"`
	// TakeoverBy is Claim.TakeoverBy.
	TakeoverBy string `cbor:"takeover_by,omitempty"`
	// TakeoverReason is Claim.TakeoverReason.
	TakeoverReason string `cbor:"takeover_reason,omitempty"`
	// ReconciledBy is Claim.ReconciledBy.
	ReconciledBy string `cbor:"reconciled_by,omitempty"`
	// ReconciledAt is Claim.ReconciledAt; absent in files written before
	// it was recorded.
	ReconciledAt int64 `cbor:"reconciled_at,omitempty"`
	// AuditSeq is Claim.AuditSeq.
	AuditSeq uint64 `cbor:"audit_seq"`
}

var (
	recordEnc cbor.EncMode
	recordDec cbor.DecMode
)

func init() {
	var err error
	if recordEnc, err = cbor.CoreDetEncOptions().EncMode(); err != nil {
		panic(err)
	}
	recordDec, err = cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		FieldNameMatching: cbor.FieldNameMatchingCaseSensitive,
		MaxNestedLevels:   4,
		MaxArrayElements:  1 << 16,
		MaxMapPairs:       64,
		UTF8:              cbor.UTF8RejectInvalid,
	}.DecMode()
	if err != nil {
		panic(err)
	}
}

// get decodes the record under key in bucket into v. It reports false if
// there is none; a record that does not decode is corruption.
func get(tx engine.Tx, bucket, key []byte, v any) (bool, error) {
	raw, err := tx.Get(bucket, key)
	if err != nil || raw == nil {
		return false, err
	}
	if err := recordDec.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("%w: record %s/%q: %v", ErrBadFormat, bucket, key, err)
	}
	return true, nil
}

func put(tx engine.Tx, bucket, key []byte, v any) error {
	raw, err := recordEnc.Marshal(v)
	if err != nil {
		return err
	}
	return tx.Put(bucket, key, raw)
}

func claimCount(tx engine.Tx) (uint64, error) {
	v, err := tx.Get(bucketMeta, metaClaimCount)
	if err != nil || len(v) != 8 {
		return 0, err
	}
	return binary.BigEndian.Uint64(v), nil
}

func setClaimCount(tx engine.Tx, n uint64) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return tx.Put(bucketMeta, metaClaimCount, b[:])
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

func (r *approvalRecord) public() Approval {
	a := Approval{Action: r.Action, ActionChecked: r.ActionChecked, Approver: r.Approver, Decision: r.Decision,
		ApprovedAt: unixTime(r.ApprovedAt), ExpiresAt: unixTime(r.ExpiresAt), AuditSeq: r.AuditSeq}
	copy(a.RequestSHA256[:], r.RequestSHA256)
	for _, b := range r.Boundaries {
		a.Boundaries = append(a.Boundaries, Boundary{Receiver: b.Receiver, Scope: b.Scope})
	}
	return a
}

// public is the claim as callers see it. A claim that is no longer live
// reports no lease: the stored expiry is history (the audit chain keeps
// it), and showing it would read as a lease still running or expired.
func (r *claimRecord) public() Claim {
	c := Claim{Ref: r.Ref, Action: r.Action, Worker: r.Worker, Generation: r.Generation, State: r.State,
		ClaimedAt: unixTime(r.ClaimedAt), HeartbeatAt: unixTime(r.HeartbeatAt), LeaseExpiresAt: unixTime(r.LeaseExpiresAt),
		DispatchedAt: unixTime(r.DispatchedAt), SettledAt: unixTime(r.SettledAt), SupersededBy: r.SupersededBy,
		SupersededState: r.SupersededState, TakeoverBy: r.TakeoverBy, TakeoverReason: r.TakeoverReason,
		ReconciledBy: r.ReconciledBy, ReconciledAt: unixTime(r.ReconciledAt), AuditSeq: r.AuditSeq}
	if !r.State.Live() {
		c.LeaseExpiresAt = time.Time{}
	}
	return c
}
