package audit

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"unicode/utf8"
)

// holdAckPrefix separates a hold acknowledgment's signed bytes from a
// checkpoint's and an admission's: one key signs the first two, and a
// signature over one must never pass for the other.
const holdAckPrefix = "kvfence/hold-ack/v1\n"

// MaxHoldAckSize bounds an encoded signed hold acknowledgment.
const MaxHoldAckSize = 4 << 10

// MaxHoldIDLen bounds a hold id in bytes.
const MaxHoldIDLen = 128

// ErrBadHoldAck means bytes are not a well-formed signed hold
// acknowledgment.
var ErrBadHoldAck = errors.New("audit: bad hold acknowledgment")

// ErrHoldAckMismatch means a hold acknowledgment, well formed and signed,
// does not say what its verifier needs it to: another receiver, scope, hold
// id, or a checkpoint that does not cover it.
var ErrHoldAckMismatch = errors.New("audit: hold acknowledgment does not match")

// HoldAck is a receiver's signed statement that one scope's hold
// committed: the scope went from PreviousEpoch to Epoch in the audit entry
// at AuditSeq, and the checkpoint at CheckpointSeq, whose head is
// CheckpointHead, covers that entry. It is what a coordinator keeps as the
// boundary's acknowledgment: unlike a checkpoint, it names the scope and
// the epoch that the hold installed, under the receiver's key.
type HoldAck struct {
	Receiver       string // receiver id; one line of printable UTF-8
	Scope          string // the held scope
	HoldID         string // the hold's idempotency id; empty if it had none
	PreviousEpoch  uint64 // the scope's epoch before the hold
	Epoch          uint64 // the epoch the hold installed: PreviousEpoch+1
	AuditSeq       uint64 // seq of the hold's audit entry
	RequestedAt    int64  // Unix nanoseconds, receiver clock, when the hold was asked for
	At             int64  // Unix nanoseconds, receiver clock, in the hold's transaction
	CheckpointSeq  uint64 // seq of the signed checkpoint that covers AuditSeq
	CheckpointHead Hash   // that checkpoint's head
}

// holdAckWire is the decoding target; the hash is a slice so that a byte
// string of the wrong length is seen.
type holdAckWire struct {
	At             int64  `cbor:"at"`
	Epoch          uint64 `cbor:"epoch"`
	Scope          string `cbor:"scope"`
	HoldID         string `cbor:"hold_id"`
	Receiver       string `cbor:"receiver"`
	AuditSeq       uint64 `cbor:"audit_seq"`
	RequestedAt    int64  `cbor:"requested_at"`
	CheckpointSeq  uint64 `cbor:"checkpoint_seq"`
	PreviousEpoch  uint64 `cbor:"previous_epoch"`
	CheckpointHead []byte `cbor:"checkpoint_head"`
}

func checkHoldAck(a *HoldAck) error {
	if err := checkReceiver(a.Receiver); err != nil {
		return fmt.Errorf("%w: %w", ErrBadHoldAck, err)
	}
	if a.Scope == "" || !utf8.ValidString(a.Scope) || len(a.Scope) > MaxReceiverLen {
		return fmt.Errorf("%w: scope %q is not a scope name", ErrBadHoldAck, a.Scope)
	}
	if len(a.HoldID) > MaxHoldIDLen || !utf8.ValidString(a.HoldID) {
		return fmt.Errorf("%w: hold id is not at most %d bytes of UTF-8", ErrBadHoldAck, MaxHoldIDLen)
	}
	if a.PreviousEpoch+1 != a.Epoch || a.Epoch == 0 {
		return fmt.Errorf("%w: a hold moves an epoch by one; %d to %d is not a hold", ErrBadHoldAck, a.PreviousEpoch, a.Epoch)
	}
	if a.AuditSeq == 0 || a.CheckpointSeq < a.AuditSeq {
		return fmt.Errorf("%w: checkpoint seq %d does not cover the hold's entry %d", ErrBadHoldAck, a.CheckpointSeq, a.AuditSeq)
	}
	return nil
}

func appendHoldAck(b []byte, a *HoldAck) []byte {
	b = appendHead(b, majorMap, 10)
	b = appendInt(append(b, keyAt...), a.At)
	b = appendHead(append(b, keyEpoch...), majorUint, a.Epoch)
	b = appendText(append(b, keyScope...), a.Scope)
	b = appendText(append(b, "\x67hold_id"...), a.HoldID)
	b = appendText(append(b, "\x68receiver"...), a.Receiver)
	b = appendHead(append(b, "\x69audit_seq"...), majorUint, a.AuditSeq)
	b = appendInt(append(b, "\x6crequested_at"...), a.RequestedAt)
	b = appendHead(append(b, "\x6echeckpoint_seq"...), majorUint, a.CheckpointSeq)
	b = appendHead(append(b, "\x6eprevious_epoch"...), majorUint, a.PreviousEpoch)
	return appendBytes(append(b, "\x6fcheckpoint_head"...), a.CheckpointHead[:])
}

func holdAckMessage(a *HoldAck) ([]byte, error) {
	if err := checkHoldAck(a); err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(holdAckPrefix)+200+len(a.Receiver)+len(a.Scope)+len(a.HoldID))
	return appendHoldAck(append(b, holdAckPrefix...), a), nil
}

func parseHoldAck(raw []byte) (HoldAck, error) {
	var w holdAckWire
	if err := decMode.Unmarshal(raw, &w); err != nil {
		return HoldAck{}, fmt.Errorf("%w: %w", ErrBadHoldAck, err)
	}
	if len(w.CheckpointHead) != HashSize {
		return HoldAck{}, fmt.Errorf("%w: checkpoint head is %d bytes, want %d", ErrBadHoldAck, len(w.CheckpointHead), HashSize)
	}
	a := HoldAck{Receiver: w.Receiver, Scope: w.Scope, HoldID: w.HoldID, PreviousEpoch: w.PreviousEpoch, Epoch: w.Epoch,
		AuditSeq: w.AuditSeq, RequestedAt: w.RequestedAt, At: w.At, CheckpointSeq: w.CheckpointSeq,
		CheckpointHead: Hash(w.CheckpointHead)}
	if err := checkHoldAck(&a); err != nil {
		return HoldAck{}, err
	}
	if !bytes.Equal(appendHoldAck(nil, &a), raw) {
		return HoldAck{}, fmt.Errorf("%w: hold acknowledgment not in canonical form", ErrBadHoldAck)
	}
	return a, nil
}

// SignedHoldAck is a hold acknowledgment with the Ed25519 signature of the
// receiver key whose fingerprint is Key. It is comparable with ==.
type SignedHoldAck struct {
	// HoldAck is the signed statement.
	HoldAck
	Key       Fingerprint                 // the signing key's; not signed itself
	Signature [ed25519.SignatureSize]byte // Ed25519 over the domain-separated acknowledgment
}

// IsZero reports whether sa is the zero value: no acknowledgment.
func (sa SignedHoldAck) IsZero() bool { return sa == SignedHoldAck{} }

// SignHoldAck signs a with the receiver's key priv.
func SignHoldAck(priv ed25519.PrivateKey, a HoldAck) (SignedHoldAck, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return SignedHoldAck{}, fmt.Errorf("%w: private key is %d bytes, want %d", ErrBadKey, len(priv), ed25519.PrivateKeySize)
	}
	msg, err := holdAckMessage(&a)
	if err != nil {
		return SignedHoldAck{}, err
	}
	sa := SignedHoldAck{HoldAck: a, Key: KeyFingerprint(ed25519.PublicKey(priv[ed25519.SeedSize:]))}
	copy(sa.Signature[:], ed25519.Sign(priv, msg))
	return sa, nil
}

// Verify checks that sa is signed by pub. It returns an error wrapping
// ErrBadSignature if it is not, and ErrBadKey if pub is not a key at all.
func (sa SignedHoldAck) Verify(pub ed25519.PublicKey) error {
	msg, err := holdAckMessage(&sa.HoldAck)
	if err != nil {
		return err
	}
	return verifySig(pub, sa.Key, msg, &sa.Signature, "hold acknowledgment")
}

// CoveredBy checks that cp is the checkpoint a names: the same receiver,
// seq and head, and an epoch high-water at or above the epoch a installed.
// It checks no signature; verify both a and cp under the receiver's key
// first. Its errors wrap ErrHoldAckMismatch.
func (a HoldAck) CoveredBy(cp Checkpoint) error {
	switch {
	case cp.Receiver != a.Receiver:
		return fmt.Errorf("%w: acknowledgment is from receiver %q, the checkpoint from %q", ErrHoldAckMismatch, a.Receiver, cp.Receiver)
	case cp.Seq != a.CheckpointSeq || cp.Head != a.CheckpointHead:
		return fmt.Errorf("%w: acknowledgment names checkpoint %d/%x, not %d/%x", ErrHoldAckMismatch,
			a.CheckpointSeq, a.CheckpointHead[:8], cp.Seq, cp.Head[:8])
	case cp.EpochHighWater < a.Epoch:
		return fmt.Errorf("%w: checkpoint's epoch high-water %d is below the installed epoch %d", ErrHoldAckMismatch,
			cp.EpochHighWater, a.Epoch)
	}
	return nil
}

// Marshal returns the canonical CBOR encoding of sa.
func (sa SignedHoldAck) Marshal() ([]byte, error) {
	if err := checkHoldAck(&sa.HoldAck); err != nil {
		return nil, err
	}
	body := appendHoldAck(make([]byte, 0, 200+len(sa.Receiver)+len(sa.Scope)+len(sa.HoldID)), &sa.HoldAck)
	return appendSigned(make([]byte, 0, 128+len(body)), keyHoldAck, sa.Key, &sa.Signature, body), nil
}

// keyHoldAck is the signed form's body key; it sorts after "key" and "sig".
const keyHoldAck = "\x68hold_ack"

// ParseSignedHoldAck decodes raw strictly: exactly one canonical signed hold
// acknowledgment, no unknown, duplicate or missing keys, no trailing bytes,
// at most MaxHoldAckSize bytes. It does not verify the signature.
func ParseSignedHoldAck(raw []byte) (SignedHoldAck, error) {
	if len(raw) > MaxHoldAckSize {
		return SignedHoldAck{}, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrBadHoldAck, len(raw), MaxHoldAckSize)
	}
	var w struct {
		Key  []byte `cbor:"key"`
		Sig  []byte `cbor:"sig"`
		Body []byte `cbor:"hold_ack"`
	}
	if err := decMode.Unmarshal(raw, &w); err != nil {
		return SignedHoldAck{}, fmt.Errorf("%w: %w", ErrBadHoldAck, err)
	}
	var sa SignedHoldAck
	if err := unpackSigned(&sa.Key, &sa.Signature, w.Key, w.Sig); err != nil {
		return SignedHoldAck{}, fmt.Errorf("%w: %w", ErrBadHoldAck, err)
	}
	a, err := parseHoldAck(w.Body)
	if err != nil {
		return SignedHoldAck{}, err
	}
	sa.HoldAck = a
	if !bytes.Equal(appendSigned(nil, keyHoldAck, sa.Key, &sa.Signature, w.Body), raw) {
		return SignedHoldAck{}, fmt.Errorf("%w: not in canonical form", ErrBadHoldAck)
	}
	return sa, nil
}
