package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Domain separators: each signed message starts with one, so a signature
// made for one kind of statement can never be taken for another.
const (
	checkpointPrefix = "kvfence/checkpoint/v3\n"
	admissionPrefix  = "kvfence/admission/v3\n"
)

// MaxReceiverLen bounds a receiver id in bytes.
const MaxReceiverLen = 512

// MaxCheckpointSize bounds an encoded signed checkpoint and an anchor file;
// both stay under 1 KiB even with the longest receiver id.
const MaxCheckpointSize = 2 << 10

// Checkpoint is a receiver's statement of its audit head and its state:
// after the chain reached Seq with hash Head, the RFC 6962 tree over its
// entries had root Root, the fence state's digest was State and no scope
// had an epoch above EpochHighWater.
type Checkpoint struct {
	Receiver string // receiver id; one line of printable UTF-8
	Seq      uint64 // the head's seq, at least 1
	Head     Hash   // the head's hash
	// Root is the RFC 6962 root (tlog.TreeHash) of the tree whose leaves
	// are the audit entries 1 to Seq, never zero. Signing it binds the
	// stored tree, and every inclusion or consistency proof drawn from
	// it, to the anchored checkpoint: a tree record edited apart from
	// the entries changes a root the receiver has signed.
	Root           Hash
	State          Hash   // StateHash.Sum of the state as of Seq
	EpochHighWater uint64 // highest epoch of any scope as of Seq
	At             int64  // Unix nanoseconds, receiver clock
	// Admission names the newest recovery admission this receiver
	// consumed, zero if none: the recovery's checkpoint names it and every
	// later checkpoint carries it unchanged, so that the anchor keeps
	// saying which admission was used even where the database is put back
	// to a copy from before the recovery.
	Admission AdmissionRecord
}

// AdmissionRecord names a consumed recovery admission. The zero value
// names none.
type AdmissionRecord struct {
	// SHA256 is the SHA-256 of the signed admission's bytes, as recovery
	// was given them (SignedAdmission.Marshal), never all zero.
	SHA256 Hash
	// At is the admission's At: an admission signed at or before it is
	// refused as well, as older than one already used.
	At int64
}

// IsZero reports whether r names no admission.
func (r AdmissionRecord) IsZero() bool { return r == AdmissionRecord{} }

// Refuses returns an error wrapping ErrAdmissionReplayed if an admission
// whose signed bytes hash to digest and which was signed at at is the one
// r names or was signed no later than it; nil otherwise, and always for a
// zero r.
func (r AdmissionRecord) Refuses(digest Hash, at int64) error {
	switch {
	case r.IsZero():
		return nil
	case digest == r.SHA256:
		return fmt.Errorf("%w: it is the admission (sha256 %x, signed at %s) that the receiver's signed checkpoint records as used",
			ErrAdmissionReplayed, digest[:], formatTime(at))
	case at <= r.At:
		return fmt.Errorf("%w: it was signed at %s, not after the admission (sha256 %x, signed at %s) that the receiver's signed "+
			"checkpoint records as the last one used", ErrAdmissionReplayed, formatTime(at), r.SHA256[:], formatTime(r.At))
	}
	return nil
}

// checkpointWire is the decoding target; Head is a slice so that a byte
// string of the wrong length is seen, not padded or truncated.
type checkpointWire struct {
	At             int64  `cbor:"at"`
	Seq            uint64 `cbor:"seq"`
	Head           []byte `cbor:"head"`
	Root           []byte `cbor:"root"`
	State          []byte `cbor:"state"`
	Receiver       string `cbor:"receiver"`
	EpochHighWater uint64 `cbor:"epoch_high_water"`
	// The admission keys are optional; which are present is decided by
	// re-encoding, so one without the other is refused.
	AdmissionAt     int64  `cbor:"admission_at"`
	AdmissionSHA256 []byte `cbor:"admission_sha256"`
}

func checkCheckpoint(c *Checkpoint) error {
	if c.Seq == 0 {
		return fmt.Errorf("%w: seq is 0; an empty chain has nothing to anchor", ErrBadCheckpoint)
	}
	if c.Root == (Hash{}) {
		// No tree of at least one leaf has an all-zero root: a zero root
		// is a checkpoint made without its tree.
		return fmt.Errorf("%w: the tree root is zero", ErrBadCheckpoint)
	}
	if err := checkReceiver(c.Receiver); err != nil {
		return fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
	}
	if c.Admission.SHA256 == (Hash{}) && c.Admission.At != 0 {
		return fmt.Errorf("%w: an admission time without its digest", ErrBadCheckpoint)
	}
	return nil
}

// checkReceiver keeps receiver ids to one printable line, so that the
// anchor file's "receiver" line is unambiguous.
func checkReceiver(s string) error {
	switch {
	case s == "":
		return errors.New("receiver id is empty")
	case len(s) > MaxReceiverLen:
		return fmt.Errorf("receiver id is %d bytes, over the %d-byte limit", len(s), MaxReceiverLen)
	case !utf8.ValidString(s):
		return errors.New("receiver id is not valid UTF-8")
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("receiver id contains control character %U", c)
		}
	}
	return nil
}

func appendCheckpoint(b []byte, c *Checkpoint) []byte {
	rec := !c.Admission.IsZero()
	if rec {
		b = appendHead(b, majorMap, 9)
	} else {
		b = appendHead(b, majorMap, 7)
	}
	b = appendInt(append(b, keyAt...), c.At)
	b = appendHead(append(b, keySeq...), majorUint, c.Seq)
	b = appendBytes(append(b, "\x64head"...), c.Head[:])
	b = appendBytes(append(b, "\x64root"...), c.Root[:])
	b = appendBytes(append(b, "\x65state"...), c.State[:])
	b = appendText(append(b, "\x68receiver"...), c.Receiver)
	if rec {
		b = appendInt(append(b, "\x6cadmission_at"...), c.Admission.At)
		b = appendBytes(append(b, "\x70admission_sha256"...), c.Admission.SHA256[:])
	}
	return appendHead(append(b, "\x70epoch_high_water"...), majorUint, c.EpochHighWater)
}

// checkpointMessage returns the bytes that a checkpoint's signature covers.
func checkpointMessage(c *Checkpoint) ([]byte, error) {
	if err := checkCheckpoint(c); err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(checkpointPrefix)+200+len(c.Receiver))
	return appendCheckpoint(append(b, checkpointPrefix...), c), nil
}

func parseCheckpoint(raw []byte) (Checkpoint, error) {
	var w checkpointWire
	if err := decMode.Unmarshal(raw, &w); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
	}
	if len(w.Head) != HashSize || len(w.Root) != HashSize || len(w.State) != HashSize {
		return Checkpoint{}, fmt.Errorf("%w: head, root and state are %d, %d and %d bytes, want %d",
			ErrBadCheckpoint, len(w.Head), len(w.Root), len(w.State), HashSize)
	}
	c := Checkpoint{Receiver: w.Receiver, Seq: w.Seq, Head: Hash(w.Head), Root: Hash(w.Root), State: Hash(w.State),
		EpochHighWater: w.EpochHighWater, At: w.At}
	switch {
	case w.AdmissionSHA256 == nil:
		// An admission_at alone is not encoded back, and so refused below.
	case len(w.AdmissionSHA256) != HashSize:
		return Checkpoint{}, fmt.Errorf("%w: admission_sha256 is %d bytes, want %d", ErrBadCheckpoint, len(w.AdmissionSHA256), HashSize)
	default:
		c.Admission = AdmissionRecord{SHA256: Hash(w.AdmissionSHA256), At: w.AdmissionAt}
	}
	if err := checkCheckpoint(&c); err != nil {
		return Checkpoint{}, err
	}
	if !bytes.Equal(appendCheckpoint(nil, &c), raw) {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint not in canonical form", ErrBadCheckpoint)
	}
	return c, nil
}

// Fingerprint identifies a public key: the SHA-256 of its OpenSSH wire
// form, which is what "ssh-keygen -l" prints for the key.
type Fingerprint [sha256.Size]byte

// KeyFingerprint returns the fingerprint of an Ed25519 public key, which
// must be ed25519.PublicKeySize bytes.
func KeyFingerprint(pub ed25519.PublicKey) Fingerprint {
	var blob [4 + 11 + 4 + ed25519.PublicKeySize]byte
	b := append(blob[:0], 0, 0, 0, 11)
	b = append(b, "ssh-ed25519"...)
	b = append(b, 0, 0, 0, byte(len(pub)))
	return sha256.Sum256(append(b, pub...))
}

// String formats the fingerprint as "ssh-keygen -l" does: "SHA256:" and
// unpadded base64.
func (f Fingerprint) String() string {
	return "SHA256:" + base64.RawStdEncoding.EncodeToString(f[:])
}

// SignedCheckpoint is a checkpoint with the Ed25519 signature of the key
// whose fingerprint is Key. It is comparable with ==.
type SignedCheckpoint struct {
	// Checkpoint is the signed statement.
	Checkpoint
	Key       Fingerprint                 // the signing key's; not signed itself
	Signature [ed25519.SignatureSize]byte // Ed25519 over the domain-separated checkpoint
}

// Sign signs cp with priv.
func Sign(priv ed25519.PrivateKey, cp Checkpoint) (SignedCheckpoint, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return SignedCheckpoint{}, fmt.Errorf("%w: private key is %d bytes, want %d", ErrBadKey, len(priv), ed25519.PrivateKeySize)
	}
	msg, err := checkpointMessage(&cp)
	if err != nil {
		return SignedCheckpoint{}, err
	}
	sc := SignedCheckpoint{Checkpoint: cp, Key: KeyFingerprint(ed25519.PublicKey(priv[ed25519.SeedSize:]))}
	copy(sc.Signature[:], ed25519.Sign(priv, msg))
	return sc, nil
}

// Verify checks that sc is signed by pub. It returns an error wrapping
// ErrBadSignature if it is not, and ErrBadKey if pub is not a key at all.
func (sc SignedCheckpoint) Verify(pub ed25519.PublicKey) error {
	msg, err := checkpointMessage(&sc.Checkpoint)
	if err != nil {
		return err
	}
	return verifySig(pub, sc.Key, msg, &sc.Signature, "checkpoint")
}

func verifySig(pub ed25519.PublicKey, key Fingerprint, msg []byte, sig *[ed25519.SignatureSize]byte, what string) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: public key is %d bytes, want %d", ErrBadKey, len(pub), ed25519.PublicKeySize)
	}
	// The fingerprint is not signed; checking it first only makes the
	// common mistake, verifying with another key, say so.
	if want := KeyFingerprint(pub); key != want {
		return fmt.Errorf("%w: %s is signed by key %v, not by %v", ErrBadSignature, what, key, want)
	}
	if !ed25519.Verify(pub, msg, sig[:]) {
		return fmt.Errorf("%w: %s signature does not verify under key %v", ErrBadSignature, what, key)
	}
	return nil
}

// Marshal returns the canonical CBOR encoding of sc.
func (sc SignedCheckpoint) Marshal() ([]byte, error) {
	if err := checkCheckpoint(&sc.Checkpoint); err != nil {
		return nil, err
	}
	body := appendCheckpoint(make([]byte, 0, 200+len(sc.Receiver)), &sc.Checkpoint)
	return appendSigned(make([]byte, 0, 128+len(body)), keyCheckpoint, sc.Key, &sc.Signature, body), nil
}

// ParseSignedCheckpoint decodes raw strictly: exactly one canonical signed
// checkpoint, no unknown, duplicate or missing keys, no trailing bytes, at
// most MaxCheckpointSize bytes. It does not verify the signature.
func ParseSignedCheckpoint(raw []byte) (SignedCheckpoint, error) {
	if len(raw) > MaxCheckpointSize {
		return SignedCheckpoint{}, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrBadCheckpoint, len(raw), MaxCheckpointSize)
	}
	var w struct {
		Key  []byte `cbor:"key"`
		Sig  []byte `cbor:"sig"`
		Body []byte `cbor:"checkpoint"`
	}
	if err := decMode.Unmarshal(raw, &w); err != nil {
		return SignedCheckpoint{}, fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
	}
	var sc SignedCheckpoint
	if err := unpackSigned(&sc.Key, &sc.Signature, w.Key, w.Sig); err != nil {
		return SignedCheckpoint{}, fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
	}
	cp, err := parseCheckpoint(w.Body)
	if err != nil {
		return SignedCheckpoint{}, err
	}
	sc.Checkpoint = cp
	if !bytes.Equal(appendSigned(nil, keyCheckpoint, sc.Key, &sc.Signature, w.Body), raw) {
		return SignedCheckpoint{}, fmt.Errorf("%w: not in canonical form", ErrBadCheckpoint)
	}
	return sc, nil
}

// CheckHead checks that a chain whose newest entry is head contains c's
// position; a receiver runs it before it moves its anchor, too. hashAt
// returns the hash of the stored entry at a seq below head.Seq. A chain
// past c is fine: the anchor is written after the commit, so a crash in
// between leaves the chain ahead. A chain that ends before c is a
// *RollbackError, one with another hash at c.Seq a *ForkError.
func (c Checkpoint) CheckHead(head Head, hashAt func(seq uint64) (Hash, error)) error {
	if head.Seq < c.Seq {
		return &RollbackError{Anchor: c, Head: head}
	}
	h := head.Hash
	if head.Seq != c.Seq {
		var err error
		if h, err = hashAt(c.Seq); err != nil {
			return fmt.Errorf("audit: reading entry %d: %w", c.Seq, err)
		}
	}
	if h != c.Head {
		return &ForkError{Anchor: c, Hash: h}
	}
	return nil
}

// CheckAnchor is the cheap check for opening a database: it verifies the
// anchor's signature under pub and its receiver id, then runs CheckHead. Its
// errors wrap ErrBadSignature, ErrBadKey, ErrReceiverMismatch, or are a
// *RollbackError or *ForkError.
func CheckAnchor(anchor SignedCheckpoint, pub ed25519.PublicKey, receiver string, head Head, hashAt func(seq uint64) (Hash, error)) error {
	if err := checkTrusted(anchor, pub, receiver); err != nil {
		return err
	}
	return anchor.CheckHead(head, hashAt)
}

// checkTrusted is what makes an anchor evidence: the right key and the
// right receiver. Only then may its position be compared with a chain.
func checkTrusted(anchor SignedCheckpoint, pub ed25519.PublicKey, receiver string) error {
	if err := anchor.Verify(pub); err != nil {
		return err
	}
	if anchor.Receiver != receiver {
		return fmt.Errorf("%w: anchor is for receiver %q, not %q", ErrReceiverMismatch, anchor.Receiver, receiver)
	}
	return nil
}

// Outer map keys of the signed forms; "key" and "sig" sort before either.
const (
	keyCheckpoint = "\x6acheckpoint"
	keyAdmission  = "\x69admission"
)

// appendSigned writes the outer map of a signed checkpoint or admission.
// The body is carried as a byte string so that the signed bytes are
// present verbatim.
func appendSigned(b []byte, bodyKey string, key Fingerprint, sig *[ed25519.SignatureSize]byte, body []byte) []byte {
	b = appendHead(b, majorMap, 3)
	b = appendBytes(append(b, "\x63key"...), key[:])
	b = appendBytes(append(b, "\x63sig"...), sig[:])
	return appendBytes(append(b, bodyKey...), body)
}

func unpackSigned(key *Fingerprint, sig *[ed25519.SignatureSize]byte, k, s []byte) error {
	if len(k) != len(key) {
		return fmt.Errorf("key fingerprint is %d bytes, want %d", len(k), len(key))
	}
	if len(s) != len(sig) {
		return fmt.Errorf("signature is %d bytes, want %d", len(s), len(sig))
	}
	copy(key[:], k)
	copy(sig[:], s)
	return nil
}
