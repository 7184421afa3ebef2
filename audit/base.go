package audit

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
)

// KindArchived is the entry kind that moves a receiver's stored chain to a
// new base: the entries up to BaseSeq were written to an archive and removed
// in the transaction that appended it.
const KindArchived = "archived"

// MaxBaseSize bounds an encoded base record. It holds one small record per
// scope, so it grows with the number of scopes, never with the chain.
const MaxBaseSize = 16 << 20

// baseDigestPrefix domain-separates the digest of a base record from every
// other SHA-256 the project computes.
const baseDigestPrefix = "kvfence/archive-base/v1\n"

// ScopeBase is one scope's control state at a base, as the fence replay
// (see Verify) holds it after the base's entry: what lets the replay go on
// from the base without the archived entries. Fields are as in
// FenceViolationError; zero fields are left out of the encoding.
type ScopeBase struct {
	// Scope is the scope's name.
	Scope string `cbor:"scope"`
	// Epoch is the scope's epoch.
	Epoch uint64 `cbor:"epoch,omitempty"`
	// Grant is the active grant, empty when the scope is held.
	Grant string `cbor:"grant,omitempty"`
	// Activated is the seq of the entry that activated Grant.
	Activated uint64 `cbor:"activated,omitempty"`
	// Hold is the seq of the latest hold or recovery.
	Hold uint64 `cbor:"hold,omitempty"`
	// HoldEpoch is the epoch Hold set; 0 for a recovery.
	HoldEpoch uint64 `cbor:"hold_epoch,omitempty"`
	// Recovery says Hold was a recovery.
	Recovery bool `cbor:"recovery,omitempty"`
	// Ended is the grant that the latest hold or recovery which found the
	// scope open superseded.
	Ended string `cbor:"ended,omitempty"`
	// EndedBy is the seq of the entry that superseded Ended.
	EndedBy uint64 `cbor:"ended_by,omitempty"`
	// EndedByEpoch is the epoch EndedBy set; 0 for a recovery.
	EndedByEpoch uint64 `cbor:"ended_by_epoch,omitempty"`
	// EndedByRecovery says EndedBy was a recovery.
	EndedByRecovery bool `cbor:"ended_by_recovery,omitempty"`
}

// Base is where a stored chain begins once older entries are archived: the
// newest archived entry's seq and hash, and every scope's control state
// after it. The zero Base, at seq 0, is the start of every chain.
type Base struct {
	// Seq is the newest archived entry's seq; 0 at the start.
	Seq uint64
	// Hash is the newest archived entry's hash; zero at the start.
	Hash Hash
	// Scopes is each scope's fence state at Seq, ordered by name.
	Scopes []ScopeBase
}

// baseWire is Base's encoding; Hash is a slice so that a byte string of the
// wrong length is seen, not padded.
type baseWire struct {
	Seq    uint64      `cbor:"seq"`
	Hash   []byte      `cbor:"hash"`
	Scopes []ScopeBase `cbor:"scopes"`
}

var (
	baseEnc cbor.EncMode
	baseDec cbor.DecMode
)

func init() {
	var err error
	if baseEnc, err = cbor.CoreDetEncOptions().EncMode(); err != nil {
		panic(err)
	}
	baseDec, err = cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		FieldNameMatching: cbor.FieldNameMatchingCaseSensitive,
		UTF8:              cbor.UTF8RejectInvalid,
		MaxNestedLevels:   4,
		MaxArrayElements:  1 << 20,
		MaxMapPairs:       16,
	}.DecMode()
	if err != nil {
		panic(err)
	}
}

// ErrBadArchive means an archive file or a base record does not decode, is
// not in canonical form, breaks a field rule, or is cut short.
var ErrBadArchive = errors.New("audit: bad archive")

// ErrAnchorArchived means an anchor names an entry that the database has
// archived. A receiver archives only entries its anchor already covers, so
// such an anchor is older than the archive: an old copy put back. It
// matches ErrAnchorStale too.
var ErrAnchorArchived = fmt.Errorf("%w: it names an archived entry", ErrAnchorStale)

// ErrBaseMismatch means a stored chain's base disagrees with what the chain
// or the archives say: a base record that no archive entry records (or
// another one), archived entries put back, or archives that do not chain to
// each other or to the database exactly.
var ErrBaseMismatch = errors.New("audit: archive base mismatch")

func (b *Base) check() error {
	if b.Seq == 0 && (b.Hash != Hash{} || len(b.Scopes) != 0) {
		return errors.New("the base at seq 0 has a hash or scopes")
	}
	for i := range b.Scopes {
		s := &b.Scopes[i]
		switch {
		case s.Scope == "" || !utf8.ValidString(s.Scope):
			return fmt.Errorf("scope %d has an empty or invalid name", i)
		case i > 0 && b.Scopes[i-1].Scope >= s.Scope:
			return fmt.Errorf("scope %q is not in name order", s.Scope)
		case !utf8.ValidString(s.Grant) || !utf8.ValidString(s.Ended):
			return fmt.Errorf("scope %q has an invalid grant id", s.Scope)
		}
	}
	return nil
}

// MarshalBase returns the canonical CBOR encoding of b: a map with keys
// "seq", "hash" (32 bytes) and "scopes" (an array of ScopeBase maps in
// name order).
func MarshalBase(b *Base) ([]byte, error) {
	if err := b.check(); err != nil {
		return nil, fmt.Errorf("%w: base: %v", ErrBadArchive, err)
	}
	scopes := b.Scopes
	if scopes == nil {
		scopes = []ScopeBase{}
	}
	raw, err := baseEnc.Marshal(baseWire{Seq: b.Seq, Hash: b.Hash[:], Scopes: scopes})
	if err != nil {
		return nil, fmt.Errorf("%w: base: %w", ErrBadArchive, err)
	}
	if len(raw) > MaxBaseSize {
		return nil, fmt.Errorf("%w: base record is %d bytes, over the %d-byte limit", ErrBadArchive, len(raw), MaxBaseSize)
	}
	return raw, nil
}

// ParseBase decodes a base record strictly: canonical, no unknown or
// duplicate keys, scopes in name order, at most MaxBaseSize bytes.
func ParseBase(raw []byte) (Base, error) {
	if len(raw) > MaxBaseSize {
		return Base{}, fmt.Errorf("%w: base record is %d bytes, over the %d-byte limit", ErrBadArchive, len(raw), MaxBaseSize)
	}
	var w baseWire
	if err := baseDec.Unmarshal(raw, &w); err != nil {
		return Base{}, fmt.Errorf("%w: base record: %w", ErrBadArchive, err)
	}
	if len(w.Hash) != HashSize {
		return Base{}, fmt.Errorf("%w: base record: hash is %d bytes, want %d", ErrBadArchive, len(w.Hash), HashSize)
	}
	b := Base{Seq: w.Seq, Hash: Hash(w.Hash), Scopes: w.Scopes}
	again, err := MarshalBase(&b)
	if err != nil {
		return Base{}, err
	}
	if !bytes.Equal(again, raw) {
		return Base{}, fmt.Errorf("%w: base record not in canonical form", ErrBadArchive)
	}
	return b, nil
}

// BaseDigest returns SHA-256("kvfence/archive-base/v1\n" || raw), the
// digest of an encoded base record that archive entries and archive
// statements commit to.
func BaseDigest(raw []byte) Hash {
	h := sha256.New()
	h.Write([]byte(baseDigestPrefix))
	h.Write(raw)
	var out Hash
	h.Sum(out[:0])
	return out
}

// Head returns the base's position as a chain head.
func (b *Base) Head() Head { return Head{Seq: b.Seq, Hash: b.Hash} }

// baseFence holds what an archive entry records about its base.
type baseFence struct {
	seq         uint64
	hash, fence Hash
	entry       uint64 // the archive entry's own seq
}

// archivedBase returns what an archive entry e records, or an error if it
// does not record a complete base.
func archivedBase(e *Entry) (baseFence, error) {
	if e.BaseSeq == 0 || e.BaseSeq >= e.Seq || len(e.BaseHash) != HashSize || len(e.BaseFence) != HashSize {
		return baseFence{}, fmt.Errorf("%w: archive entry %d does not record a base before it (base_seq %d, base_hash %d bytes, base_fence %d bytes)",
			ErrBadEntry, e.Seq, e.BaseSeq, len(e.BaseHash), len(e.BaseFence))
	}
	return baseFence{seq: e.BaseSeq, hash: Hash(e.BaseHash), fence: Hash(e.BaseFence), entry: e.Seq}, nil
}
