package checkpoint

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// cosignatureHeader is the domain separator of c2sp.org/tlog-cosignature.
const cosignatureHeader = "cosignature/v1\n"

// cosignatureLen is the signature after the key ID: a u64 timestamp and
// an Ed25519 signature.
const cosignatureLen = 8 + ed25519.SignatureSize

// DefaultMaxSkew is how far in the future a cosignature's timestamp may be
// when CosignatureVerifierOptions.MaxSkew is zero.
const DefaultMaxSkew = 5 * time.Minute

// CosignedMessage returns the bytes a cosignature/v1 signs: the header
// line, "time <seconds>" and the checkpoint body.
func CosignedMessage(body []byte, timestamp uint64) []byte {
	msg := make([]byte, 0, len(cosignatureHeader)+26+len(body))
	msg = append(msg, cosignatureHeader...)
	msg = append(msg, "time "...)
	msg = strconv.AppendUint(msg, timestamp, 10)
	msg = append(msg, '\n')
	return append(msg, body...)
}

// CosignatureKeyID returns the key ID of an Ed25519 cosigner:
// SHA-256(name || "\n" || 0x04 || public key)[:4].
func CosignatureKeyID(name string, pub ed25519.PublicKey) uint32 {
	return keyID(name, sigTypeCosignature, pub)
}

// CosignatureVerifierKey returns the vkey of a cosigner:
// "name+hex key ID+base64(0x04 || public key)".
// A public key of small order is refused (see CheckPublicKey).
func CosignatureVerifierKey(name string, pub ed25519.PublicKey) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	if err := CheckPublicKey(pub); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s+%08x+%s", name, CosignatureKeyID(name, pub),
		base64.StdEncoding.EncodeToString(append([]byte{sigTypeCosignature}, pub...))), nil
}

// Cosigner is a note signer that makes cosignature/v1 signatures, each
// stamped with its clock's time at signing.
type Cosigner struct {
	name string
	id   uint32
	priv ed25519.PrivateKey
	now  func() time.Time
}

// NewCosigner returns a cosigner named name (the witness's name) with the
// private key priv; now is its clock, time.Now when nil.
func NewCosigner(name string, priv ed25519.PrivateKey, now func() time.Time) (*Cosigner, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: private key is %d bytes, want %d", ErrMalformed, len(priv), ed25519.PrivateKeySize)
	}
	if now == nil {
		now = time.Now
	}
	pub := priv.Public().(ed25519.PublicKey)
	return &Cosigner{name: name, id: CosignatureKeyID(name, pub), priv: priv, now: now}, nil
}

// Name returns the cosigner's name.
func (s *Cosigner) Name() string { return s.name }

// KeyHash returns the cosigner's key ID.
func (s *Cosigner) KeyHash() uint32 { return s.id }

// Sign returns the timestamp and signature of a cosignature over the
// checkpoint body msg, at the cosigner's clock's current second.
func (s *Cosigner) Sign(msg []byte) ([]byte, error) {
	return s.signAt(msg, s.now())
}

func (s *Cosigner) signAt(body []byte, at time.Time) ([]byte, error) {
	if at.Unix() < 0 {
		return nil, fmt.Errorf("%w: cosignature time %v is before 1970", ErrMalformed, at)
	}
	ts := uint64(at.Unix())
	sig := make([]byte, 8, cosignatureLen)
	binary.BigEndian.PutUint64(sig, ts)
	return append(sig, ed25519.Sign(s.priv, CosignedMessage(body, ts))...), nil
}

// Line returns the cosignature line over a checkpoint body at time at:
// "— name base64(key ID || timestamp || signature)\n". The body must parse.
func (s *Cosigner) Line(body []byte, at time.Time) (string, error) {
	if _, err := Parse(body); err != nil {
		return "", err
	}
	sig, err := s.signAt(body, at)
	if err != nil {
		return "", err
	}
	var id [4]byte
	binary.BigEndian.PutUint32(id[:], s.id)
	return "— " + s.name + " " + base64.StdEncoding.EncodeToString(append(id[:], sig...)) + "\n", nil
}

// Cosign returns the cosignature line of the witness named name with key
// priv over a checkpoint body, at time at.
func Cosign(body []byte, name string, priv ed25519.PrivateKey, at time.Time) (string, error) {
	s, err := NewCosigner(name, priv, nil)
	if err != nil {
		return "", err
	}
	return s.Line(body, at)
}

// CosignatureVerifierOptions configures a CosignatureVerifier.
type CosignatureVerifierOptions struct {
	// MaxSkew is how far past Now a timestamp may be; zero means
	// DefaultMaxSkew, a negative value is refused.
	MaxSkew time.Duration
	// Now is the verifier's clock; nil means time.Now.
	Now func() time.Time
}

// CosignatureVerifier checks cosignature/v1 signatures of one witness. It
// is a note.Verifier, so note.Open checks it beside a log's key.
type CosignatureVerifier struct {
	name    string
	id      uint32
	pub     ed25519.PublicKey
	maxSkew time.Duration
	now     func() time.Time
}

// NewCosignatureVerifier returns the verifier of the witness named name
// with public key pub.
func NewCosignatureVerifier(name string, pub ed25519.PublicKey, opts CosignatureVerifierOptions) (*CosignatureVerifier, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if err := CheckPublicKey(pub); err != nil {
		return nil, err
	}
	if opts.MaxSkew < 0 {
		return nil, fmt.Errorf("%w: negative skew %v", ErrMalformed, opts.MaxSkew)
	}
	if opts.MaxSkew == 0 {
		opts.MaxSkew = DefaultMaxSkew
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &CosignatureVerifier{name: name, id: CosignatureKeyID(name, pub), pub: pub,
		maxSkew: opts.MaxSkew, now: opts.Now}, nil
}

// Name returns the witness's name.
func (v *CosignatureVerifier) Name() string { return v.name }

// KeyHash returns the witness's cosignature key ID.
func (v *CosignatureVerifier) KeyHash() uint32 { return v.id }

// PublicKey returns a copy of the witness's Ed25519 public key, so that a
// set of witnesses can be checked for one key counted under two names.
func (v *CosignatureVerifier) PublicKey() ed25519.PublicKey {
	return append(ed25519.PublicKey(nil), v.pub...)
}

// Now returns the time of the verifier's clock; callers that bound a
// cosignature's age measure it against the same clock as its skew.
func (v *CosignatureVerifier) Now() time.Time { return v.now() }

// Verify reports whether sig (timestamp and signature, the key ID already
// removed) is this witness's cosignature over the checkpoint body msg with
// a timestamp not beyond the allowed skew.
func (v *CosignatureVerifier) Verify(msg, sig []byte) bool {
	_, err := v.verify(msg, sig)
	return err == nil
}

func (v *CosignatureVerifier) verify(body, sig []byte) (time.Time, error) {
	if len(sig) != cosignatureLen {
		return time.Time{}, fmt.Errorf("%w: cosignature is %d bytes after the key ID, want %d", ErrMalformed, len(sig), cosignatureLen)
	}
	ts := binary.BigEndian.Uint64(sig[:8])
	if ts > math.MaxInt64 {
		return time.Time{}, fmt.Errorf("%w: cosignature timestamp %d is over 2^63-1", ErrMalformed, ts)
	}
	at := time.Unix(int64(ts), 0).UTC()
	if limit := v.now().Add(v.maxSkew); at.After(limit) {
		return time.Time{}, fmt.Errorf("%w: %s is after %s", ErrFutureTimestamp, at.Format(time.RFC3339), limit.UTC().Format(time.RFC3339))
	}
	if !ed25519.Verify(v.pub, CosignedMessage(body, ts), sig[8:]) {
		return time.Time{}, fmt.Errorf("%w: cosignature by %s", ErrBadSignature, v.name)
	}
	return at, nil
}

// VerifyLine checks one cosignature line (with or without its final
// newline) over a checkpoint body and returns its timestamp. It returns
// ErrMalformed for a line that does not parse, ErrWrongKey for another
// name or key ID, ErrFutureTimestamp and ErrBadSignature.
func (v *CosignatureVerifier) VerifyLine(body []byte, line string) (time.Time, error) {
	if _, err := Parse(body); err != nil {
		return time.Time{}, err
	}
	line = strings.TrimSuffix(line, "\n")
	rest, ok := strings.CutPrefix(line, "— ")
	if !ok {
		return time.Time{}, fmt.Errorf("%w: cosignature line does not start with \"— \"", ErrMalformed)
	}
	name, b64, ok := strings.Cut(rest, " ")
	if !ok || CheckName(name) != nil {
		return time.Time{}, fmt.Errorf("%w: cosignature line has no valid key name", ErrMalformed)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil || base64.StdEncoding.EncodeToString(raw) != b64 || len(raw) < 4 {
		return time.Time{}, fmt.Errorf("%w: cosignature is not canonical base64", ErrMalformed)
	}
	if id := binary.BigEndian.Uint32(raw[:4]); name != v.name || id != v.id {
		return time.Time{}, fmt.Errorf("%w: line is by %s+%08x, want %s+%08x", ErrWrongKey, name, id, v.name, v.id)
	}
	return v.verify(body, raw[4:])
}

// static checks that the signers and verifiers fit the note package.
var (
	_ note.Signer   = (*Cosigner)(nil)
	_ note.Verifier = (*CosignatureVerifier)(nil)
)
