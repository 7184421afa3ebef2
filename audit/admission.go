package audit

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"time"
	"unicode/utf8"
)

// MaxReasonLen bounds an admission's reason in bytes.
const MaxReasonLen = 1 << 10

// MaxAdmissionSize bounds an encoded signed admission.
const MaxAdmissionSize = 4 << 10

// reanchorPrefix is the domain separator of a lost-anchor admission. It
// differs from admissionPrefix so that a signature on one kind of admission
// is worthless as the other, whatever their bodies.
const reanchorPrefix = "kvfence/reanchor/v3\n"

// MaxAdmissionValidity bounds how long after its signing an admission may
// be applied (Expires minus At). An admission is a bearer token for one
// database state: whoever holds it and a copy of that state can re-admit
// the copy while it is valid, so it is meant to be used within the hour,
// not kept.
const MaxAdmissionValidity = 24 * time.Hour

// MaxAdmissionSkew is how far ahead of the recovering machine's clock an
// admission's At may be. An admission signed on a clock that runs ahead
// would otherwise stay valid that much longer on the machine that applies
// it; a few minutes covers clocks that are kept in step at all.
const MaxAdmissionSkew = 5 * time.Minute

// Admission is a recovery decision, in one of two kinds.
//
// An ordinary admission (LostAnchor false): the holder of the recovery key
// admits the database whose chain ends at AdmittedHead, although the
// receiver's anchor says SupersededAnchor. It names all three of receiver,
// anchor and head so that it cannot be replayed against any other state.
//
// A lost-anchor admission (LostAnchor true): the anchor is gone, or damaged
// beyond use, so there is nothing to supersede; SupersededAnchor is zero
// and is not encoded. It names the receiver and the head, and carries
// EpochFloor, because without its anchor nothing vouches for the
// database's own epoch high-water. It is a distinct form with its own
// keys and its own signature prefix, never an ordinary admission with a
// zero anchor.
type Admission struct {
	Receiver         string // receiver id
	LostAnchor       bool   // the lost-anchor kind: there is no anchor to supersede
	SupersededAnchor Head   // the anchor's seq and head; zero for a lost anchor
	AdmittedHead     Head   // the database's newest entry
	// AdmittedState is the sum of the fence state's digest (StateHash)
	// of the database as the recovery operator inspected it: recovery
	// signs a new checkpoint over that state, so the admission must pin it,
	// or records edited after the admission was signed would be signed too.
	AdmittedState Hash
	// EpochFloor, for a lost anchor only, is the recovery operator's best
	// knowledge of the highest epoch the receiver ever used (from
	// monitoring, or the lost anchor's last known value); every scope is
	// held above it. It is 0 in an ordinary admission, whose anchor
	// vouches for the high-water.
	EpochFloor uint64
	At         int64 // Unix nanoseconds, recovery operator's clock
	// Expires is when the admission stops being valid, in Unix
	// nanoseconds on the recovery operator's clock: after At, and at most
	// MaxAdmissionValidity after it. Recovery refuses it from then on,
	// by the recovering machine's clock (CheckTime).
	Expires int64
	Reason  string // why; 1 to MaxReasonLen bytes of UTF-8
	// Witnessed names, for a receiver with witnesses, each witness's
	// latest cosigned checkpoint of the receiver as the recovery operator
	// saw it, sorted by witness name, each name once, at most
	// MaxWitnessed. Recover refuses the admission unless every witness
	// that answers is named at exactly what it holds; a witness accepts
	// the recovered chain over its own only with an admission naming it
	// at its latest. Empty, it is not encoded: admissions without
	// witnesses keep their form.
	Witnessed []WitnessedCheckpoint
	// AdmittedRoot is, with Witnessed only, the RFC 6962 root of the
	// database's audit tree at AdmittedHead.Seq. A witness accepts a
	// recovered checkpoint only with a consistency proof from this tree,
	// so the chain it moves to holds the head the recovery key admitted:
	// the admitted head's hash is of the hash chain, which a witness
	// cannot see. Recover refuses an admission whose root is not the
	// database's. Zero, and not encoded, without Witnessed.
	AdmittedRoot Hash
}

// admissionWire holds the keys of both kinds; which ones are present is
// decided by re-encoding, so a key of the other kind is refused.
type admissionWire struct {
	At     int64  `cbor:"at"`
	Reason string `cbor:"reason"`
	// Expires is a pointer so that an admission without it, one of the
	// second format, is told apart from a zero expiry and named as such.
	Expires       *int64 `cbor:"expires"`
	Receiver      string `cbor:"receiver"`
	EpochFloor    uint64 `cbor:"epoch_floor"`
	LostAnchor    bool   `cbor:"lost_anchor"`
	AdmittedSeq   uint64 `cbor:"admitted_seq"`
	AdmittedHead  []byte `cbor:"admitted_head"`
	AdmittedState []byte `cbor:"admitted_state"`
	// AdmittedRoot is present only with Witnessed.
	AdmittedRoot   []byte `cbor:"admitted_root"`
	SupersededSeq  uint64 `cbor:"superseded_seq"`
	SupersededHead []byte `cbor:"superseded_head"`
	// Witnessed is optional: absent, it decodes as empty.
	Witnessed []witnessedWire `cbor:"witnessed"`
}

func checkAdmission(a *Admission) error {
	if err := checkReceiver(a.Receiver); err != nil {
		return fmt.Errorf("%w: %w", ErrBadAdmission, err)
	}
	if err := checkWitnessed(a.Witnessed); err != nil {
		return err
	}
	switch {
	case len(a.Witnessed) > 0 && a.AdmittedRoot == (Hash{}):
		return fmt.Errorf("%w: an admission naming witnesses names the admitted tree's root", ErrBadAdmission)
	case len(a.Witnessed) == 0 && a.AdmittedRoot != (Hash{}):
		return fmt.Errorf("%w: an admitted tree root belongs in an admission naming witnesses only", ErrBadAdmission)
	case a.AdmittedHead.Seq == 0:
		return fmt.Errorf("%w: admitted seq is 0", ErrBadAdmission)
	case a.LostAnchor && a.SupersededAnchor != (Head{}):
		return fmt.Errorf("%w: a lost-anchor admission supersedes no anchor", ErrBadAdmission)
	case !a.LostAnchor && a.SupersededAnchor.Seq == 0:
		return fmt.Errorf("%w: superseded seq is 0", ErrBadAdmission)
	case !a.LostAnchor && a.EpochFloor != 0:
		return fmt.Errorf("%w: an epoch floor belongs in a lost-anchor admission only", ErrBadAdmission)
	case a.Reason == "":
		return fmt.Errorf("%w: reason is empty", ErrBadAdmission)
	case len(a.Reason) > MaxReasonLen:
		return fmt.Errorf("%w: reason is %d bytes, over the %d-byte limit", ErrBadAdmission, len(a.Reason), MaxReasonLen)
	case !utf8.ValidString(a.Reason):
		return fmt.Errorf("%w: reason is not valid UTF-8", ErrBadAdmission)
	case a.Expires <= a.At:
		return fmt.Errorf("%w: expires %s is not after at %s", ErrBadAdmission, formatTime(a.Expires), formatTime(a.At))
	// Expires > At, so the difference fits a uint64 exactly, whatever the
	// signs.
	case uint64(a.Expires)-uint64(a.At) > uint64(MaxAdmissionValidity):
		return fmt.Errorf("%w: valid for %v from at %s, over the %v limit", ErrBadAdmission,
			time.Duration(uint64(a.Expires)-uint64(a.At)), formatTime(a.At), MaxAdmissionValidity)
	}
	return nil
}

func appendAdmission(b []byte, a *Admission) []byte {
	if a.LostAnchor {
		return appendLostAnchor(b, a)
	}
	b = appendHead(b, majorMap, 9+witnessedKeys(a))
	b = appendInt(append(b, keyAt...), a.At)
	b = appendText(append(b, "\x66reason"...), a.Reason)
	b = appendInt(append(b, "\x67expires"...), a.Expires)
	b = appendText(append(b, "\x68receiver"...), a.Receiver)
	b = appendWitnessed(b, a.Witnessed)
	b = appendHead(append(b, "\x6cadmitted_seq"...), majorUint, a.AdmittedHead.Seq)
	b = appendBytes(append(b, "\x6dadmitted_head"...), a.AdmittedHead.Hash[:])
	b = appendAdmittedRoot(b, a)
	b = appendBytes(append(b, "\x6eadmitted_state"...), a.AdmittedState[:])
	b = appendHead(append(b, "\x6esuperseded_seq"...), majorUint, a.SupersededAnchor.Seq)
	return appendBytes(append(b, "\x6fsuperseded_head"...), a.SupersededAnchor.Hash[:])
}

// appendLostAnchor writes the lost-anchor form: no superseded keys, and an
// explicit lost_anchor true (0xf5) so that the kind is spelled out in the
// bytes, not inferred from what is missing.
func appendLostAnchor(b []byte, a *Admission) []byte {
	b = appendHead(b, majorMap, 9+witnessedKeys(a))
	b = appendInt(append(b, keyAt...), a.At)
	b = appendText(append(b, "\x66reason"...), a.Reason)
	b = appendInt(append(b, "\x67expires"...), a.Expires)
	b = appendText(append(b, "\x68receiver"...), a.Receiver)
	b = appendWitnessed(b, a.Witnessed)
	b = appendHead(append(b, "\x6bepoch_floor"...), majorUint, a.EpochFloor)
	b = append(b, "\x6blost_anchor\xf5"...)
	b = appendHead(append(b, "\x6cadmitted_seq"...), majorUint, a.AdmittedHead.Seq)
	b = appendBytes(append(b, "\x6dadmitted_head"...), a.AdmittedHead.Hash[:])
	b = appendAdmittedRoot(b, a)
	return appendBytes(append(b, "\x6eadmitted_state"...), a.AdmittedState[:])
}

// appendAdmittedRoot writes the optional "admitted_root" key, present with
// Witnessed only; it sorts after "admitted_head" (same length, "h" < "r")
// and before the 14-byte keys.
func appendAdmittedRoot(b []byte, a *Admission) []byte {
	if len(a.Witnessed) == 0 {
		return b
	}
	return appendBytes(append(b, "\x6dadmitted_root"...), a.AdmittedRoot[:])
}

func admissionMessage(a *Admission) ([]byte, error) {
	if err := checkAdmission(a); err != nil {
		return nil, err
	}
	prefix := admissionPrefix
	if a.LostAnchor {
		prefix = reanchorPrefix
	}
	b := make([]byte, 0, len(prefix)+256+len(a.Receiver)+len(a.Reason))
	return appendAdmission(append(b, prefix...), a), nil
}

func parseAdmission(raw []byte) (Admission, error) {
	var w admissionWire
	if err := decMode.Unmarshal(raw, &w); err != nil {
		return Admission{}, fmt.Errorf("%w: %w", ErrBadAdmission, err)
	}
	if w.Expires == nil {
		return Admission{}, fmt.Errorf("%w: %w", ErrBadAdmission, ErrAdmissionV2)
	}
	if len(w.AdmittedHead) != HashSize || len(w.AdmittedState) != HashSize {
		return Admission{}, fmt.Errorf("%w: admitted head and state are %d and %d bytes, want %d", ErrBadAdmission,
			len(w.AdmittedHead), len(w.AdmittedState), HashSize)
	}
	a := Admission{
		Receiver:      w.Receiver,
		LostAnchor:    w.LostAnchor,
		AdmittedHead:  Head{Seq: w.AdmittedSeq, Hash: Hash(w.AdmittedHead)},
		AdmittedState: Hash(w.AdmittedState),
		EpochFloor:    w.EpochFloor,
		At:            w.At,
		Expires:       *w.Expires,
		Reason:        w.Reason,
	}
	var err error
	if a.Witnessed, err = parseWitnessed(w.Witnessed); err != nil {
		return Admission{}, err
	}
	switch {
	case w.AdmittedRoot == nil:
	case len(w.AdmittedRoot) != HashSize:
		return Admission{}, fmt.Errorf("%w: admitted root is %d bytes, want %d", ErrBadAdmission, len(w.AdmittedRoot), HashSize)
	default:
		a.AdmittedRoot = Hash(w.AdmittedRoot)
	}
	// A lost-anchor admission's superseded keys, if any, are left out here
	// and so make the re-encoding differ below.
	if !a.LostAnchor {
		if len(w.SupersededHead) != HashSize {
			return Admission{}, fmt.Errorf("%w: superseded head is %d bytes, want %d", ErrBadAdmission, len(w.SupersededHead), HashSize)
		}
		a.SupersededAnchor = Head{Seq: w.SupersededSeq, Hash: Hash(w.SupersededHead)}
	}
	if err := checkAdmission(&a); err != nil {
		return Admission{}, err
	}
	if !bytes.Equal(appendAdmission(nil, &a), raw) {
		return Admission{}, fmt.Errorf("%w: admission not in canonical form", ErrBadAdmission)
	}
	return a, nil
}

// Check refuses an admission that is not an ordinary one for exactly this
// receiver, this anchor, this database head and this state (the sum of
// the database's StateHash); the error wraps ErrAdmissionMismatch. A
// lost-anchor admission never passes: it names no anchor, so it cannot
// supersede one.
func (a Admission) Check(receiver string, anchor, head Head, state Hash) error {
	switch {
	case a.LostAnchor:
		return fmt.Errorf("%w: a lost-anchor admission cannot supersede anchor %v", ErrAdmissionMismatch, anchor)
	case a.Receiver != receiver:
		return fmt.Errorf("%w: admission is for receiver %q, not %q", ErrAdmissionMismatch, a.Receiver, receiver)
	case a.SupersededAnchor != anchor:
		return fmt.Errorf("%w: admission supersedes anchor %v, but the anchor is %v", ErrAdmissionMismatch, a.SupersededAnchor, anchor)
	}
	return a.checkAdmitted(head, state)
}

// checkAdmitted compares the database the admission admits with the one at
// hand.
func (a Admission) checkAdmitted(head Head, state Hash) error {
	switch {
	case a.AdmittedHead != head:
		return fmt.Errorf("%w: admission admits head %v, but the database head is %v", ErrAdmissionMismatch, a.AdmittedHead, head)
	case a.AdmittedState != state:
		return fmt.Errorf("%w: admission admits state %x, but the database's state is %x: its records changed after the admission was signed",
			ErrAdmissionMismatch, a.AdmittedState[:], state[:])
	}
	return nil
}

// CheckLostAnchor refuses an admission that is not a lost-anchor one for
// exactly this receiver, this database head and this state; the error
// wraps ErrAdmissionMismatch. Whether the anchor is really lost is for the
// caller to establish: the admission only says that its signer believed so.
func (a Admission) CheckLostAnchor(receiver string, head Head, state Hash) error {
	switch {
	case !a.LostAnchor:
		return fmt.Errorf("%w: the admission supersedes anchor %v; it is not for a lost anchor", ErrAdmissionMismatch, a.SupersededAnchor)
	case a.Receiver != receiver:
		return fmt.Errorf("%w: admission is for receiver %q, not %q", ErrAdmissionMismatch, a.Receiver, receiver)
	}
	return a.checkAdmitted(head, state)
}

// CheckTime refuses an admission that now, the recovering machine's clock,
// puts outside its validity: at or after Expires (ErrAdmissionExpired), or
// with an At more than MaxAdmissionSkew ahead of now
// (ErrAdmissionNotYetValid), whose expiry would otherwise last longer on
// this clock than the signer meant.
func (a Admission) CheckTime(now time.Time) error {
	n := now.UnixNano()
	switch {
	case n >= a.Expires:
		return fmt.Errorf("%w: it expired at %s, and it is %s here (signed at %s)", ErrAdmissionExpired,
			formatTime(a.Expires), formatTime(n), formatTime(a.At))
	case a.At > n && uint64(a.At)-uint64(n) > uint64(MaxAdmissionSkew):
		return fmt.Errorf("%w: it was signed at %s, which is %v ahead of this machine's clock (%s); the limit is %v",
			ErrAdmissionNotYetValid, formatTime(a.At), time.Duration(uint64(a.At)-uint64(n)), formatTime(n), MaxAdmissionSkew)
	}
	return nil
}

// SignedAdmission is an admission with the Ed25519 signature of the
// recovery key whose fingerprint is Key. Its Witnessed list makes it not
// comparable with ==.
type SignedAdmission struct {
	// Admission is the signed statement.
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
	// A long reason and many witnessed checkpoints together could make an
	// admission that ParseSignedAdmission refuses: refuse it here.
	if raw, err := sa.Marshal(); err != nil {
		return SignedAdmission{}, err
	} else if len(raw) > MaxAdmissionSize {
		return SignedAdmission{}, fmt.Errorf("%w: %d bytes encoded, over the %d-byte limit (shorten the reason or the witnessed list)",
			ErrBadAdmission, len(raw), MaxAdmissionSize)
	}
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
	body := appendAdmission(make([]byte, 0, 208+len(sa.Receiver)+len(sa.Reason)+96*len(sa.Witnessed)), &sa.Admission)
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
