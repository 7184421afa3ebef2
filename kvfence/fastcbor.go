package kvfence

import (
	"bytes"
	"math"
	"strings"
	"sync"
	"unicode/utf8"
)

// This file holds hand-written codecs for the records and wire messages on
// the path of every fenced write. They exist only for speed: the reflection
// codec (wireEnc, recordDec, wireDec) remains the definition of the formats.
//
// The encoders write exactly the bytes wireEnc.Marshal writes (core
// deterministic CBOR: shortest heads, definite lengths, map keys sorted
// bytewise by their encoding, omitempty fields left out when zero, a nil
// byte slice as null); fastcbor_test.go checks that byte for byte.
//
// The decoders accept only an input that is exactly the canonical encoding
// of the value they return: they parse the layout the encoder writes, then
// encode the result again and require the same bytes. Whatever else they
// meet, they decline, and the caller falls back to the reflection decoder,
// so that every refusal, and every value decoded from a non-canonical
// input, is the reflection decoder's own.

// CBOR major types.
const (
	majorUint  = 0
	majorNeg   = 1
	majorBytes = 2
	majorText  = 3
	majorMap   = 5
	cborNull   = 0xf6
)

// appendHead appends the shortest head of major type major with argument n.
func appendHead(b []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(b, m|byte(n))
	case n <= math.MaxUint8:
		return append(b, m|24, byte(n))
	case n <= math.MaxUint16:
		return append(b, m|25, byte(n>>8), byte(n))
	case n <= math.MaxUint32:
		return append(b, m|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	default:
		return append(b, m|27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32),
			byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

func appendUint(b []byte, n uint64) []byte { return appendHead(b, majorUint, n) }

func appendInt(b []byte, n int64) []byte {
	if n >= 0 {
		return appendHead(b, majorUint, uint64(n))
	}
	return appendHead(b, majorNeg, uint64(^n)) // -1-n
}

func appendText(b []byte, s string) []byte {
	return append(appendHead(b, majorText, uint64(len(s))), s...)
}

// appendBytes appends p as a byte string, or null if p is nil, as the
// reflection encoder does for a nil slice.
func appendBytes(b, p []byte) []byte {
	if p == nil {
		return append(b, cborNull)
	}
	return append(appendHead(b, majorBytes, uint64(len(p))), p...)
}

// cborKey returns the encoding of a text map key.
func cborKey(s string) string { return string(appendText(nil, s)) }

// Encoded map keys, grouped by message and listed in their canonical
// order: shorter keys first, then bytewise.
var (
	kMode                 = cborKey("mode")
	kEpoch                = cborKey("epoch")
	kDenials              = cborKey("denials")
	kCreatedAt            = cborKey("created_at")
	kActivatedAt          = cborKey("activated_at")
	kActiveGrant          = cborKey("active_grant")
	kMaxGrantTTL          = cborKey("max_grant_ttl")
	kStaleRejections      = cborKey("stale_rejections")
	kHoldCommittedAt      = cborKey("hold_committed_at")
	kHoldRequestedAt      = cborKey("hold_requested_at")
	kLastStaleRejectionAt = cborKey("last_stale_rejection_at")

	kID            = cborKey("id")
	kClaim         = cborKey("claim")
	kScope         = cborKey("scope")
	kAction        = cborKey("action")
	kDecision      = cborKey("decision")
	kExecutor      = cborKey("executor")
	kAuditSeq      = cborKey("audit_seq")
	kNotAfter      = cborKey("not_after")
	kNotBefore     = cborKey("not_before")
	kRevokedSeq    = cborKey("revoked_seq")
	kRequestSHA256 = cborKey("request_sha256")

	kValue    = cborKey("value")
	kRevision = cborKey("revision")

	kAt        = cborKey("at")
	kGrant     = cborKey("grant")
	kTarget    = cborKey("target")
	kRevAfter  = cborKey("rev_after")
	kRevBefore = cborKey("rev_before")

	kV              = cborKey("v")
	kRequest        = cborKey("request")
	kSet            = cborKey("set")
	kPatch          = cborKey("patch")
	kExpectValue    = cborKey("expect_value")
	kExpectRevision = cborKey("expect_revision")
)

func count(n int, present ...bool) int {
	for _, p := range present {
		if p {
			n++
		}
	}
	return n
}

// encodeFast encodes the records and messages this file knows into a new
// slice of about the right size; ok is false for any other value.
func encodeFast(v any) (b []byte, ok bool) {
	// The sizes allow for every key and the longest heads; a short guess
	// only costs append a reallocation.
	switch x := v.(type) {
	case *controlRecord:
		if x == nil {
			return nil, false
		}
		n := 200 + len(x.Mode) + len(x.ActiveGrant)
		for k := range x.Denials {
			n += len(k) + 18
		}
		return appendControl(make([]byte, 0, n), x), true
	case *grantRecord:
		if x == nil {
			return nil, false
		}
		n := 190 + len(x.ID) + len(x.Claim) + len(x.Scope) + len(x.Action) + len(x.Decision) + len(x.Executor) + len(x.RequestSHA256)
		return appendGrant(make([]byte, 0, n), x), true
	case *targetRecord:
		// A target of another kind than internal is rare: the
		// reflection encoder writes its two more fields.
		if x == nil || x.Kind != "" || x.Effect != "" || x.Object != nil || x.UID != "" || x.Key != "" || x.ValueSHA256 != nil {
			return nil, false
		}
		return appendTarget(make([]byte, 0, 50+len(x.Scope)+len(x.Value)), x), true
	case *receiptRecord:
		// A remote target's receipt is rare: the reflection encoder
		// writes its dispatch fields.
		if x == nil || x.isRemote() {
			return nil, false
		}
		return appendReceipt(make([]byte, 0, 120+len(x.Grant)+len(x.Target)+len(x.RequestSHA256)), x), true
	case *Envelope:
		if x == nil {
			return nil, false
		}
		n := 100 + len(x.Claim) + len(x.Grant) + len(x.Scope) + len(x.Request) + len(x.Executor)
		return appendEnvelope(make([]byte, 0, n), x), true
	case *Request:
		if x == nil {
			return nil, false
		}
		n := 100 + len(x.Action) + len(x.Target) + len(x.Patch)
		if x.Set != nil {
			n += len(*x.Set)
		}
		if x.ExpectValue != nil {
			n += len(*x.ExpectValue)
		}
		return appendRequest(make([]byte, 0, n), x), true
	}
	return nil, false
}

// cborReader parses the layout the encoders above write. Any surprise sets
// bad; the caller then declines the input as a whole.
type cborReader struct {
	b   []byte
	i   int
	bad bool
}

// head reads a head of major type want. It accepts an argument of any
// width; the final comparison with the re-encoding rejects one that is not
// shortest.
func (r *cborReader) head(want byte) uint64 {
	if r.bad || r.i >= len(r.b) {
		r.bad = true
		return 0
	}
	ib := r.b[r.i]
	if ib>>5 != want {
		r.bad = true
		return 0
	}
	ai := ib & 0x1f
	r.i++
	if ai < 24 {
		return uint64(ai)
	}
	var w int
	switch ai {
	case 24:
		w = 1
	case 25:
		w = 2
	case 26:
		w = 4
	case 27:
		w = 8
	default: // indefinite length or reserved
		r.bad = true
		return 0
	}
	if len(r.b)-r.i < w {
		r.bad = true
		return 0
	}
	var n uint64
	for _, c := range r.b[r.i : r.i+w] {
		n = n<<8 | uint64(c)
	}
	r.i += w
	return n
}

// key consumes the encoded map key k if it comes next. Encoded keys carry
// their length, so a prefix match is an exact match.
func (r *cborReader) key(k string) bool {
	if r.bad || len(r.b)-r.i < len(k) || string(r.b[r.i:r.i+len(k)]) != k {
		return false
	}
	r.i += len(k)
	return true
}

func (r *cborReader) uint() uint64 { return r.head(majorUint) }

func (r *cborReader) int() int64 {
	if r.bad || r.i >= len(r.b) {
		r.bad = true
		return 0
	}
	neg := r.b[r.i]>>5 == majorNeg
	var n uint64
	if neg {
		n = r.head(majorNeg)
	} else {
		n = r.head(majorUint)
	}
	if n > math.MaxInt64 {
		r.bad = true
		return 0
	}
	if neg {
		return ^int64(n)
	}
	return int64(n)
}

// str reads the head of a string of major type major and returns the
// bounds of its content.
func (r *cborReader) str(major byte) span {
	n := r.head(major)
	if r.bad || n > uint64(len(r.b)-r.i) {
		r.bad = true
		return span{}
	}
	s := span{lo: r.i, hi: r.i + int(n)}
	r.i = s.hi
	return s
}

// text reads a text string, which must be valid UTF-8, as the decoders'
// UTF8RejectInvalid requires.
func (r *cborReader) text() span {
	s := r.str(majorText)
	if !r.bad && !utf8.Valid(r.b[s.lo:s.hi]) {
		r.bad = true
	}
	return s
}

// blob reads a byte string, or null for a nil slice.
func (r *cborReader) blob() span {
	if !r.bad && r.i < len(r.b) && r.b[r.i] == cborNull {
		r.i++
		return span{null: true}
	}
	return r.str(majorBytes)
}

// done reports whether the whole input was read without a surprise.
func (r *cborReader) done() bool { return !r.bad && r.i == len(r.b) }

// span locates a string's content in the input; null marks a null.
type span struct {
	lo, hi int
	null   bool
}

// texts turns several text spans into strings with one allocation: the
// strings are copies, independent of the input, sharing one backing array.
type texts struct {
	spans [8]span
	n     int
}

func (t *texts) add(s span) int {
	t.spans[t.n] = s
	t.n++
	return t.n - 1
}

// build returns the strings, in the order they were added.
func (t *texts) build(in []byte) [8]string {
	var out [8]string
	total := 0
	for _, s := range t.spans[:t.n] {
		total += s.hi - s.lo
	}
	var sb strings.Builder
	sb.Grow(total)
	for _, s := range t.spans[:t.n] {
		sb.Write(in[s.lo:s.hi])
	}
	all := sb.String()
	off := 0
	for i, s := range t.spans[:t.n] {
		out[i] = all[off : off+s.hi-s.lo]
		off += s.hi - s.lo
	}
	return out
}

// blobs copies several byte-string spans out of the input with one
// allocation. Each slice is capped at its own length, so an append to one
// never writes into another; a null span gives nil, an empty one a
// non-nil empty slice, as the reflection decoder gives.
type blobs struct {
	spans [4]span
	n     int
}

func (t *blobs) add(s span) int {
	t.spans[t.n] = s
	t.n++
	return t.n - 1
}

func (t *blobs) build(in []byte) [4][]byte {
	var out [4][]byte
	total := 0
	for _, s := range t.spans[:t.n] {
		total += s.hi - s.lo
	}
	buf := make([]byte, 0, total)
	for i, s := range t.spans[:t.n] {
		if s.null {
			continue
		}
		lo := len(buf)
		buf = append(buf, in[s.lo:s.hi]...)
		out[i] = buf[lo:len(buf):len(buf)]
	}
	return out
}

// scratchPool holds buffers for the re-encoding a fast decode compares
// with its input. Buffers beyond maxPooledScratch are left to the
// collector.
var scratchPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooledScratch = 64 << 10

// getScratch and putScratch lend a buffer for the re-encoding a fast
// decode compares with its input. (A generic helper taking the encoder as
// a function value would make every decoded value escape to the heap.)
func getScratch() *[]byte { return scratchPool.Get().(*[]byte) }

func putScratch(p *[]byte, b []byte) {
	if cap(b) <= maxPooledScratch {
		*p = b[:0]
		scratchPool.Put(p)
	}
}

// reencodes reports whether enc, a re-encoding written into the scratch
// buffer p, is exactly in, and returns p to the pool.
func reencodes(p *[]byte, enc, in []byte) bool {
	same := bytes.Equal(enc, in)
	putScratch(p, enc)
	return same
}
