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

func appendControl(b []byte, c *controlRecord) []byte {
	n := count(3, len(c.Denials) > 0, c.ActivatedAt != 0, c.ActiveGrant != "", c.MaxGrantTTL != 0,
		c.StaleRejections != 0, c.HoldCommittedAt != 0, c.HoldRequestedAt != 0, c.LastStaleRejectionAt != 0)
	b = appendHead(b, majorMap, uint64(n))
	b = appendText(append(b, kMode...), string(c.Mode))
	b = appendUint(append(b, kEpoch...), c.Epoch)
	if len(c.Denials) > 0 {
		b = appendDenials(append(b, kDenials...), c.Denials)
	}
	b = appendInt(append(b, kCreatedAt...), c.CreatedAt)
	if c.ActivatedAt != 0 {
		b = appendInt(append(b, kActivatedAt...), c.ActivatedAt)
	}
	if c.ActiveGrant != "" {
		b = appendText(append(b, kActiveGrant...), c.ActiveGrant)
	}
	if c.MaxGrantTTL != 0 {
		b = appendInt(append(b, kMaxGrantTTL...), c.MaxGrantTTL)
	}
	if c.StaleRejections != 0 {
		b = appendUint(append(b, kStaleRejections...), c.StaleRejections)
	}
	if c.HoldCommittedAt != 0 {
		b = appendInt(append(b, kHoldCommittedAt...), c.HoldCommittedAt)
	}
	if c.HoldRequestedAt != 0 {
		b = appendInt(append(b, kHoldRequestedAt...), c.HoldRequestedAt)
	}
	if c.LastStaleRejectionAt != 0 {
		b = appendInt(append(b, kLastStaleRejectionAt...), c.LastStaleRejectionAt)
	}
	return b
}

// textKeyLess orders text keys as their encodings sort: a shorter string
// has a smaller head, and equal heads leave the bytes to decide.
func textKeyLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

func appendDenials(b []byte, m map[Reason]uint64) []byte {
	var buf [24]Reason
	keys := buf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	// Insertion sort: the map holds at most one entry per reason code.
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && textKeyLess(string(keys[j]), string(keys[j-1])); j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	b = appendHead(b, majorMap, uint64(len(keys)))
	for _, k := range keys {
		b = appendUint(appendText(b, string(k)), m[k])
	}
	return b
}

func appendGrant(b []byte, g *grantRecord) []byte {
	n := count(10, g.Decision != "", g.AuditSeq != 0, g.RevokedSeq != 0)
	b = appendHead(b, majorMap, uint64(n))
	b = appendText(append(b, kID...), g.ID)
	b = appendText(append(b, kClaim...), g.Claim)
	b = appendUint(append(b, kEpoch...), g.Epoch)
	b = appendText(append(b, kScope...), g.Scope)
	b = appendText(append(b, kAction...), g.Action)
	if g.Decision != "" {
		b = appendText(append(b, kDecision...), g.Decision)
	}
	b = appendText(append(b, kExecutor...), g.Executor)
	if g.AuditSeq != 0 {
		b = appendUint(append(b, kAuditSeq...), g.AuditSeq)
	}
	b = appendInt(append(b, kNotAfter...), g.NotAfter)
	b = appendInt(append(b, kCreatedAt...), g.CreatedAt)
	b = appendInt(append(b, kNotBefore...), g.NotBefore)
	if g.RevokedSeq != 0 {
		b = appendUint(append(b, kRevokedSeq...), g.RevokedSeq)
	}
	return appendBytes(append(b, kRequestSHA256...), g.RequestSHA256)
}

func appendTarget(b []byte, t *targetRecord) []byte {
	b = appendHead(b, majorMap, 3)
	b = appendText(append(b, kScope...), t.Scope)
	b = appendBytes(append(b, kValue...), t.Value)
	return appendUint(append(b, kRevision...), t.Revision)
}

func appendReceipt(b []byte, rc *receiptRecord) []byte {
	b = appendHead(b, majorMap, 7)
	b = appendInt(append(b, kAt...), rc.At)
	b = appendText(append(b, kGrant...), rc.Grant)
	b = appendText(append(b, kTarget...), rc.Target)
	b = appendUint(append(b, kAuditSeq...), rc.AuditSeq)
	b = appendUint(append(b, kRevAfter...), rc.RevAfter)
	b = appendUint(append(b, kRevBefore...), rc.RevBefore)
	return appendBytes(append(b, kRequestSHA256...), rc.RequestSHA256)
}

func appendEnvelope(b []byte, e *Envelope) []byte {
	b = appendHead(b, majorMap, 7)
	b = appendUint(append(b, kV...), e.V)
	b = appendText(append(b, kClaim...), e.Claim)
	b = appendUint(append(b, kEpoch...), e.Epoch)
	b = appendText(append(b, kGrant...), e.Grant)
	b = appendText(append(b, kScope...), e.Scope)
	b = appendBytes(append(b, kRequest...), e.Request)
	return appendText(append(b, kExecutor...), e.Executor)
}

func appendRequest(b []byte, r *Request) []byte {
	n := count(3, r.Set != nil, len(r.Patch) > 0, r.ExpectValue != nil, r.ExpectRevision != nil)
	b = appendHead(b, majorMap, uint64(n))
	b = appendUint(append(b, kV...), r.V)
	if r.Set != nil {
		b = appendBytes(append(b, kSet...), *r.Set)
	}
	if len(r.Patch) > 0 {
		b = appendBytes(append(b, kPatch...), r.Patch)
	}
	b = appendText(append(b, kAction...), r.Action)
	b = appendText(append(b, kTarget...), r.Target)
	if r.ExpectValue != nil {
		b = appendBytes(append(b, kExpectValue...), *r.ExpectValue)
	}
	if r.ExpectRevision != nil {
		b = appendUint(append(b, kExpectRevision...), *r.ExpectRevision)
	}
	return b
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
		if x == nil {
			return nil, false
		}
		return appendTarget(make([]byte, 0, 50+len(x.Scope)+len(x.Value)), x), true
	case *receiptRecord:
		if x == nil {
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

// internMode returns the constant for a known mode, so that decoding a
// control record does not allocate for it.
func internMode(b []byte) (Mode, bool) {
	switch string(b) {
	case string(ModeHeld):
		return ModeHeld, true
	case string(ModeOpen):
		return ModeOpen, true
	}
	return "", false
}

// knownReasons maps each denial code to its constant, for the keys of a
// control record's Denials.
var knownReasons = func() map[string]Reason {
	m := make(map[string]Reason)
	for _, r := range []Reason{
		ReasonMalformedEnvelope, ReasonMalformedRequest, ReasonUnknownScope, ReasonReceiverHeld,
		ReasonStaleEpoch, ReasonInactiveGrant, ReasonUnknownGrant, ReasonExecutorMismatch,
		ReasonClaimMismatch, ReasonRequestMismatch, ReasonGrantNotYetValid, ReasonGrantExpired,
		ReasonActionReuseConflict, ReasonUnknownTarget, ReasonPreconditionFailed,
	} {
		m[string(r)] = r
	}
	return m
}()

func scanControl(in []byte) (controlRecord, bool) {
	var c controlRecord
	r := cborReader{b: in}
	left := r.head(majorMap)
	if r.bad || left < 3 {
		return c, false
	}
	var grant span
	hasGrant := false
	field := func(k string, optional bool) bool {
		if left > 0 && r.key(k) {
			left--
			return true
		}
		if !optional {
			r.bad = true
		}
		return false
	}
	var mode span
	if field(kMode, false) {
		mode = r.text()
	}
	if field(kEpoch, false) {
		c.Epoch = r.uint()
	}
	if field(kDenials, true) {
		n := r.head(majorMap)
		if r.bad || n > recordMaxMapPairs {
			return c, false
		}
		c.Denials = make(map[Reason]uint64, n)
		for range n {
			s := r.text()
			v := r.uint()
			if r.bad {
				return c, false
			}
			k, ok := knownReasons[string(in[s.lo:s.hi])]
			if !ok {
				k = Reason(in[s.lo:s.hi])
			}
			if _, dup := c.Denials[k]; dup {
				return c, false
			}
			c.Denials[k] = v
		}
	}
	if field(kCreatedAt, false) {
		c.CreatedAt = r.int()
	}
	if field(kActivatedAt, true) {
		c.ActivatedAt = r.int()
	}
	if field(kActiveGrant, true) {
		grant, hasGrant = r.text(), true
	}
	if field(kMaxGrantTTL, true) {
		c.MaxGrantTTL = r.int()
	}
	if field(kStaleRejections, true) {
		c.StaleRejections = r.uint()
	}
	if field(kHoldCommittedAt, true) {
		c.HoldCommittedAt = r.int()
	}
	if field(kHoldRequestedAt, true) {
		c.HoldRequestedAt = r.int()
	}
	if field(kLastStaleRejectionAt, true) {
		c.LastStaleRejectionAt = r.int()
	}
	if left != 0 || !r.done() {
		return c, false
	}
	m, ok := internMode(in[mode.lo:mode.hi])
	if !ok {
		m = Mode(in[mode.lo:mode.hi])
	}
	c.Mode = m
	if hasGrant {
		c.ActiveGrant = string(in[grant.lo:grant.hi])
	}
	return c, true
}

func scanGrant(in []byte) (grantRecord, bool) {
	var g grantRecord
	r := cborReader{b: in}
	left := r.head(majorMap)
	if r.bad || left < 10 {
		return g, false
	}
	field := func(k string, optional bool) bool {
		if left > 0 && r.key(k) {
			left--
			return true
		}
		if !optional {
			r.bad = true
		}
		return false
	}
	var ts texts
	id, claim, scope, action, decision, executor := -1, -1, -1, -1, -1, -1
	if field(kID, false) {
		id = ts.add(r.text())
	}
	if field(kClaim, false) {
		claim = ts.add(r.text())
	}
	if field(kEpoch, false) {
		g.Epoch = r.uint()
	}
	if field(kScope, false) {
		scope = ts.add(r.text())
	}
	if field(kAction, false) {
		action = ts.add(r.text())
	}
	if field(kDecision, true) {
		decision = ts.add(r.text())
	}
	if field(kExecutor, false) {
		executor = ts.add(r.text())
	}
	if field(kAuditSeq, true) {
		g.AuditSeq = r.uint()
	}
	if field(kNotAfter, false) {
		g.NotAfter = r.int()
	}
	if field(kCreatedAt, false) {
		g.CreatedAt = r.int()
	}
	if field(kNotBefore, false) {
		g.NotBefore = r.int()
	}
	if field(kRevokedSeq, true) {
		g.RevokedSeq = r.uint()
	}
	var sum span
	if field(kRequestSHA256, false) {
		sum = r.blob()
	}
	if left != 0 || !r.done() {
		return g, false
	}
	s := ts.build(in)
	g.ID, g.Claim, g.Scope, g.Action, g.Executor = s[id], s[claim], s[scope], s[action], s[executor]
	if decision >= 0 {
		g.Decision = s[decision]
	}
	g.RequestSHA256 = copySpan(in, sum)
	return g, true
}

// copySpan returns a copy of one byte-string span, nil for null.
func copySpan(in []byte, s span) []byte {
	if s.null {
		return nil
	}
	return append(make([]byte, 0, s.hi-s.lo), in[s.lo:s.hi]...)
}

func scanTarget(in []byte) (targetRecord, bool) {
	var t targetRecord
	r := cborReader{b: in}
	if r.head(majorMap) != 3 || !r.key(kScope) {
		return t, false
	}
	scope := r.text()
	if !r.key(kValue) {
		return t, false
	}
	value := r.blob()
	if !r.key(kRevision) {
		return t, false
	}
	t.Revision = r.uint()
	if !r.done() {
		return t, false
	}
	t.Scope = string(in[scope.lo:scope.hi])
	t.Value = copySpan(in, value)
	return t, true
}

func scanReceipt(in []byte) (receiptRecord, bool) {
	var rc receiptRecord
	r := cborReader{b: in}
	if r.head(majorMap) != 7 || !r.key(kAt) {
		return rc, false
	}
	rc.At = r.int()
	var ts texts
	if !r.key(kGrant) {
		return rc, false
	}
	grant := ts.add(r.text())
	if !r.key(kTarget) {
		return rc, false
	}
	target := ts.add(r.text())
	if !r.key(kAuditSeq) {
		return rc, false
	}
	rc.AuditSeq = r.uint()
	if !r.key(kRevAfter) {
		return rc, false
	}
	rc.RevAfter = r.uint()
	if !r.key(kRevBefore) {
		return rc, false
	}
	rc.RevBefore = r.uint()
	if !r.key(kRequestSHA256) {
		return rc, false
	}
	sum := r.blob()
	if !r.done() {
		return rc, false
	}
	s := ts.build(in)
	rc.Grant, rc.Target = s[grant], s[target]
	rc.RequestSHA256 = copySpan(in, sum)
	return rc, true
}

func scanEnvelope(in []byte) (Envelope, bool) {
	var e Envelope
	r := cborReader{b: in}
	if r.head(majorMap) != 7 || !r.key(kV) {
		return e, false
	}
	e.V = r.uint()
	var ts texts
	if !r.key(kClaim) {
		return e, false
	}
	claim := ts.add(r.text())
	if !r.key(kEpoch) {
		return e, false
	}
	e.Epoch = r.uint()
	if !r.key(kGrant) {
		return e, false
	}
	grant := ts.add(r.text())
	if !r.key(kScope) {
		return e, false
	}
	scope := ts.add(r.text())
	if !r.key(kRequest) {
		return e, false
	}
	req := r.blob()
	if !r.key(kExecutor) {
		return e, false
	}
	executor := ts.add(r.text())
	if !r.done() {
		return e, false
	}
	s := ts.build(in)
	e.Claim, e.Grant, e.Scope, e.Executor = s[claim], s[grant], s[scope], s[executor]
	e.Request = copySpan(in, req)
	return e, true
}

// requestBox holds a request's optional fields, so that decoding one
// allocates them together.
type requestBox struct {
	rev        uint64
	set, value []byte
}

func scanRequest(in []byte) (Request, bool) {
	var q Request
	r := cborReader{b: in}
	left := r.head(majorMap)
	if r.bad || left < 3 {
		return q, false
	}
	field := func(k string, optional bool) bool {
		if left > 0 && r.key(k) {
			left--
			return true
		}
		if !optional {
			r.bad = true
		}
		return false
	}
	var bs blobs
	set, patch, value := -1, -1, -1
	if field(kV, false) {
		q.V = r.uint()
	}
	// A null optional decodes as absent and then fails the re-encoding;
	// declining it here is the same outcome, reached sooner.
	if field(kSet, true) {
		if set = bs.add(r.blob()); bs.spans[set].null {
			return q, false
		}
	}
	if field(kPatch, true) {
		if patch = bs.add(r.blob()); bs.spans[patch].null {
			return q, false
		}
	}
	var ts texts
	action, target := -1, -1
	if field(kAction, false) {
		action = ts.add(r.text())
	}
	if field(kTarget, false) {
		target = ts.add(r.text())
	}
	if field(kExpectValue, true) {
		if value = bs.add(r.blob()); bs.spans[value].null {
			return q, false
		}
	}
	hasRev := field(kExpectRevision, true)
	var rev uint64
	if hasRev {
		rev = r.uint()
	}
	if left != 0 || !r.done() {
		return q, false
	}
	s := ts.build(in)
	q.Action, q.Target = s[action], s[target]
	b := bs.build(in)
	if patch >= 0 {
		q.Patch = b[patch]
	}
	if set >= 0 || value >= 0 || hasRev {
		box := new(requestBox)
		if set >= 0 {
			box.set = b[set]
			q.Set = &box.set
		}
		if value >= 0 {
			box.value = b[value]
			q.ExpectValue = &box.value
		}
		if hasRev {
			box.rev = rev
			q.ExpectRevision = &box.rev
		}
	}
	return q, true
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

// decodeRecordFast decodes a canonical control, grant, target or receipt
// record into v, which must point to a zero record. It reports false, with
// v unchanged, for anything else; the caller then decodes reflectively. A
// non-zero v is left to the reflection decoder too, which merges into it.
func decodeRecordFast(raw []byte, v any) bool {
	switch x := v.(type) {
	case *controlRecord:
		if x == nil || !x.isZero() {
			return false
		}
		c, ok := scanControl(raw)
		if !ok {
			return false
		}
		p := getScratch()
		enc := appendControl((*p)[:0], &c)
		same := bytes.Equal(enc, raw)
		putScratch(p, enc)
		if same {
			*x = c
			return true
		}
	case *grantRecord:
		if x == nil || !x.isZero() {
			return false
		}
		g, ok := scanGrant(raw)
		if !ok {
			return false
		}
		p := getScratch()
		enc := appendGrant((*p)[:0], &g)
		same := bytes.Equal(enc, raw)
		putScratch(p, enc)
		if same {
			*x = g
			return true
		}
	case *targetRecord:
		if x == nil || !(x.Scope == "" && x.Revision == 0 && x.Value == nil) {
			return false
		}
		t, ok := scanTarget(raw)
		if !ok {
			return false
		}
		p := getScratch()
		enc := appendTarget((*p)[:0], &t)
		same := bytes.Equal(enc, raw)
		putScratch(p, enc)
		if same {
			*x = t
			return true
		}
	case *receiptRecord:
		if x == nil || !(x.Grant == "" && x.RequestSHA256 == nil && x.Target == "" && x.RevBefore == 0 &&
			x.RevAfter == 0 && x.AuditSeq == 0 && x.At == 0) {
			return false
		}
		rc, ok := scanReceipt(raw)
		if !ok {
			return false
		}
		p := getScratch()
		enc := appendReceipt((*p)[:0], &rc)
		same := bytes.Equal(enc, raw)
		putScratch(p, enc)
		if same {
			*x = rc
			return true
		}
	}
	return false
}

// decodeWireFast is decodeRecordFast for envelopes and requests.
func decodeWireFast(b []byte, v any) bool {
	switch x := v.(type) {
	case *Envelope:
		if x == nil || !(x.V == 0 && x.Scope == "" && x.Epoch == 0 && x.Grant == "" && x.Executor == "" &&
			x.Claim == "" && x.Request == nil) {
			return false
		}
		e, ok := scanEnvelope(b)
		if !ok {
			return false
		}
		p := getScratch()
		enc := appendEnvelope((*p)[:0], &e)
		same := bytes.Equal(enc, b)
		putScratch(p, enc)
		if same {
			*x = e
			return true
		}
	case *Request:
		if x == nil || !(x.V == 0 && x.Action == "" && x.Target == "" && x.ExpectRevision == nil &&
			x.ExpectValue == nil && x.Set == nil && x.Patch == nil && x.patch == nil) {
			return false
		}
		q, ok := scanRequest(b)
		if !ok {
			return false
		}
		p := getScratch()
		enc := appendRequest((*p)[:0], &q)
		same := bytes.Equal(enc, b)
		putScratch(p, enc)
		if same {
			*x = q
			return true
		}
	}
	return false
}

func (c *controlRecord) isZero() bool {
	return c.Epoch == 0 && c.Mode == "" && c.ActiveGrant == "" && c.CreatedAt == 0 && c.HoldRequestedAt == 0 &&
		c.HoldCommittedAt == 0 && c.ActivatedAt == 0 && c.LastStaleRejectionAt == 0 && c.StaleRejections == 0 &&
		c.Denials == nil && c.MaxGrantTTL == 0
}

func (g *grantRecord) isZero() bool {
	return g.ID == "" && g.Scope == "" && g.Epoch == 0 && g.Executor == "" && g.Claim == "" && g.Action == "" &&
		g.RequestSHA256 == nil && g.NotBefore == 0 && g.NotAfter == 0 && g.Decision == "" && g.CreatedAt == 0 &&
		g.RevokedSeq == 0 && g.AuditSeq == 0
}
