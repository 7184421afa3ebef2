package api

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
)

// ErrHoldMismatch means a hold answer's JSON fields say something other
// than the signed bytes it carries, or its parts do not fit together.
var ErrHoldMismatch = errors.New("api: hold answer disagrees with its signed acknowledgment")

// Hold is the response of POST /v1/hold.
type Hold struct {
	// Scopes lists each held scope.
	Scopes []HoldScope `json:"scopes"`
	// HoldRequestedAt is the receiver's clock when the hold was requested.
	HoldRequestedAt *string `json:"hold_requested_at"`
	// HoldCommittedAt is the receiver's clock in the transaction that
	// committed the hold.
	HoldCommittedAt *string `json:"hold_committed_at"`
	// AuditSeq is the seq of the last scope's hold entry.
	AuditSeq uint64 `json:"audit_seq"`
	// Repeated says the hold repeated an earlier one with the same hold
	// id: nothing was written, and the result is the first hold's.
	Repeated bool `json:"repeated"`
	// Checkpoint is the receiver's signed checkpoint that covers every
	// scope's hold entry, or null when the result has none.
	Checkpoint *Checkpoint `json:"checkpoint"`
	// Outstanding lists the writes to remote targets of the held scopes,
	// decided before the hold, whose outcome is unknown; they were fenced
	// off before the hold was acknowledged (docs/design.md §4.2).
	Outstanding []OutstandingDispatch `json:"outstanding"`
}

// OutstandingDispatch is a kvfence.OutstandingDispatch as JSON.
type OutstandingDispatch struct {
	// Scope is the scope the write was decided in.
	Scope string `json:"scope"`
	// Action is the action the write was decided for.
	Action string `json:"action"`
	// Grant is the grant it was decided under.
	Grant string `json:"grant"`
	// Target is the target written.
	Target string `json:"target"`
	// Object is the remote object.
	Object RemoteObject `json:"object"`
	// DispatchID is the receipt stamp the write would have left.
	DispatchID string `json:"dispatch_id"`
	// Precondition is the version the write was conditioned on.
	Precondition string `json:"precondition"`
	// Version is the object's version after the fencing write.
	Version string `json:"version"`
	// AuditSeq is the seq of the decision's audit entry.
	AuditSeq uint64 `json:"audit_seq"`
}

// RemoteObject is a kvfence.RemoteObject as JSON.
type RemoteObject struct {
	// Group is the API group; empty for the core group.
	Group string `json:"group"`
	// Version is the API version.
	Version string `json:"version"`
	// Resource is the plural resource name.
	Resource string `json:"resource"`
	// Namespace is the object's namespace.
	Namespace string `json:"namespace"`
	// Name is the object's name.
	Name string `json:"name"`
}

// HoldScope is one scope's part of a hold.
type HoldScope struct {
	// Scope is the held scope's name.
	Scope string `json:"scope"`
	// PreviousEpoch is the scope's epoch before the hold.
	PreviousEpoch uint64 `json:"previous_epoch"`
	// Epoch is the scope's new epoch.
	Epoch uint64 `json:"epoch"`
	// Mode is held.
	Mode string `json:"mode"`
	// Ack is the receiver's signed acknowledgment of this scope's hold;
	// omitted where there is none (the scopes of a recovery).
	Ack *HoldAck `json:"ack,omitempty"`
}

// Checkpoint is a signed checkpoint as JSON: its fields for people and
// scripts, and SignedB64, the canonical signed bytes
// (audit.SignedCheckpoint.Marshal), which are what a verifier checks. The
// other fields must say what SignedB64 says.
type Checkpoint struct {
	// Receiver is the receiver's id.
	Receiver string `json:"receiver"`
	// Seq is the audit head's seq the checkpoint names.
	Seq uint64 `json:"seq"`
	// Head is that entry's hash, in hex.
	Head string `json:"head"`
	// Root is the RFC 6962 root of the audit entries 1..Seq, in hex.
	Root string `json:"root"`
	// State is the digest of the fence state as of Seq, in hex.
	State string `json:"state"`
	// EpochHighWater is the highest epoch of any scope as of Seq.
	EpochHighWater uint64 `json:"epoch_high_water"`
	// At is the receiver's clock when it signed.
	At *string `json:"at"`
	// KeyFingerprint is the signing key's fingerprint, as ssh-keygen -l
	// prints it ("SHA256:…").
	KeyFingerprint string `json:"key_fingerprint"`
	// SignatureB64 is the Ed25519 signature.
	SignatureB64 []byte `json:"signature_b64"`
	// SignedB64 is the canonical CBOR of the signed checkpoint.
	SignedB64 []byte `json:"signed_b64"`
}

// HoldAck is a signed hold acknowledgment as JSON; SignedB64 is the
// canonical signed bytes (audit.SignedHoldAck.Marshal), which also name
// the receiver, the scope and the checkpoint's head. The other fields
// must say what SignedB64 says.
type HoldAck struct {
	// HoldID is the hold's idempotency id; empty if it had none.
	HoldID string `json:"hold_id"`
	// PreviousEpoch is the scope's epoch before the hold.
	PreviousEpoch uint64 `json:"previous_epoch"`
	// Epoch is the epoch the hold installed.
	Epoch uint64 `json:"epoch"`
	// AuditSeq is the seq of the scope's hold entry.
	AuditSeq uint64 `json:"audit_seq"`
	// RequestedAt is the receiver's clock when the hold was asked for.
	RequestedAt *string `json:"requested_at"`
	// CommittedAt is the receiver's clock in the hold's transaction.
	CommittedAt *string `json:"committed_at"`
	// CheckpointSeq is the seq of the checkpoint that covers the entry.
	CheckpointSeq uint64 `json:"checkpoint_seq"`
	// SignedB64 is the canonical CBOR of the signed acknowledgment.
	SignedB64 []byte `json:"signed_b64"`
}

// CheckpointOf returns the JSON form of a signed checkpoint, or nil for
// the zero one.
func CheckpointOf(sc audit.SignedCheckpoint) *Checkpoint {
	if sc == (audit.SignedCheckpoint{}) {
		return nil
	}
	// A checkpoint the receiver signed passed the checks Marshal makes
	// when it was signed; should one not, the empty bytes make every
	// reader refuse it rather than trust the fields.
	raw, _ := sc.Marshal()
	return &Checkpoint{Receiver: sc.Receiver, Seq: sc.Seq, Head: hex.EncodeToString(sc.Head[:]),
		Root: hex.EncodeToString(sc.Root[:]), State: hex.EncodeToString(sc.State[:]), EpochHighWater: sc.EpochHighWater, At: unixTime(sc.At),
		KeyFingerprint: sc.Key.String(), SignatureB64: append([]byte(nil), sc.Signature[:]...), SignedB64: raw}
}

// HoldAckOf returns the JSON form of a signed hold acknowledgment, or nil
// for the zero one.
func HoldAckOf(sa audit.SignedHoldAck) *HoldAck {
	if sa.IsZero() {
		return nil
	}
	raw, _ := sa.Marshal() // as in CheckpointOf
	return &HoldAck{HoldID: sa.HoldID, PreviousEpoch: sa.PreviousEpoch, Epoch: sa.Epoch, AuditSeq: sa.AuditSeq,
		RequestedAt: unixTime(sa.RequestedAt), CommittedAt: unixTime(sa.At), CheckpointSeq: sa.CheckpointSeq,
		SignedB64: raw}
}

// SignedCheckpoint parses SignedB64 and returns the signed checkpoint,
// refusing (ErrHoldMismatch) any field that says otherwise. It checks no
// signature.
func (c *Checkpoint) SignedCheckpoint() (audit.SignedCheckpoint, error) {
	sc, err := audit.ParseSignedCheckpoint(c.SignedB64)
	if err != nil {
		return audit.SignedCheckpoint{}, fmt.Errorf("checkpoint: signed_b64: %w", err)
	}
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"receiver", c.Receiver == sc.Receiver},
		{"seq", c.Seq == sc.Seq},
		{"head", c.Head == hex.EncodeToString(sc.Head[:])},
		{"root", c.Root == hex.EncodeToString(sc.Root[:])},
		{"state", c.State == hex.EncodeToString(sc.State[:])},
		{"epoch_high_water", c.EpochHighWater == sc.EpochHighWater},
		{"at", sameUnixTime(c.At, sc.At)},
		{"key_fingerprint", c.KeyFingerprint == sc.Key.String()},
		{"signature_b64", bytes.Equal(c.SignatureB64, sc.Signature[:])},
	} {
		if !f.ok {
			return audit.SignedCheckpoint{}, fmt.Errorf("%w: checkpoint's %s is not what its signed_b64 says", ErrHoldMismatch, f.name)
		}
	}
	return sc, nil
}

// SignedHoldAck parses SignedB64 and returns the signed acknowledgment,
// refusing (ErrHoldMismatch) any field that says otherwise. It checks no
// signature.
func (a *HoldAck) SignedHoldAck() (audit.SignedHoldAck, error) {
	sa, err := audit.ParseSignedHoldAck(a.SignedB64)
	if err != nil {
		return audit.SignedHoldAck{}, fmt.Errorf("ack: signed_b64: %w", err)
	}
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"hold_id", a.HoldID == sa.HoldID},
		{"previous_epoch", a.PreviousEpoch == sa.PreviousEpoch},
		{"epoch", a.Epoch == sa.Epoch},
		{"audit_seq", a.AuditSeq == sa.AuditSeq},
		{"requested_at", sameUnixTime(a.RequestedAt, sa.RequestedAt)},
		{"committed_at", sameUnixTime(a.CommittedAt, sa.At)},
		{"checkpoint_seq", a.CheckpointSeq == sa.CheckpointSeq},
	} {
		if !f.ok {
			return audit.SignedHoldAck{}, fmt.Errorf("%w: ack's %s is not what its signed_b64 says", ErrHoldMismatch, f.name)
		}
	}
	return sa, nil
}

// HoldOf returns the response for a committed hold.
func HoldOf(res kvfence.HoldResult) Hold {
	out := Hold{Scopes: []HoldScope{}, HoldRequestedAt: Time(res.HoldRequestedAt),
		HoldCommittedAt: Time(res.HoldCommittedAt), AuditSeq: res.AuditSeq, Repeated: res.Repeated,
		Checkpoint: CheckpointOf(res.Checkpoint)}
	for _, s := range res.Scopes {
		out.Scopes = append(out.Scopes, HoldScope{Scope: s.Scope, PreviousEpoch: s.PreviousEpoch, Epoch: s.Epoch,
			Mode: string(kvfence.ModeHeld), Ack: HoldAckOf(s.Ack)})
	}
	out.Outstanding = make([]OutstandingDispatch, 0, len(res.Outstanding))
	for _, o := range res.Outstanding {
		out.Outstanding = append(out.Outstanding, OutstandingDispatch{Scope: o.Scope, Action: o.Action, Grant: o.Grant,
			Target: o.Target, Object: RemoteObject(o.Object), DispatchID: o.DispatchID,
			Precondition: o.Precondition, Version: o.Version, AuditSeq: o.AuditSeq})
	}
	return out
}

// Result returns the hold a response describes. The checkpoint and each
// acknowledgment are taken from their signed bytes, and refused
// (ErrHoldMismatch) where a JSON field says otherwise, where an
// acknowledgment names another scope, other epochs or times than its
// scope's part and the hold's, or a checkpoint other than the one the
// answer carries, and where the checkpoint does not cover the hold's
// entries. No signature is checked: that needs the receiver's key.
func (h Hold) Result() (kvfence.HoldResult, error) {
	out := kvfence.HoldResult{AuditSeq: h.AuditSeq, Repeated: h.Repeated}
	var err error
	if out.HoldRequestedAt, err = ParseTime(h.HoldRequestedAt); err != nil {
		return out, err
	}
	if out.HoldCommittedAt, err = ParseTime(h.HoldCommittedAt); err != nil {
		return out, err
	}
	if h.Checkpoint != nil {
		if out.Checkpoint, err = h.Checkpoint.SignedCheckpoint(); err != nil {
			return out, err
		}
		if out.Checkpoint.Seq < h.AuditSeq {
			return out, fmt.Errorf("%w: checkpoint %d does not cover the hold's entry %d", ErrHoldMismatch,
				out.Checkpoint.Seq, h.AuditSeq)
		}
	}
	var last uint64
	for _, s := range h.Scopes {
		hs := kvfence.HeldScope{Scope: s.Scope, PreviousEpoch: s.PreviousEpoch, Epoch: s.Epoch}
		if s.Ack != nil {
			if hs.Ack, err = s.Ack.SignedHoldAck(); err != nil {
				return out, fmt.Errorf("scope %q: %w", s.Scope, err)
			}
			if err := ackFits(&hs, &out); err != nil {
				return out, fmt.Errorf("scope %q: %w", s.Scope, err)
			}
			last = max(last, hs.Ack.AuditSeq)
		}
		out.Scopes = append(out.Scopes, hs)
	}
	for _, o := range h.Outstanding {
		out.Outstanding = append(out.Outstanding, kvfence.OutstandingDispatch{Scope: o.Scope, Action: o.Action, Grant: o.Grant,
			Target: o.Target, Object: kvfence.RemoteObject(o.Object), DispatchID: o.DispatchID,
			Precondition: o.Precondition, Version: o.Version, AuditSeq: o.AuditSeq})
	}
	if last != 0 && last != out.AuditSeq {
		// The hold's entries are its scopes', one each, the last of them
		// at audit_seq: the acknowledgments sign where they are.
		return out, fmt.Errorf("%w: the answer's audit seq is %d, its last acknowledged entry %d", ErrHoldMismatch, out.AuditSeq, last)
	}
	return out, nil
}

// ackFits checks that a scope's acknowledgment is of that scope's hold,
// at the hold's times, and names the checkpoint the answer carries.
func ackFits(hs *kvfence.HeldScope, res *kvfence.HoldResult) error {
	a := &hs.Ack
	switch {
	case a.Scope != hs.Scope:
		return fmt.Errorf("%w: the ack is for scope %q", ErrHoldMismatch, a.Scope)
	case a.PreviousEpoch != hs.PreviousEpoch || a.Epoch != hs.Epoch:
		return fmt.Errorf("%w: the ack says epoch %d to %d, the answer %d to %d", ErrHoldMismatch,
			a.PreviousEpoch, a.Epoch, hs.PreviousEpoch, hs.Epoch)
	case a.At != res.HoldCommittedAt.UnixNano() || a.RequestedAt != res.HoldRequestedAt.UnixNano():
		return fmt.Errorf("%w: the ack's times are not the hold's", ErrHoldMismatch)
	case a.AuditSeq > res.AuditSeq:
		return fmt.Errorf("%w: the ack's entry %d is after the hold's last, %d", ErrHoldMismatch, a.AuditSeq, res.AuditSeq)
	case res.Checkpoint == (audit.SignedCheckpoint{}):
		return fmt.Errorf("%w: an ack without the checkpoint it names", ErrHoldMismatch)
	case a.Key != res.Checkpoint.Key:
		return fmt.Errorf("%w: the ack is signed by key %v, the checkpoint by %v", ErrHoldMismatch, a.Key, res.Checkpoint.Key)
	}
	if err := a.CoveredBy(res.Checkpoint.Checkpoint); err != nil {
		return fmt.Errorf("%w: %w", ErrHoldMismatch, err)
	}
	return nil
}

// unixTime formats a Unix-nanosecond time of the receiver's as Time does.
func unixTime(ns int64) *string {
	s := time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
	return &s
}

// sameUnixTime reports whether s is the instant ns spelled as the
// receiver spells it (unixTime): one spelling, so that the JSON and the
// signed bytes cannot be made to differ in anything a reader might parse.
func sameUnixTime(s *string, ns int64) bool {
	return s != nil && *s == *unixTime(ns)
}
