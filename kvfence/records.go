package kvfence

import (
	"fmt"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// Bucket names. Keys: control and receipts by scope (receipts by scope, a
// zero byte, then action), grants by grant id, targets by target name, holds
// by scope, a zero byte, then hold id, audit by 8-byte big-endian seq.
var (
	bucketMeta        = []byte("meta")
	bucketControl     = []byte("control")
	bucketGrants      = []byte("grants")
	bucketTargets     = []byte("targets")
	bucketReceipts    = []byte("receipts")
	bucketAudit       = []byte("audit")
	bucketCheckpoints = []byte("checkpoints")
	// bucketTree keeps the RFC 6962 Merkle tree over the audit entries
	// (internal/chain, tree.go): the stored hashes of entry seq under
	// audit.SeqKey(seq-1), written in the entry's own transaction.
	bucketTree = []byte("tree")
	// bucketHolds keeps the hold ids of idempotent holds. A database made
	// before them has no such bucket: it is not in allBuckets, which Open
	// requires, and the first hold that records an id creates it
	// (ensureHolds). A missing bucket reads as one without records.
	bucketHolds = []byte("holds")
	// bucketApp keeps the records of the embedder's effects (effect.go):
	// key appKey(bucket, key), one engine bucket for every reserved
	// bucket, so that the state digest and the known records cover them
	// as one more state bucket. Like holds, it is created by the first
	// write that needs it; a database without it holds no app records.
	// Its name is no common etcd prefix segment ("app" is), which the CLI
	// refuses to keep prefixes from nesting in another's buckets.
	bucketApp = []byte("effects")

	allBuckets = [][]byte{bucketMeta, bucketControl, bucketGrants, bucketTargets, bucketReceipts, bucketAudit, bucketCheckpoints, bucketTree}

	metaFormat      = []byte("format")
	metaReceiver    = []byte("receiver")
	metaReceiverKey = []byte("receiver_key")
	metaRecoveryKey = []byte("recovery_key")
)

// formatVersion is the on-disk format this package reads and writes.
// Format "3" added the Merkle tree over the audit entries (bucketTree);
// format "4" signs its root in every checkpoint (audit.Checkpoint.Root);
// format "5" expands the state digest's terms with BLAKE3 instead of
// SHAKE128 (audit.StateHash, state/v2), so a format "4" database's stored
// digest and the state its checkpoints sign are of the old construction.
const formatVersion = "5"

// Mode is a scope's mode: held (nothing is authorised) or open (the active
// grant may be used).
type Mode string

// The two modes of a scope.
const (
	ModeHeld Mode = "held"
	ModeOpen Mode = "open"
)

// controlRecord is the stored form of a scope's control state. Times are
// Unix nanoseconds on the receiver's clock; zero means never.
type controlRecord struct {
	Epoch                uint64            `cbor:"epoch"`
	Mode                 Mode              `cbor:"mode"`
	ActiveGrant          string            `cbor:"active_grant,omitempty"`
	CreatedAt            int64             `cbor:"created_at"`
	HoldRequestedAt      int64             `cbor:"hold_requested_at,omitempty"`
	HoldCommittedAt      int64             `cbor:"hold_committed_at,omitempty"`
	ActivatedAt          int64             `cbor:"activated_at,omitempty"`
	LastStaleRejectionAt int64             `cbor:"last_stale_rejection_at,omitempty"`
	StaleRejections      uint64            `cbor:"stale_rejections,omitempty"`
	Denials              map[Reason]uint64 `cbor:"denials,omitempty"`
	// MaxGrantTTL is the scope's maximum grant lifetime in nanoseconds,
	// fixed at its creation. It lives here, in a state record, so that
	// the digest and every checkpoint cover the bound activations are
	// checked against. Zero (a scope created before it was recorded)
	// means DefaultMaxGrantTTL.
	MaxGrantTTL int64 `cbor:"max_grant_ttl,omitempty"`
}

// grantRecord is the stored form of a grant.
type grantRecord struct {
	ID            string `cbor:"id"`
	Scope         string `cbor:"scope"`
	Epoch         uint64 `cbor:"epoch"`
	Executor      string `cbor:"executor"`
	Claim         string `cbor:"claim"`
	Action        string `cbor:"action"`
	RequestSHA256 []byte `cbor:"request_sha256"`
	NotBefore     int64  `cbor:"not_before"`
	NotAfter      int64  `cbor:"not_after"`
	Decision      string `cbor:"decision,omitempty"`
	CreatedAt     int64  `cbor:"created_at"`
	// RevokedSeq is the audit seq of the recovery that revoked the grant;
	// 0 means not revoked. A recovery marks the record instead of
	// deleting it: receipts and audit entries name grants by id, and the
	// record is the only place that keeps the grant's validity window.
	RevokedSeq uint64 `cbor:"revoked_seq,omitempty"`
	// AuditSeq is the seq of the activate entry that created the grant.
	// It is omitted when zero, so that the record of a grant activated
	// before it was kept still encodes, and hashes into the state digest,
	// byte for byte as it did; such a grant reports 0.
	AuditSeq uint64 `cbor:"audit_seq,omitempty"`
}

// targetRecord is the stored form of a target. Kind, Effect, Key and
// ValueSHA256 are omitted for an internal target, so that its record encodes, and hashes
// into the state digest, byte for byte as before kinds existed.
type targetRecord struct {
	Scope    string `cbor:"scope"`
	Revision uint64 `cbor:"revision"`
	Value    []byte `cbor:"value"`
	// Kind is the target's kind; "" is TargetInternal.
	Kind TargetKind `cbor:"kind,omitempty"`
	// Effect names the registered effect of a TargetFunc target.
	Effect string `cbor:"effect,omitempty"`
	// Object names the remote object of a TargetKubernetes target, and
	// UID the incarnation of it the target was created for (dispatch.go).
	Object *RemoteObject `cbor:"object,omitempty"`
	UID    string        `cbor:"uid,omitempty"`
	// Key is a TargetEtcd target's etcd key; its Value is then empty (the
	// key holds the value) and Revision counts the fence's writes.
	Key string `cbor:"key,omitempty"`
	// ValueSHA256 is, for a TargetEtcd target, the SHA-256 of the value
	// the fence last wrote to the key (or adopted), which the state
	// digest binds.
	ValueSHA256 []byte `cbor:"value_sha256,omitempty"`
}

// receiptRecord is the stored form of a receipt.
type receiptRecord struct {
	Grant         string `cbor:"grant"`
	RequestSHA256 []byte `cbor:"request_sha256"`
	Target        string `cbor:"target"`
	RevBefore     uint64 `cbor:"rev_before"`
	RevAfter      uint64 `cbor:"rev_after"`
	AuditSeq      uint64 `cbor:"audit_seq"`
	At            int64  `cbor:"at"`
	// The fields below are set only on the receipt of a write to a remote
	// target (dispatch_records.go), and omitted otherwise, so that every
	// other receipt encodes, and hashes into the state digest, byte for
	// byte as before they existed.
	Dispatch     DispatchState `cbor:"dispatch,omitempty"`
	DispatchID   string        `cbor:"dispatch_id,omitempty"`
	Epoch        uint64        `cbor:"epoch,omitempty"`
	Precondition string        `cbor:"precondition,omitempty"`
	UID          string        `cbor:"uid,omitempty"`
	Deadline     int64         `cbor:"deadline,omitempty"`
	ValueSHA256  []byte        `cbor:"value_sha256,omitempty"`
	Version      string        `cbor:"version,omitempty"`
}

// holdRecord is the stored form of one scope's part of an idempotent
// hold, under holdKey(scope, id): what a repeat of the hold returns. Times
// are Unix nanoseconds on the receiver's clock.
type holdRecord struct {
	// Request is holdFingerprint of the hold request that made it: a
	// repeat must name the same scopes, in order, reason and expected
	// epoch.
	Request       []byte `cbor:"request"`
	PreviousEpoch uint64 `cbor:"previous_epoch"`
	Epoch         uint64 `cbor:"epoch"`
	RequestedAt   int64  `cbor:"requested_at"`
	CommittedAt   int64  `cbor:"committed_at"`
	// AuditSeq is the seq of this scope's hold entry.
	AuditSeq uint64 `cbor:"audit_seq"`
}

// holdKey is the key of scope's record of hold id: names hold no control
// character, so the zero byte between them is unambiguous.
func holdKey(scope, id string) []byte {
	k := make([]byte, 0, len(scope)+1+len(id))
	k = append(k, scope...)
	k = append(k, 0)
	return append(k, id...)
}

var recordDec cbor.DecMode

// recordMaxMapPairs bounds the pairs of any map in a stored record; the
// fast decoder leaves a larger map to recordDec to refuse.
const recordMaxMapPairs = 64

func init() {
	var err error
	recordDec, err = cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		FieldNameMatching: cbor.FieldNameMatchingCaseSensitive,
		MaxNestedLevels:   4,
		MaxMapPairs:       recordMaxMapPairs,
		UTF8:              cbor.UTF8RejectInvalid,
	}.DecMode()
	if err != nil {
		panic(err)
	}
}

// decodeRecord decodes a stored record. A record that does not decode is
// corruption, reported as an error that names the bucket and key; the
// transaction that met it then changes nothing. A record in canonical form,
// as this package writes them, takes the fast path (fastcbor.go); any other
// goes to the reflection decoder, which decides as it always has. Either
// way the decoded strings and slices are copies, never the input's bytes,
// which may live in the store's mmap.
func decodeRecord(bucket, key, raw []byte, v any) error {
	if decodeRecordFast(raw, v) {
		return nil
	}
	if err := recordDec.Unmarshal(raw, v); err != nil {
		// The conversions keep bucket and key from escaping, so that a
		// caller's []byte(name) for the key can live on its stack; %q
		// quotes a string exactly as it quotes the same bytes.
		return fmt.Errorf("%w: record %q/%q: %v", ErrBadFormat, string(bucket), string(key), err)
	}
	return nil
}

// encodeCanonical returns the canonical encoding of v in a new slice, the
// bytes wireEnc.Marshal gives: from the hand-written encoders for the
// records and wire messages they cover (fastcbor.go), from wireEnc for
// anything else.
func encodeCanonical(v any) ([]byte, error) {
	if b, ok := encodeFast(v); ok {
		return b, nil
	}
	return wireEnc.Marshal(v)
}

func receiptKey(scope, action string) []byte {
	k := make([]byte, 0, len(scope)+1+len(action))
	k = append(k, scope...)
	k = append(k, 0)
	return append(k, action...)
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
