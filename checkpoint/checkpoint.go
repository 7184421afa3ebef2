package checkpoint

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/edkey"
	"github.com/kvfence/kvfence/internal/ident"
)

// Errors of this package; every error it returns wraps one of them.
var (
	// ErrMalformed means a checkpoint body, signed note, cosignature line or
	// name is not in the one encoding this package accepts.
	ErrMalformed = errors.New("malformed checkpoint")

	// ErrUnverified means a signed note carries no signature from the
	// expected key (other keys' signatures are ignored, as C2SP says).
	ErrUnverified = errors.New("checkpoint carries no signature from the trusted key")

	// ErrBadSignature means a signature line names the expected key (its
	// name and key ID) but the signature does not verify.
	ErrBadSignature = errors.New("checkpoint signature does not verify")

	// ErrWrongKey means a cosignature line names another cosigner or
	// another key ID than the verifier's.
	ErrWrongKey = errors.New("cosignature is from another key")

	// ErrFutureTimestamp means a cosignature's timestamp is later than the
	// verifier's clock plus its allowed skew.
	ErrFutureTimestamp = errors.New("cosignature timestamp is in the future")
)

// MaxOriginLen bounds an origin line in bytes.
const MaxOriginLen = 1024

// MaxNoteSize bounds a signed note in bytes: a body with a few extension
// lines and a few dozen signature lines fits many times over.
const MaxNoteSize = 64 << 10

// Checkpoint is a tlog-checkpoint body: the log named Origin had Size
// leaves, whose RFC 6962 Merkle tree hash is Root.
type Checkpoint struct {
	// Origin is the log's unique name, the body's first line.
	Origin string
	// Size is the number of leaves in the tree.
	Size uint64
	// Root is the RFC 6962 root hash of the tree of Size leaves.
	Root tlog.Hash
	// Extensions are the optional lines after the root, without their
	// newlines; each is non-empty.
	Extensions []string
}

// Marshal returns the checkpoint body: origin, size, base64 root and the
// extension lines, each ending in "\n". It does not check the values;
// Parse does, and a Checkpoint that Parse returned marshals back to the
// bytes it was parsed from.
func (c Checkpoint) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString(c.Origin)
	b.WriteByte('\n')
	b.WriteString(strconv.FormatUint(c.Size, 10))
	b.WriteByte('\n')
	b.WriteString(base64.StdEncoding.EncodeToString(c.Root[:]))
	b.WriteByte('\n')
	for _, e := range c.Extensions {
		b.WriteString(e)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Parse reads a checkpoint body in exactly the encoding Marshal writes and
// returns ErrMalformed, saying which line is wrong, for anything else.
func Parse(body []byte) (Checkpoint, error) {
	if len(body) > MaxNoteSize {
		return Checkpoint{}, fmt.Errorf("%w: body is %d bytes, over the %d-byte limit", ErrMalformed, len(body), MaxNoteSize)
	}
	if len(body) == 0 || body[len(body)-1] != '\n' {
		return Checkpoint{}, fmt.Errorf("%w: body does not end in a newline", ErrMalformed)
	}
	lines := strings.Split(string(body[:len(body)-1]), "\n")
	if len(lines) < 3 {
		return Checkpoint{}, fmt.Errorf("%w: %d lines, want origin, size and root", ErrMalformed, len(lines))
	}
	var c Checkpoint
	if err := CheckOrigin(lines[0]); err != nil {
		return Checkpoint{}, err
	}
	c.Origin = lines[0]
	size, err := ParseSize(lines[1])
	if err != nil {
		return Checkpoint{}, fmt.Errorf("tree size: %w", err)
	}
	c.Size = size
	root, err := ParseHash(lines[2])
	if err != nil {
		return Checkpoint{}, fmt.Errorf("root hash: %w", err)
	}
	c.Root = root
	for i, e := range lines[3:] {
		if e == "" {
			return Checkpoint{}, fmt.Errorf("%w: extension line %d is empty", ErrMalformed, i+1)
		}
		// The origin's rule: printable characters only, so no control,
		// bidirectional or zero-width character can make a line read as
		// something other than its bytes.
		if !utf8.ValidString(e) || strings.IndexFunc(e, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			return Checkpoint{}, fmt.Errorf("%w: extension line %d is not valid UTF-8 of printable characters only", ErrMalformed, i+1)
		}
		c.Extensions = append(c.Extensions, e)
	}
	return c, nil
}

// CheckOrigin returns ErrMalformed unless origin is a valid origin line:
// non-empty, at most MaxOriginLen bytes, valid UTF-8, printable characters
// only (so one line, no control or bidirectional characters), and no
// leading or trailing space.
func CheckOrigin(origin string) error {
	switch {
	case origin == "":
		return fmt.Errorf("%w: origin is empty", ErrMalformed)
	case len(origin) > MaxOriginLen:
		return fmt.Errorf("%w: origin is %d bytes, over the %d-byte limit", ErrMalformed, len(origin), MaxOriginLen)
	case !utf8.ValidString(origin):
		return fmt.Errorf("%w: origin is not valid UTF-8", ErrMalformed)
	case strings.IndexFunc(origin, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("%w: origin has a character that is not printable", ErrMalformed)
	case origin[0] == ' ' || origin[len(origin)-1] == ' ':
		return fmt.Errorf("%w: origin has a leading or trailing space", ErrMalformed)
	}
	return nil
}

// MaxSize is the largest tree size this package accepts, 2^62. Above it
// the RFC 6962 proof code of golang.org/x/mod/sumdb/tlog overflows (its
// largest power of two below a size reaches 2^63 and 2^64) and loops for
// ever; no receiver's log comes near it.
const MaxSize = 1 << 62

// ParseSize reads a tree size or an old size: ASCII decimal, "0" or no
// leading zero, no sign, at most MaxSize.
func ParseSize(s string) (uint64, error) {
	if s == "" || len(s) > 19 {
		return 0, fmt.Errorf("%w: size %q is not 1 to 19 decimal digits", ErrMalformed, s)
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: size %q is not decimal digits", ErrMalformed, s)
		}
	}
	if s[0] == '0' && s != "0" {
		return 0, fmt.Errorf("%w: size %q has a leading zero", ErrMalformed, s)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > MaxSize {
		return 0, fmt.Errorf("%w: size %q is over 2^62", ErrMalformed, s)
	}
	return n, nil
}

// ParseHash reads a 32-byte hash in canonical, padded standard base64.
func ParseHash(s string) (tlog.Hash, error) {
	var h tlog.Hash
	raw, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || len(raw) != len(h) || base64.StdEncoding.EncodeToString(raw) != s {
		return h, fmt.Errorf("%w: %q is not the canonical base64 of a 32-byte hash", ErrMalformed, s)
	}
	copy(h[:], raw)
	return h, nil
}

// CheckName returns ErrMalformed unless name can name a key in a signed
// note: non-empty, valid UTF-8, without Unicode spaces or "+", and at
// most MaxOriginLen bytes.
func CheckName(name string) error {
	if name == "" || len(name) > MaxOriginLen || !utf8.ValidString(name) ||
		strings.IndexFunc(name, unicode.IsSpace) >= 0 || strings.Contains(name, "+") ||
		strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("%w: key name %q is empty, too long, or has a space, a \"+\" or a character that is not printable", ErrMalformed, name)
	}
	return nil
}

// ReceiverOrigin returns the origin, and the log key name, of the receiver
// with this id and public key:
//
//	kvfence/receiver/<id, percent-encoded>/<hex SHA-256 fingerprint of the key>
//
// Every byte of the id other than ASCII letters, digits, "-", ".", "_" and
// "~" is written as %XX (so "/" in an id cannot forge another origin, and
// the origin has no space or "+"). The key is part of the origin, so a
// receiver that changes its key is a new log to its witnesses.
func ReceiverOrigin(receiverID string, pub ed25519.PublicKey) (string, error) {
	return logOrigin("receiver", receiverID, pub)
}

// LedgerOrigin returns the origin, and the log key name, of the ledger
// with this id and public key:
//
//	kvfence/ledger/<id, percent-encoded>/<hex SHA-256 fingerprint of the key>
//
// with the id encoded as ReceiverOrigin encodes a receiver's. A ledger and
// a receiver that share an id and a key are still two logs: a witness
// never takes one's checkpoint for the other's.
func LedgerOrigin(ledgerID string, pub ed25519.PublicKey) (string, error) {
	return logOrigin("ledger", ledgerID, pub)
}

// ReceiverID returns the receiver id that origin names, if origin is
// exactly ReceiverOrigin of that id and pub: the only spelling of the id
// that ReceiverOrigin writes, and pub's fingerprint. Anything else is
// ErrMalformed.
func ReceiverID(origin string, pub ed25519.PublicKey) (string, error) {
	return logID("receiver", origin, pub)
}

// logID is the inverse of logOrigin: the id that origin names, if
// logOrigin writes origin for it and pub.
func logID(kind, origin string, pub ed25519.PublicKey) (string, error) {
	rest, ok := strings.CutPrefix(origin, "kvfence/"+kind+"/")
	i := strings.LastIndexByte(rest, '/')
	if !ok || i < 0 {
		return "", fmt.Errorf("%w: origin %q is not a %s's", ErrMalformed, origin, kind)
	}
	id, err := url.PathUnescape(rest[:i])
	if err != nil {
		return "", fmt.Errorf("%w: origin %q: %v", ErrMalformed, origin, err)
	}
	want, err := logOrigin(kind, id, pub)
	if err != nil {
		return "", err
	}
	if want != origin {
		return "", fmt.Errorf("%w: origin %q is not the %s origin of id %q and this key (%s)", ErrMalformed, origin, kind, id, want)
	}
	return id, nil
}

// logOrigin is kvfence/<kind>/<id, percent-encoded>/<hex fingerprint>.
func logOrigin(kind, id string, pub ed25519.PublicKey) (string, error) {
	if err := ident.Check(kind+" id", id); err != nil {
		return "", fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(pub) != ed25519.PublicKeySize {
		return "", fmt.Errorf("%w: public key is %d bytes, want %d", ErrMalformed, len(pub), ed25519.PublicKeySize)
	}
	var b strings.Builder
	b.WriteString("kvfence/" + kind + "/")
	for _, c := range []byte(id) {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	fp := audit.KeyFingerprint(pub)
	b.WriteByte('/')
	b.WriteString(hex.EncodeToString(fp[:]))
	origin := b.String()
	if err := CheckName(origin); err != nil {
		return "", err
	}
	return origin, nil
}

// Signature types of c2sp.org/signed-note.
const (
	sigTypeEd25519     = 0x01
	sigTypeCosignature = 0x04
)

// keyID is SHA-256(name || "\n" || type || public key)[:4], big-endian.
func keyID(name string, sigType byte, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{'\n', sigType})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// VerifierKey returns the note verifier key ("name+hash+base64") of an
// Ed25519 log key, as note.NewEd25519VerifierKey does, after checking name.
// A public key of small order is refused (see CheckPublicKey).
func VerifierKey(name string, pub ed25519.PublicKey) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	if err := CheckPublicKey(pub); err != nil {
		return "", err
	}
	vkey, err := note.NewEd25519VerifierKey(name, pub)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return vkey, nil
}

// ErrWeakKey means a public key is an Ed25519 point of small order: under
// such a key anyone can make signatures that verify, without any private
// key.
var ErrWeakKey = edkey.ErrSmallOrder

// CheckPublicKey returns ErrMalformed for a key that is not 32 bytes and
// ErrWeakKey (wrapped in ErrMalformed) for a point of small order.
func CheckPublicKey(pub ed25519.PublicKey) error {
	if err := edkey.Check(pub); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return nil
}

// ParseVerifierKey reads a note verifier key ("name+hash+base64") of an
// Ed25519 log key, as VerifierKey writes it, and returns its verifier. It
// refuses other algorithms, a key ID that does not match, a name that is
// not a valid key name and a key of small order, with ErrMalformed.
func ParseVerifierKey(vkey string) (note.Verifier, error) {
	name, rest, ok1 := strings.Cut(vkey, "+")
	_, b64, ok2 := strings.Cut(rest, "+")
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: verifier key is not name+hash+key", ErrMalformed)
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != sigTypeEd25519 {
		return nil, fmt.Errorf("%w: verifier key is not an Ed25519 key", ErrMalformed)
	}
	if err := CheckPublicKey(raw[1:]); err != nil {
		return nil, err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, fmt.Errorf("%w: verifier key: %v", ErrMalformed, err)
	}
	return v, nil
}

// NewVerifier returns the note verifier of an Ed25519 log key.
func NewVerifier(name string, pub ed25519.PublicKey) (note.Verifier, error) {
	vkey, err := VerifierKey(name, pub)
	if err != nil {
		return nil, err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return v, nil
}

// ed25519Signer is a note signer of signature type 0x01.
type ed25519Signer struct {
	name string
	id   uint32
	priv ed25519.PrivateKey
}

func (s *ed25519Signer) Name() string                    { return s.name }
func (s *ed25519Signer) KeyHash() uint32                 { return s.id }
func (s *ed25519Signer) Sign(msg []byte) ([]byte, error) { return ed25519.Sign(s.priv, msg), nil }

// NewSigner returns a note signer (signature type 0x01, plain Ed25519) for
// a log key: what a receiver signs its checkpoints with.
func NewSigner(name string, priv ed25519.PrivateKey) (note.Signer, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: private key is %d bytes, want %d", ErrMalformed, len(priv), ed25519.PrivateKeySize)
	}
	pub := priv.Public().(ed25519.PublicKey)
	return &ed25519Signer{name: name, id: keyID(name, sigTypeEd25519, pub), priv: priv}, nil
}

// Sign returns the signed note of c: its body, a blank line and one
// signature line per signer.
func Sign(c Checkpoint, signers ...note.Signer) ([]byte, error) {
	body := c.Marshal()
	if _, err := Parse(body); err != nil {
		return nil, err
	}
	msg, err := note.Sign(&note.Note{Text: string(body)}, signers...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return msg, nil
}

// Open verifies a signed checkpoint note against the log's verifier and
// parses its body. Signatures by other keys are ignored and left in the
// note's UnverifiedSigs. It returns ErrMalformed for a note or body that
// does not parse, ErrUnverified when no signature is from logVerifier's
// key, and ErrBadSignature when one names that key and fails.
func Open(signedNote []byte, logVerifier note.Verifier) (Checkpoint, *note.Note, error) {
	if len(signedNote) > MaxNoteSize {
		return Checkpoint{}, nil, fmt.Errorf("%w: note is %d bytes, over the %d-byte limit", ErrMalformed, len(signedNote), MaxNoteSize)
	}
	if logVerifier == nil {
		return Checkpoint{}, nil, fmt.Errorf("%w: no verifier", ErrUnverified)
	}
	n, err := note.Open(signedNote, note.VerifierList(logVerifier))
	var unverified *note.UnverifiedNoteError
	var invalid *note.InvalidSignatureError
	switch {
	case errors.As(err, &unverified):
		return Checkpoint{}, nil, fmt.Errorf("%w: want a signature by %s+%08x", ErrUnverified, logVerifier.Name(), logVerifier.KeyHash())
	case errors.As(err, &invalid):
		return Checkpoint{}, nil, fmt.Errorf("%w: %v", ErrBadSignature, err)
	case err != nil:
		return Checkpoint{}, nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := checkRepeats(signedNote, n.Text, logVerifier); err != nil {
		return Checkpoint{}, nil, err
	}
	c, err := Parse([]byte(n.Text))
	if err != nil {
		return Checkpoint{}, nil, err
	}
	return c, n, nil
}

// checkRepeats verifies every signature line that names v's key, not only
// the first: note.Open skips later lines of a verifier it has already
// checked, and c2sp.org/tlog-witness wants any failing line by the trusted
// key refused. signedNote has already been opened, so its text is text and
// its lines are well formed.
func checkRepeats(signedNote []byte, text string, v note.Verifier) error {
	sigs := string(signedNote[len(text)+1:])
	for _, line := range strings.Split(strings.TrimSuffix(sigs, "\n"), "\n") {
		rest, ok := strings.CutPrefix(line, "— ")
		if !ok {
			return fmt.Errorf("%w: signature line does not start with \"— \"", ErrMalformed)
		}
		name, b64, ok := strings.Cut(rest, " ")
		raw, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil || len(raw) < 4 {
			return fmt.Errorf("%w: signature line does not parse", ErrMalformed)
		}
		if name != v.Name() || binary.BigEndian.Uint32(raw[:4]) != v.KeyHash() {
			continue
		}
		if !v.Verify([]byte(text), raw[4:]) {
			return fmt.Errorf("%w: a signature line by %s+%08x does not verify", ErrBadSignature, v.Name(), v.KeyHash())
		}
	}
	return nil
}
