package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"

	"lukechampine.com/blake3"
)

// StateHashSize is the size in bytes of a StateHash's binary form: 1024
// lanes of 16 bits.
const StateHashSize = 2048

// stateWords is the number of 64-bit words that hold the 1024 lanes, four
// lanes to a word.
const stateWords = StateHashSize / 8

// statePrefix domain-separates the hash of one state record, and stateSumPrefix
// the digest of a whole state, from every other hash kvfence computes. Version
// 1 of both expanded records with SHAKE128; version 2 expands them with
// BLAKE3, and its sums name the version so that no lanes of one construction
// are ever taken for the other's.
const (
	statePrefix    = "kvfence/state/v2\n"
	stateSumPrefix = "kvfence/state-sum/v2\n"
)

// StateHash is an incremental digest of a set of records (bucket, key,
// value): LtHash16, the lattice-based homomorphic set hash of Bellare and
// Micciancio with the parameters of Lewi, Kim, Maykov and Weis (1024 lanes
// of 16 bits). A record's hash is 2048 bytes of the BLAKE3 extendable output
// over the domain-separated, length-prefixed record; the state's hash is the
// lane-wise sum, modulo 2^16, of the hashes of its records. Adding and
// removing a record costs one expansion whatever the state's size, and the
// order of changes does not matter, so a writer keeps the digest current as
// it changes records and a reader recomputes it from the records alone.
// Package documentation, "State Digest", says why this construction.
//
// The zero value is the digest of the empty set.
type StateHash struct {
	w [stateWords]uint64
}

// hasherPool reuses BLAKE3 states and their output buffers: a record's hash
// needs 2048 bytes of output, which is not worth an allocation per put.
var hasherPool = sync.Pool{New: func() any { return &stateScratch{h: blake3.New(32, nil)} }}

type stateScratch struct {
	h   *blake3.Hasher
	out [StateHashSize]byte
	// head collects the framing before the value, so that it is one
	// write: the hasher keeps what it is given, so every slice passed to
	// it escapes, and a conversion of the prefix or the bucket name would
	// allocate on every record.
	head []byte
}

// chunkSize is BLAKE3's chunk, 1024 bytes. The hasher is fed and read at
// most a chunk at a time: given more in one call, it hashes the chunks, or
// computes the output blocks, on goroutines of its own, with allocations,
// which on the commit leader's path cost more than the parallel work saves
// (BenchmarkStateElement). The bytes hashed and the output are the same
// either way.
const chunkSize = 1024

// element fills sc.out with the hash of one record: the first 2048 bytes
// of BLAKE3's extendable output, in plain hashing mode, over
//
//	statePrefix || uvarint(len(bucket)) || bucket || uvarint(len(key)) || key || value
func (sc *stateScratch) element(bucket string, key, value []byte) {
	h := sc.h
	h.Reset()
	head := append(sc.head[:0], statePrefix...)
	head = binary.AppendUvarint(head, uint64(len(bucket)))
	head = append(head, bucket...)
	head = binary.AppendUvarint(head, uint64(len(key)))
	if len(head)+len(key) <= chunkSize {
		head = append(head, key...)
		writeChunks(h, head)
	} else {
		writeChunks(h, head)
		writeChunks(h, key)
	}
	if cap(head) <= chunkSize {
		sc.head = head
	}
	// The value is last and everything before it is length-prefixed, so
	// distinct records are distinct inputs.
	writeChunks(h, value)
	x := h.XOF()
	for i := 0; i < StateHashSize; i += chunkSize {
		x.Read(sc.out[i : i+chunkSize])
	}
}

// writeChunks writes p to h at most a chunk at a time.
func writeChunks(h *blake3.Hasher, p []byte) {
	for len(p) > chunkSize {
		h.Write(p[:chunkSize])
		p = p[chunkSize:]
	}
	h.Write(p)
}

// Lane masks: the low 15 bits of every 16-bit lane, and the top bit.
const (
	laneLow = 0x7fff7fff7fff7fff
	laneTop = 0x8000800080008000
	laneOne = 0x0001000100010001
)

// addLanes adds four 16-bit lanes at once, each modulo 2^16: the low 15
// bits add without carrying into the next lane, and the top bits add
// modulo 2 by XOR.
func addLanes(a, b uint64) uint64 {
	return ((a & laneLow) + (b & laneLow)) ^ ((a ^ b) & laneTop)
}

// negLanes negates four 16-bit lanes modulo 2^16.
func negLanes(a uint64) uint64 { return addLanes(^a, laneOne) }

// Add adds the record (bucket, key, value) to the set.
func (s *StateHash) Add(bucket string, key, value []byte) { s.update(bucket, key, value, false) }

// Remove removes the record (bucket, key, value) from the set. Removing a
// record that was never added leaves a digest that no set has; the caller
// removes exactly the bytes it added.
func (s *StateHash) Remove(bucket string, key, value []byte) { s.update(bucket, key, value, true) }

func (s *StateHash) update(bucket string, key, value []byte, remove bool) {
	sc := hasherPool.Get().(*stateScratch)
	sc.element(bucket, key, value)
	for i := range s.w {
		e := binary.LittleEndian.Uint64(sc.out[8*i:])
		if remove {
			e = negLanes(e)
		}
		s.w[i] = addLanes(s.w[i], e)
	}
	hasherPool.Put(sc)
}

// StateElement is one record's term in a StateHash: its 2048-byte
// BLAKE3 expansion. A writer that replaces the same records often keeps
// the terms of the versions it wrote, and removes a version by its term
// instead of hashing it again. The zero value is no record's term; use
// SetRecord.
type StateElement struct {
	w [stateWords]uint64
}

// SetRecord sets e to the term of the record (bucket, key, value).
func (e *StateElement) SetRecord(bucket string, key, value []byte) {
	sc := hasherPool.Get().(*stateScratch)
	sc.element(bucket, key, value)
	for i := range e.w {
		e.w[i] = binary.LittleEndian.Uint64(sc.out[8*i:])
	}
	hasherPool.Put(sc)
}

// AddElement adds the record whose term is e, as Add would.
func (s *StateHash) AddElement(e *StateElement) {
	for i := range s.w {
		s.w[i] = addLanes(s.w[i], e.w[i])
	}
}

// RemoveElement removes the record whose term is e, as Remove would.
func (s *StateHash) RemoveElement(e *StateElement) {
	for i := range s.w {
		s.w[i] = addLanes(s.w[i], negLanes(e.w[i]))
	}
}

// Merge adds every record of o to s, as if each had been added to s: the
// digest of a union of disjoint sets, for computing one in parts.
func (s *StateHash) Merge(o *StateHash) {
	for i := range s.w {
		s.w[i] = addLanes(s.w[i], o.w[i])
	}
}

// Sum returns SHA-256("kvfence/state-sum/v2\n" || the binary form): the
// 32 bytes a checkpoint commits to.
func (s *StateHash) Sum() Hash {
	var b [StateHashSize]byte
	s.put(b[:])
	h := sha256.New()
	h.Write([]byte(stateSumPrefix))
	h.Write(b[:])
	var out Hash
	h.Sum(out[:0])
	return out
}

// AppendBinary appends the binary form: the 1024 lanes as 16-bit
// little-endian integers, lane 0 first.
func (s *StateHash) AppendBinary(b []byte) ([]byte, error) {
	n := len(b)
	b = append(b, make([]byte, StateHashSize)...)
	s.put(b[n:])
	return b, nil
}

func (s *StateHash) put(b []byte) {
	for i, w := range s.w {
		binary.LittleEndian.PutUint64(b[8*i:], w)
	}
}

// UnmarshalBinary sets s from its binary form, which must be exactly
// StateHashSize bytes; every such string is a valid digest.
func (s *StateHash) UnmarshalBinary(b []byte) error {
	if len(b) != StateHashSize {
		return fmt.Errorf("%w: state digest is %d bytes, want %d", ErrStateMismatch, len(b), StateHashSize)
	}
	for i := range s.w {
		s.w[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return nil
}
