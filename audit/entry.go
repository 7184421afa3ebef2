package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// HashSize is the size in bytes of an entry hash and of Entry.Prev.
const HashSize = sha256.Size

// Hash is the SHA-256 link hash of one encoded entry.
type Hash [HashSize]byte

// hashPrefix domain-separates entry hashes from every other SHA-256 the
// project computes, so that no other artefact can be passed off as an entry.
const hashPrefix = "kvfence/audit/v1\n"

// Entry is one record of the chain: a state change or a decision. Fields
// that do not apply to an entry's kind are left at their zero value and are
// then omitted from the encoding, which keeps the canonical form unique.
type Entry struct {
	Seq           uint64 `cbor:"seq"`
	Prev          []byte `cbor:"prev"`
	At            int64  `cbor:"at"` // Unix nanoseconds, receiver clock
	Kind          string `cbor:"kind"`
	Scope         string `cbor:"scope,omitempty"`
	Epoch         uint64 `cbor:"epoch,omitempty"`
	Grant         string `cbor:"grant,omitempty"`
	Executor      string `cbor:"executor,omitempty"`
	Action        string `cbor:"action,omitempty"`
	Outcome       string `cbor:"outcome,omitempty"`
	Reason        string `cbor:"reason,omitempty"`
	RequestSHA256 []byte `cbor:"request_sha256,omitempty"`
	Target        string `cbor:"target,omitempty"`
	RevBefore     uint64 `cbor:"rev_before,omitempty"`
	RevAfter      uint64 `cbor:"rev_after,omitempty"`
	ValueSHA256   []byte `cbor:"value_sha256,omitempty"`
	Decision      string `cbor:"decision,omitempty"`
	Note          string `cbor:"note,omitempty"`
}

// HashEntry returns SHA-256("kvfence/audit/v1\n" || raw), the link hash of
// an encoded entry.
func HashEntry(raw []byte) Hash {
	h := sha256.New()
	h.Write([]byte(hashPrefix))
	h.Write(raw)
	var out Hash
	h.Sum(out[:0])
	return out
}

// SeqKey returns the 8-byte big-endian key under which entry seq is stored,
// so that a cursor walks the chain in order.
func SeqKey(seq uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k[:]
}

// Head is the position of the newest entry of a chain: its seq and hash.
// The zero Head is the empty chain.
type Head struct {
	Seq  uint64
	Hash Hash
}

// String formats the head as "seq:hex".
func (h Head) String() string { return fmt.Sprintf("%d:%x", h.Seq, h.Hash[:]) }
