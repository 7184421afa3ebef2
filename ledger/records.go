package ledger

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/fxamacker/cbor/v2"
	bolt "go.etcd.io/bbolt"
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

	allBuckets = [][]byte{bucketMeta, bucketApprovals, bucketActions, bucketClaims, bucketAudit, bucketCheckpoints}

	metaFormat     = []byte("format")
	metaLedger     = []byte("ledger")
	metaKey        = []byte("ledger_key")
	metaClaimCount = []byte("claim_count")

	checkpointLatest = []byte("latest")
)

// formatVersion is the on-disk format this package reads and writes.
const formatVersion = "kvfence-ledger/1"

// Stored records. Times are Unix nanoseconds; zero means never.
type approvalRecord struct {
	Action        string `cbor:"action"`
	RequestSHA256 []byte `cbor:"request_sha256"`
	ActionChecked bool   `cbor:"action_checked,omitempty"`
	Approver      string `cbor:"approver"`
	Decision      string `cbor:"decision,omitempty"`
	ApprovedAt    int64  `cbor:"approved_at"`
	ExpiresAt     int64  `cbor:"expires_at"`
	AuditSeq      uint64 `cbor:"audit_seq"`
}

type actionRecord struct {
	Live   string   `cbor:"live,omitempty"`
	Claims []string `cbor:"claims"`
}

type claimRecord struct {
	Ref             string `cbor:"ref"`
	Action          string `cbor:"action"`
	Worker          string `cbor:"worker"`
	Generation      uint64 `cbor:"generation"`
	State           State  `cbor:"state"`
	ClaimedAt       int64  `cbor:"claimed_at"`
	HeartbeatAt     int64  `cbor:"heartbeat_at"`
	LeaseExpiresAt  int64  `cbor:"lease_expires_at"`
	DispatchedAt    int64  `cbor:"dispatched_at,omitempty"`
	SettledAt       int64  `cbor:"settled_at,omitempty"`
	SupersededBy    string `cbor:"superseded_by,omitempty"`
	SupersededState State  `cbor:"superseded_state,omitempty"`
	TakeoverBy      string `cbor:"takeover_by,omitempty"`
	TakeoverReason  string `cbor:"takeover_reason,omitempty"`
	ReconciledBy    string `cbor:"reconciled_by,omitempty"`
	ReconciledAt    int64  `cbor:"reconciled_at,omitempty"`
	AuditSeq        uint64 `cbor:"audit_seq"`
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
func get(tx *bolt.Tx, bucket, key []byte, v any) (bool, error) {
	raw := tx.Bucket(bucket).Get(key)
	if raw == nil {
		return false, nil
	}
	if err := recordDec.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("%w: record %s/%q: %v", ErrBadFormat, bucket, key, err)
	}
	return true, nil
}

func put(tx *bolt.Tx, bucket, key []byte, v any) error {
	raw, err := recordEnc.Marshal(v)
	if err != nil {
		return err
	}
	return tx.Bucket(bucket).Put(key, raw)
}

func claimCount(tx *bolt.Tx) uint64 {
	v := tx.Bucket(bucketMeta).Get(metaClaimCount)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func setClaimCount(tx *bolt.Tx, n uint64) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return tx.Bucket(bucketMeta).Put(metaClaimCount, b[:])
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
