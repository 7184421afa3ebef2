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
// Text fields must be valid UTF-8; digests are empty or 32 bytes.
type Entry struct {
	Seq           uint64 `cbor:"seq"`                      // position in the chain, from 1; set by Chain.Append
	Prev          []byte `cbor:"prev"`                     // hash of the previous entry; set by Chain.Append
	At            int64  `cbor:"at"`                       // Unix nanoseconds, receiver clock
	Kind          string `cbor:"kind"`                     // what happened, e.g. "submit" or "hold"; required
	Scope         string `cbor:"scope,omitempty"`          // protected scope
	Epoch         uint64 `cbor:"epoch,omitempty"`          // scope epoch the entry refers to
	Grant         string `cbor:"grant,omitempty"`          // grant id
	Executor      string `cbor:"executor,omitempty"`       // authenticated caller or grant executor
	Action        string `cbor:"action,omitempty"`         // logical action id
	Outcome       string `cbor:"outcome,omitempty"`        // applied, already_applied or denied
	Reason        string `cbor:"reason,omitempty"`         // denial reason code, or a hold's reason
	RequestSHA256 []byte `cbor:"request_sha256,omitempty"` // SHA-256 of the exact request bytes
	Target        string `cbor:"target,omitempty"`         // target key
	RevBefore     uint64 `cbor:"rev_before,omitempty"`     // target revision before a mutation
	RevAfter      uint64 `cbor:"rev_after,omitempty"`      // target revision after a mutation
	ValueSHA256   []byte `cbor:"value_sha256,omitempty"`   // SHA-256 of the target's new value
	Decision      string `cbor:"decision,omitempty"`       // decision reference that approved an activation
	Note          string `cbor:"note,omitempty"`           // free text for what no field holds
	Actor         string `cbor:"actor,omitempty"`          // administrator who made an administrative change
	// BaseSeq is an archive entry's record of the base it moved the
	// stored chain to (see Archive Format in the package documentation):
	// the newest archived entry's seq.
	BaseSeq uint64 `cbor:"base_seq,omitempty"`
	// BaseHash is an archive entry's base hash: the newest archived
	// entry's hash.
	BaseHash []byte `cbor:"base_hash,omitempty"`
	// BaseFence is an archive entry's BaseDigest of the base record, which
	// holds each scope's fence state at the base.
	BaseFence []byte `cbor:"base_fence,omitempty"`
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
	Seq  uint64 // the newest entry's seq; 0 for the empty chain
	Hash Hash   // the newest entry's hash; zero for the empty chain
}

// String formats the head as "seq:hex".
func (h Head) String() string { return fmt.Sprintf("%d:%x", h.Seq, h.Hash[:]) }
