package audit

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"unicode/utf8"
)

// MaxReasonLen bounds an admission's reason in bytes.
const MaxReasonLen = 1 << 10

// MaxAdmissionSize bounds an encoded signed admission.
const MaxAdmissionSize = 4 << 10

// Admission is a recovery decision: the holder of the recovery key admits
// the database whose chain ends at AdmittedHead, although the receiver's
// anchor says SupersededAnchor. It names all three of receiver, anchor and
// head so that it cannot be replayed against any other state.
type Admission struct {
	Receiver         string // receiver id
	SupersededAnchor Head   // the anchor's seq and head
	AdmittedHead     Head   // the database's newest entry
	At               int64  // Unix nanoseconds, recovery operator's clock
	Reason           string // why; 1 to MaxReasonLen bytes of UTF-8
}

type admissionWire struct {
	At             int64  `cbor:"at"`
	Reason         string `cbor:"reason"`
	Receiver       string `cbor:"receiver"`
	AdmittedSeq    uint64 `cbor:"admitted_seq"`
	AdmittedHead   []byte `cbor:"admitted_head"`
	SupersededSeq  uint64 `cbor:"superseded_seq"`
	SupersededHead []byte `cbor:"superseded_head"`
}

func checkAdmission(a *Admission) error {
	if err := checkReceiver(a.Receiver); err != nil {
		return fmt.Errorf("%w: %w", ErrBadAdmission, err)
	}
	switch {
	case a.SupersededAnchor.Seq == 0 || a.AdmittedHead.Seq == 0:
		return fmt.Errorf("%w: seq is 0", ErrBadAdmission)
	case a.Reason == "":
		return fmt.Errorf("%w: reason is empty", ErrBadAdmission)
	case len(a.Reason) > MaxReasonLen:
		return fmt.Errorf("%w: reason is %d bytes, over the %d-byte limit", ErrBadAdmission, len(a.Reason), MaxReasonLen)
	case !utf8.ValidString(a.Reason):
		return fmt.Errorf("%w: reason is not valid UTF-8", ErrBadAdmission)
	}
	return nil
}

func appendAdmission(b []byte, a *Admission) []byte {
	b = appendHead(b, majorMap, 7)
	b = appendInt(append(b, keyAt...), a.At)
	b = appendText(append(b, "\x66reason"...), a.Reason)
	b = appendText(append(b, "\x68receiver"...), a.Receiver)
	b = appendHead(append(b, "\x6cadmitted_seq"...), majorUint, a.AdmittedHead.Seq)
	b = appendBytes(append(b, "\x6dadmitted_head"...), a.AdmittedHead.Hash[:])
	b = appendHead(append(b, "\x6esuperseded_seq"...), majorUint, a.SupersededAnchor.Seq)
	return appendBytes(append(b, "\x6fsuperseded_head"...), a.SupersededAnchor.Hash[:])
}

func admissionMessage(a *Admission) ([]byte, error) {
	if err := checkAdmission(a); err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(admissionPrefix)+192+len(a.Receiver)+len(a.Reason))
	return appendAdmission(append(b, admissionPrefix...), a), nil
}

func parseAdmission(raw []byte) (Admission, error) {
	var w admissionWire
	if err := decMode.Unmarshal(raw, &w); err != nil {
		return Admission{}, fmt.Errorf("%w: %w", ErrBadAdmission, err)
	}
	if len(w.AdmittedHead) != HashSize || len(w.SupersededHead) != HashSize {
		return Admission{}, fmt.Errorf("%w: heads are %d and %d bytes, want %d",
			ErrBadAdmission, len(w.AdmittedHead), len(w.SupersededHead), HashSize)
	}
	a := Admission{
		Receiver:         w.Receiver,
		SupersededAnchor: Head{Seq: w.SupersededSeq, Hash: Hash(w.SupersededHead)},
		AdmittedHead:     Head{Seq: w.AdmittedSeq, Hash: Hash(w.AdmittedHead)},
		At:               w.At,
		Reason:           w.Reason,
	}
	if err := checkAdmission(&a); err != nil {
		return Admission{}, err
	}
	if !bytes.Equal(appendAdmission(nil, &a), raw) {
		return Admission{}, fmt.Errorf("%w: admission not in canonical form", ErrBadAdmission)
	}
	return a, nil
}

// Check refuses an admission that is not for exactly this receiver, this
// anchor and this database head; the error wraps ErrAdmissionMismatch.
func (a Admission) Check(receiver string, anchor, head Head) error {
	switch {
	case a.Receiver != receiver:
		return fmt.Errorf("%w: admission is for receiver %q, not %q", ErrAdmissionMismatch, a.Receiver, receiver)
	case a.SupersededAnchor != anchor:
		return fmt.Errorf("%w: admission supersedes anchor %v, but the anchor is %v", ErrAdmissionMismatch, a.SupersededAnchor, anchor)
	case a.AdmittedHead != head:
		return fmt.Errorf("%w: admission admits head %v, but the database head is %v", ErrAdmissionMismatch, a.AdmittedHead, head)
	}
	return nil
}

// SignedAdmission is an admission with the Ed25519 signature of the
// recovery key whose fingerprint is Key. It is comparable with ==.
type SignedAdmission struct {
	Admission
	Key       Fingerprint                 // the recovery key's; not signed itself
	Signature [ed25519.SignatureSize]byte // Ed25519 over the domain-separated admission
}

// SignAdmission signs a with the recovery key priv, which must not be the
// receiver's key: the point of an admission is a second, separately held
// authority.
func SignAdmission(priv ed25519.PrivateKey, a Admission) (SignedAdmission, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return SignedAdmission{}, fmt.Errorf("%w: private key is %d bytes, want %d", ErrBadKey, len(priv), ed25519.PrivateKeySize)
	}
	msg, err := admissionMessage(&a)
	if err != nil {
		return SignedAdmission{}, err
	}
	sa := SignedAdmission{Admission: a, Key: KeyFingerprint(ed25519.PublicKey(priv[ed25519.SeedSize:]))}
	copy(sa.Signature[:], ed25519.Sign(priv, msg))
	return sa, nil
}

// Verify checks that sa is signed by the recovery key pub. It returns an
// error wrapping ErrBadSignature if it is not, and ErrBadKey if pub is not a
// key at all.
func (sa SignedAdmission) Verify(pub ed25519.PublicKey) error {
	msg, err := admissionMessage(&sa.Admission)
	if err != nil {
		return err
	}
	return verifySig(pub, sa.Key, msg, &sa.Signature, "admission")
}

// Marshal returns the canonical CBOR encoding of sa.
func (sa SignedAdmission) Marshal() ([]byte, error) {
	if err := checkAdmission(&sa.Admission); err != nil {
		return nil, err
	}
	body := appendAdmission(make([]byte, 0, 192+len(sa.Receiver)+len(sa.Reason)), &sa.Admission)
	return appendSigned(make([]byte, 0, 128+len(body)), keyAdmission, sa.Key, &sa.Signature, body), nil
}

// ParseSignedAdmission decodes raw strictly: exactly one canonical signed
// admission, no unknown, duplicate or missing keys, no trailing bytes, at
// most MaxAdmissionSize bytes. It does not verify the signature.
func ParseSignedAdmission(raw []byte) (SignedAdmission, error) {
	if len(raw) > MaxAdmissionSize {
		return SignedAdmission{}, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrBadAdmission, len(raw), MaxAdmissionSize)
	}
	var w struct {
		Key  []byte `cbor:"key"`
		Sig  []byte `cbor:"sig"`
		Body []byte `cbor:"admission"`
	}
	if err := decMode.Unmarshal(raw, &w); err != nil {
		return SignedAdmission{}, fmt.Errorf("%w: %w", ErrBadAdmission, err)
	}
	var sa SignedAdmission
	if err := unpackSigned(&sa.Key, &sa.Signature, w.Key, w.Sig); err != nil {
		return SignedAdmission{}, fmt.Errorf("%w: %w", ErrBadAdmission, err)
	}
	a, err := parseAdmission(w.Body)
	if err != nil {
		return SignedAdmission{}, err
	}
	sa.Admission = a
	if !bytes.Equal(appendSigned(nil, keyAdmission, sa.Key, &sa.Signature, w.Body), raw) {
		return SignedAdmission{}, fmt.Errorf("%w: not in canonical form", ErrBadAdmission)
	}
	return sa, nil
}
