package kvfence

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

// The tests below hold the hand-written codecs of fastcbor.go to the
// reflection codec they stand in for: the same bytes out of every value,
// and the same value or refusal, with the same message, out of every input.

// codecGen builds values of the encoded types from fuzz bytes, favouring the
// values where encodings change shape: heads of every width, empty and nil,
// strings that are not ASCII or not UTF-8.
type codecGen struct{ b []byte }

func (g *codecGen) byte() byte {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return c
}

func (g *codecGen) raw(n int) []byte {
	n = min(n, len(g.b))
	p := g.b[:n]
	g.b = g.b[n:]
	return p
}

var edgeUints = []uint64{0, 1, 23, 24, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64}

func (g *codecGen) u64() uint64 {
	switch g.byte() % 4 {
	case 0:
		return 0
	case 1:
		return edgeUints[int(g.byte())%len(edgeUints)]
	case 2:
		var p [8]byte
		copy(p[:], g.raw(8))
		return binary.BigEndian.Uint64(p[:])
	}
	return uint64(g.byte())
}

func (g *codecGen) i64() int64 {
	n := g.u64()
	if g.byte()%2 == 0 {
		return int64(n) // wraps: large uints become negatives
	}
	return ^int64(n >> 1) // -1-n/2: every negative head width, down to MinInt64
}

var edgeTexts = []string{"é", "漢字", "🙂", "\u00ff\u0100", "a\x00b", "\xff", "\xc3", "ok\xed\xa0\x80"}

func (g *codecGen) str() string {
	switch g.byte() % 5 {
	case 0:
		return ""
	case 1:
		return string(g.raw(int(g.byte() % 40))) // any bytes, UTF-8 or not
	case 2:
		return edgeTexts[int(g.byte())%len(edgeTexts)]
	case 3:
		lens := []int{23, 24, 255, 256, 65535, 65536}
		return strings.Repeat("x", lens[int(g.byte())%len(lens)])
	}
	return fmt.Sprintf("name-%d", g.byte())
}

func (g *codecGen) blob() []byte {
	switch g.byte() % 4 {
	case 0:
		return nil
	case 1:
		return []byte{}
	case 2:
		return bytes.Repeat([]byte{0xab}, []int{23, 24, 256, 70000}[g.byte()%4])
	}
	return append([]byte(nil), g.raw(int(g.byte()%48))...)
}

func (g *codecGen) optBlob() *[]byte {
	if g.byte()%3 == 0 {
		return nil
	}
	p := g.blob()
	return &p
}

func (g *codecGen) control() *controlRecord {
	c := &controlRecord{Epoch: g.u64(), Mode: Mode(g.str()), ActiveGrant: g.str(), CreatedAt: g.i64(),
		HoldRequestedAt: g.i64(), HoldCommittedAt: g.i64(), ActivatedAt: g.i64(),
		LastStaleRejectionAt: g.i64(), StaleRejections: g.u64(), MaxGrantTTL: g.i64()}
	switch g.byte() % 3 {
	case 1:
		c.Denials = map[Reason]uint64{}
	case 2:
		c.Denials = map[Reason]uint64{}
		for range g.byte() % 20 {
			k := Reason(g.str())
			if g.byte()%2 == 0 {
				k = []Reason{ReasonStaleEpoch, ReasonGrantExpired, ReasonUnknownTarget, ReasonReceiverHeld}[g.byte()%4]
			}
			c.Denials[k] = g.u64()
		}
	}
	return c
}

func (g *codecGen) grant() *grantRecord {
	return &grantRecord{ID: g.str(), Scope: g.str(), Epoch: g.u64(), Executor: g.str(), Claim: g.str(),
		Action: g.str(), RequestSHA256: g.blob(), NotBefore: g.i64(), NotAfter: g.i64(), Decision: g.str(),
		CreatedAt: g.i64(), RevokedSeq: g.u64(), AuditSeq: g.u64()}
}

func (g *codecGen) target() *targetRecord {
	return &targetRecord{Scope: g.str(), Revision: g.u64(), Value: g.blob()}
}

func (g *codecGen) receipt() *receiptRecord {
	return &receiptRecord{Grant: g.str(), RequestSHA256: g.blob(), Target: g.str(), RevBefore: g.u64(),
		RevAfter: g.u64(), AuditSeq: g.u64(), At: g.i64()}
}

func (g *codecGen) envelope() *Envelope {
	return &Envelope{V: g.u64(), Scope: g.str(), Epoch: g.u64(), Grant: g.str(), Executor: g.str(),
		Claim: g.str(), Request: g.blob()}
}

func (g *codecGen) request() *Request {
	r := &Request{V: g.u64(), Action: g.str(), Target: g.str(), ExpectValue: g.optBlob(), Set: g.optBlob(), Patch: g.blob()}
	if g.byte()%2 == 0 {
		n := g.u64()
		r.ExpectRevision = &n
	}
	return r
}

// value builds a value of one of the six encoded types, chosen by kind.
func (g *codecGen) value(kind uint8) any {
	switch kind % 6 {
	case 0:
		return g.control()
	case 1:
		return g.grant()
	case 2:
		return g.target()
	case 3:
		return g.receipt()
	case 4:
		return g.envelope()
	}
	return g.request()
}

// checkSameEncoding requires encodeFast to give exactly wireEnc's bytes.
func checkSameEncoding(t *testing.T, v any) []byte {
	t.Helper()
	want, err := wireEnc.Marshal(v)
	if err != nil {
		t.Fatalf("reflection encoder refused %+v: %v", v, err)
	}
	got, ok := encodeFast(v)
	if !ok {
		t.Fatalf("no fast encoder for %T", v)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%T %+v:\nfast       %x\nreflection %x", v, v, got, want)
	}
	return want
}

var (
	codecSum   = bytes.Repeat([]byte{7}, 32)
	codecValue = []byte(`{"n":1}`)
	codecRev   = uint64(5)
)

// codecCases are typical and edge values of every encoded type.
func codecCases() []any {
	empty := []byte{}
	var nilSlice []byte
	return []any{
		&controlRecord{},
		&controlRecord{Epoch: 3, Mode: ModeOpen, ActiveGrant: "g", CreatedAt: 1, ActivatedAt: 2, MaxGrantTTL: int64(math.MaxInt64)},
		&controlRecord{Epoch: math.MaxUint64, Mode: ModeHeld, CreatedAt: -1, HoldRequestedAt: math.MinInt64, HoldCommittedAt: -24,
			LastStaleRejectionAt: -25, StaleRejections: 24, Denials: map[Reason]uint64{
				ReasonStaleEpoch: 2, ReasonReceiverHeld: 0, ReasonInactiveGrant: 1 << 40, "zz": 1, "": 3, Reason(strings.Repeat("k", 30)): 4}},
		&controlRecord{Epoch: 1, Mode: "é", Denials: map[Reason]uint64{}},
		&grantRecord{},
		&grantRecord{ID: "g", Scope: "s", Epoch: 1, Executor: "w", Claim: "c", Action: "a", RequestSHA256: codecSum, NotBefore: 1, NotAfter: 2},
		&grantRecord{ID: strings.Repeat("i", 300), Scope: "漢字", Epoch: 256, Executor: "w", Claim: "c", Action: "a", RequestSHA256: empty,
			NotBefore: -1, NotAfter: math.MaxInt64, Decision: "change-1", CreatedAt: 65536, RevokedSeq: 9, AuditSeq: 1 << 33},
		&targetRecord{},
		&targetRecord{Scope: "s", Revision: 1, Value: codecValue},
		&targetRecord{Scope: "s", Revision: 70000, Value: bytes.Repeat([]byte{'a'}, 70000)},
		&targetRecord{Scope: "s", Value: empty},
		&receiptRecord{},
		&receiptRecord{Grant: "g", RequestSHA256: codecSum, Target: "t", RevBefore: 1, RevAfter: 2, AuditSeq: 9, At: -5},
		&Envelope{},
		&Envelope{V: 1, Scope: "s", Epoch: 3, Grant: "g", Executor: "w", Claim: "c", Request: validRequest},
		&Envelope{V: 1, Scope: "s", Epoch: 3, Grant: "g", Executor: "w", Claim: "c", Request: empty},
		&Request{},
		&Request{V: 1, Action: "a", Target: "t", Set: &codecValue},
		&Request{V: 1, Action: "a", Target: "t", Patch: []byte(fixPatch), ExpectRevision: &codecRev, ExpectValue: &codecValue},
		&Request{V: 1, Action: "a", Target: "t", Set: &empty, ExpectValue: &nilSlice, Patch: empty},
		&Request{V: 1, Action: "a", Target: "t", Set: &nilSlice, ExpectRevision: new(uint64)},
	}
}

// recordKinds gives the freshRecord kind of each of the first 13
// codecCases, the records.
var recordKinds = []uint8{0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3}

// Ensure that the hand-written encoders write the reflection encoder's
// bytes, and that encodeCanonical and the exported encoders use them.
func TestFastEncodeMatchesReflection(t *testing.T) {
	for i, v := range codecCases() {
		t.Run(fmt.Sprintf("%d/%T", i, v), func(t *testing.T) {
			want := checkSameEncoding(t, v)
			got, err := encodeCanonical(v)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("encodeCanonical: %x, %v; want %x", got, err, want)
			}
		})
	}
	// A type without a fast encoder still encodes, reflectively.
	if b, err := encodeCanonical(&struct{ A int }{1}); err != nil || !bytes.Equal(b, []byte{0xa1, 0x61, 'A', 1}) {
		t.Fatalf("fallback encoding: %x, %v", b, err)
	}
}

// FuzzFastEncode builds random values of every encoded type and requires
// the fast encoders to write the reflection encoder's bytes, and the
// decoders to read those bytes back as the reflection decoders do (which
// covers canonical layouts carrying invalid UTF-8, nulls and every head
// width).
func FuzzFastEncode(f *testing.F) {
	for kind := range uint8(6) {
		f.Add(kind, []byte{})
		f.Add(kind, bytes.Repeat([]byte{1}, 200))
		f.Add(kind, bytes.Repeat([]byte{2, 1, 5, 3, 0xff, 7}, 60))
		f.Add(kind, []byte("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19"))
	}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		g := &codecGen{b: data}
		b := checkSameEncoding(t, g.value(kind%6))
		switch {
		case kind%6 < 4:
			checkRecordDecode(t, kind%6, b)
		case len(b) <= DefaultMaxEnvelopeSize:
			checkWireDecode(t, kind%6-4, b)
		}
	})
}

// freshRecord returns a pointer to a zero record of the kind's type.
func freshRecord(kind uint8) any {
	return []func() any{
		func() any { return new(controlRecord) },
		func() any { return new(grantRecord) },
		func() any { return new(targetRecord) },
		func() any { return new(receiptRecord) },
	}[kind%4]()
}

// checkRecordDecode requires decodeRecord to give what the reflection
// decoder alone gives for raw: the same value, or an error with the same
// message. It reports whether the fast path took the input.
func checkRecordDecode(t *testing.T, kind uint8, raw []byte) bool {
	t.Helper()
	want := freshRecord(kind)
	wantErr := recordDec.Unmarshal(raw, want)
	fast := freshRecord(kind)
	took := decodeRecordFast(raw, fast)
	if took && (wantErr != nil || !reflect.DeepEqual(fast, want)) {
		t.Fatalf("fast path took %x as %+v; reflection: %+v, %v", raw, fast, want, wantErr)
	}
	got := freshRecord(kind)
	err := decodeRecord(bucketControl, []byte("k"), raw, got)
	switch {
	case wantErr != nil:
		wantMsg := fmt.Errorf("%w: record %q/%q: %v", ErrBadFormat, bucketControl, "k", wantErr).Error()
		if err == nil || err.Error() != wantMsg {
			t.Fatalf("%x: error %v, want %s", raw, err, wantMsg)
		}
	case err != nil:
		t.Fatalf("%x: error %v, reflection decoded %+v", raw, err, want)
	case !reflect.DeepEqual(got, want):
		t.Fatalf("%x: decoded %+v, reflection %+v", raw, got, want)
	}
	return took
}

// mutations returns b with each byte in turn changed, dropped and
// duplicated, and cut at each length, as far as max variants.
func mutations(b []byte, max int) [][]byte {
	var out [][]byte
	for i := 0; i < len(b) && len(out) < max; i++ {
		for _, d := range []byte{1, 0x20, 0x80} {
			m := bytes.Clone(b)
			m[i] ^= d
			out = append(out, m)
		}
		out = append(out, append(bytes.Clone(b[:i]), b[i+1:]...))
		out = append(out, append(bytes.Clone(b[:i+1]), b[i:]...))
		out = append(out, bytes.Clone(b[:i]))
	}
	return out
}

// nonCanonicalRecords are inputs the fast path must leave to the
// reflection decoder, which accepts some and refuses others.
func nonCanonicalRecords() []struct {
	kind uint8
	raw  []byte
} {
	target := func(mid string) []byte {
		return []byte("\xa3\x65scope\x61s" + mid + "\x68revision\x01")
	}
	denials := []byte("\xa4\x64mode\x64held\x65epoch\x01\x67denials\xb8\x41")
	for i := range 65 {
		denials = appendUint(appendText(denials, fmt.Sprintf("r%02d", i)), 1)
	}
	denials = append(denials, "\x6acreated_at\x00"...)
	return []struct {
		kind uint8
		raw  []byte
	}{
		{2, target("\x65value\x40")},                                                                         // canonical: the fast path's
		{2, target("\x65value\xf7")},                                                                         // undefined for a byte string
		{2, []byte("\xa3\x65scope\x61s\x65value\x40\x68revision\x18\x01")},                                   // revision not shortest
		{2, []byte("\xa3\x65value\x40\x65scope\x61s\x68revision\x01")},                                       // keys out of order
		{2, []byte("\xa3\x65scope\x62\xc3\x28\x65value\x40\x68revision\x01")},                                // invalid UTF-8
		{2, []byte("\xa2\x65scope\x61s\x68revision\x01")},                                                    // value missing
		{2, append(target("\x65value\x40"), 0)},                                                              // trailing byte
		{2, []byte("\xa3\x65scope\x7f\x61s\xff\x65value\x40\x68revision\x01")},                               // indefinite text
		{0, []byte("\xa4\x64mode\x64held\x65epoch\x01\x67denials\xa0\x6acreated_at\x00")},                    // empty denials
		{0, []byte("\xa4\x64mode\x64held\x65epoch\x01\x67denials\xa2\x61a\x01\x61a\x02\x6acreated_at\x00")},  // duplicate
		{0, []byte("\xa4\x64mode\x64held\x65epoch\x01\x67denials\xa2\x62bb\x01\x61a\x02\x6acreated_at\x00")}, // unsorted
		{0, []byte("\xa4\x64mode\x64held\x65epoch\x01\x67denials\xa1\x61\xff\x01\x6acreated_at\x00")},        // bad key
		{0, denials}, // more pairs than recordDec's MaxMapPairs
		{0, []byte("\xa4\x64mode\x64held\x65epoch\x01\x6acreated_at\x00\x6cactivated_at\x00")},             // omitempty zero
		{0, []byte("\xa3\x64mode\x64held\x65epoch\x01\x6acreated_at\x3b\x80\x00\x00\x00\x00\x00\x00\x00")}, // int64 overflow
		{1, []byte("\xa1\x62id\x61g")},
		{3, []byte("\xa7\x62at\x00\x65grant\x61g\x66target\x61t\x69audit_seq\x00\x69rev_after\x00\x6arev_before\x00\x6erequest_sha256\xc0\x40")}, // tag
	}
}

// Ensure that record decoding gives the reflection decoder's value or
// error for canonical records (through the fast path) and for inputs the
// fast path must decline.
func TestFastDecodeRecord(t *testing.T) {
	kinds := map[string]uint8{"*kvfence.controlRecord": 0, "*kvfence.grantRecord": 1, "*kvfence.targetRecord": 2, "*kvfence.receiptRecord": 3}
	for i, v := range codecCases() {
		kind, ok := kinds[reflect.TypeOf(v).String()]
		if !ok {
			continue
		}
		raw, err := encodeCanonical(v)
		if err != nil {
			t.Fatal(err)
		}
		if !checkRecordDecode(t, kind, raw) {
			t.Errorf("case %d: the fast path declined its own encoding %x", i, raw)
		}
	}
	for i, c := range nonCanonicalRecords() {
		took := checkRecordDecode(t, c.kind, c.raw)
		if took != (i == 0) {
			t.Errorf("case %d %x: fast path took it: %v", i, c.raw, took)
		}
	}
}

// Ensure that a decoded record shares no bytes with its input, which may
// be the store's mmap, and that a record is not decoded over a non-zero
// value by the fast path (the reflection decoder merges into it).
func TestFastDecodeRecordCopies(t *testing.T) {
	for i, v := range codecCases()[:13] {
		raw, _ := encodeCanonical(v)
		kind := recordKinds[i]
		got := freshRecord(kind)
		if err := decodeRecord(bucketControl, []byte("k"), raw, got); err != nil {
			t.Fatal(err)
		}
		want := freshRecord(kind)
		if err := recordDec.Unmarshal(bytes.Clone(raw), want); err != nil {
			t.Fatal(err)
		}
		for j := range raw {
			raw[j] = 0xee
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: overwriting the input changed the record: %+v, want %+v", i, got, want)
		}
	}
	raw, _ := encodeCanonical(&targetRecord{Scope: "s", Revision: 1, Value: codecValue})
	prior := &targetRecord{Value: []byte("x")}
	if decodeRecordFast(raw, prior) {
		t.Fatal("fast path decoded over a non-zero record")
	}
}

// Ensure that the fast path is fast: decoding a canonical record allocates
// its strings in one block.
func TestFastDecodeRecordAllocs(t *testing.T) {
	raw, _ := encodeCanonical(&grantRecord{ID: "0123456789abcdef0123456789abcdef", Scope: "s", Epoch: 1, Executor: "w", Claim: "c",
		Action: "a", RequestSHA256: codecSum, NotBefore: 1, NotAfter: 2, Decision: "d"})
	var g grantRecord
	key := []byte("k")
	allocs := testing.AllocsPerRun(100, func() {
		g = grantRecord{}
		if err := decodeRecord(bucketGrants, key, raw, &g); err != nil {
			t.Fatal(err)
		}
	})
	// One block for the six strings, one for the digest.
	if allocs > 2 {
		t.Fatalf("decoding a grant record: %v allocations, want at most 2", allocs)
	}
}

// FuzzFastDecodeRecord requires decodeRecord, fast path or not, to give
// exactly what the reflection decoder gives for any input.
func FuzzFastDecodeRecord(f *testing.F) {
	for i, v := range codecCases()[:13] {
		raw, err := encodeCanonical(v)
		if err != nil {
			f.Fatal(err)
		}
		if len(raw) > 4096 {
			continue
		}
		f.Add(recordKinds[i], raw)
		for _, m := range mutations(raw, 30) {
			f.Add(recordKinds[i], m)
		}
	}
	for _, c := range nonCanonicalRecords() {
		f.Add(c.kind, c.raw)
	}
	f.Fuzz(func(t *testing.T, kind uint8, raw []byte) {
		checkRecordDecode(t, kind, raw)
	})
}

// decodeWireReflect is DecodeEnvelope (kind 0) or DecodeRequest (kind 1)
// as it was before the fast path: the reference the fast path is held to.
func decodeWireReflect(kind uint8, b []byte) (any, error) {
	if kind%2 == 0 {
		var e Envelope
		if err := decodeCanonicalReference(b, &e); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformedEnvelope, err)
		}
		if err := e.check(); err != nil {
			return nil, err
		}
		return &e, nil
	}
	var r Request
	if err := decodeCanonicalReference(b, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformedRequest, err)
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	return &r, nil
}

// decodeCanonicalReference is decodeCanonical without its fast path.
func decodeCanonicalReference(b []byte, v any) error {
	if len(b) == 0 {
		return fmt.Errorf("empty input")
	}
	if len(b) > DefaultMaxEnvelopeSize {
		return fmt.Errorf("%d bytes exceeds the %d-byte limit", len(b), DefaultMaxEnvelopeSize)
	}
	if b[0]&0xe0 != 0xa0 {
		return fmt.Errorf("not a CBOR map")
	}
	return decodeCanonicalReflect(b, v)
}

// checkWireDecode requires DecodeEnvelope or DecodeRequest to give what
// the reflection path gives for b: an equal value or the same error. It
// reports whether the fast path took the input.
func checkWireDecode(t *testing.T, kind uint8, b []byte) bool {
	t.Helper()
	want, wantErr := decodeWireReflect(kind, b)
	var got any
	var err error
	var fast any
	if kind%2 == 0 {
		got, err = DecodeEnvelope(b, 0)
		fast = new(Envelope)
	} else {
		got, err = DecodeRequest(b, 0)
		fast = new(Request)
	}
	switch {
	case wantErr != nil:
		if err == nil || err.Error() != wantErr.Error() {
			t.Fatalf("%x: error %v, want %v", b, err, wantErr)
		}
	case err != nil:
		t.Fatalf("%x: error %v, reflection decoded %+v", b, err, want)
	case !reflect.DeepEqual(got, want):
		t.Fatalf("%x: decoded %+v, reflection %+v", b, got, want)
	}
	took := decodeWireFast(b, fast)
	if took {
		// The fast path returns the value before check(), as the
		// reflection decoder does.
		ref := reflect.New(reflect.TypeOf(fast).Elem()).Interface()
		if err := decodeCanonicalReflect(b, ref); err != nil || !reflect.DeepEqual(fast, ref) {
			t.Fatalf("fast path took %x as %+v; reflection: %+v, %v", b, fast, ref, err)
		}
	}
	return took
}

// Ensure that envelope and request decoding gives the reflection path's
// value or error, for canonical inputs (through the fast path) and for
// inputs the fast path must decline.
func TestFastDecodeWire(t *testing.T) {
	for i, v := range codecCases()[13:] {
		kind := uint8(0)
		if _, ok := v.(*Request); ok {
			kind = 1
		}
		b, _ := encodeFast(v)
		// A nil Set or ExpectValue behind a non-nil pointer encodes as
		// null, which decodes as absent: not a canonical encoding, so
		// the fast path must decline it.
		r, isReq := v.(*Request)
		nullOpt := isReq && ((r.Set != nil && *r.Set == nil) || (r.ExpectValue != nil && *r.ExpectValue == nil))
		if took := checkWireDecode(t, kind, b); took == nullOpt {
			t.Errorf("case %d %x: fast path took it: %v", i, b, took)
		}
	}
	req := "\xa4\x61v\x01\x63set\x41x\x66action\x61a\x66target\x61t"
	for i, c := range []struct {
		kind uint8
		b    string
		fast bool // canonical, so the fast path's; check() may refuse it after
	}{
		{1, req, true},
		{1, "\xa4\x61v\x18\x01\x63set\x41x\x66action\x61a\x66target\x61t", false},                                         // v not shortest
		{1, "\xa4\x61v\x01\x63set\x41x\x66action\x61\xff\x66target\x61t", false},                                          // invalid UTF-8
		{1, "\xa4\x61v\x01\x63set\xf6\x66action\x61a\x66target\x61t", false},                                              // null set
		{1, "\xa4\x61v\x01\x63set\x41x\x66target\x61t\x66action\x61a", false},                                             // keys out of order
		{1, "\xa5\x61v\x01\x63set\x41x\x65patch\x40\x66action\x61a\x66target\x61t", false},                                // empty patch
		{1, "\xa5\x61v\x01\x63set\x41x\x66action\x61a\x66target\x61t\x6fexpect_revision\x00", true},                       // revision 0
		{1, "\xa4\x61v\x01\x63set\x41x\x66action\x61a\x66target\x61t\x00", false},                                         // trailing byte
		{1, "\xa4\x61v\x01\x63set\x5f\x41x\xff\x66action\x61a\x66target\x61t", false},                                     // indefinite bytes
		{0, "\xa7\x61v\x01\x65claim\x61c\x65epoch\x01\x65grant\x61g\x65scope\x61s\x67request\xf6\x68executor\x61w", true}, // null request
		{0, "\xa6\x61v\x01\x65claim\x61c\x65epoch\x01\x65grant\x61g\x65scope\x61s\x68executor\x61w", false},               // request missing
	} {
		took := checkWireDecode(t, c.kind, []byte(c.b))
		if took != c.fast {
			t.Errorf("case %d %x: fast path took it: %v", i, c.b, took)
		}
	}
}

// FuzzFastDecodeWire requires DecodeEnvelope and DecodeRequest, fast path
// or not, to give exactly what the reflection path gives for any input.
func FuzzFastDecodeWire(f *testing.F) {
	for _, v := range codecCases()[13:] {
		kind := uint8(0)
		if _, ok := v.(*Request); ok {
			kind = 1
		}
		b, _ := encodeFast(v)
		f.Add(kind, b)
		for _, m := range mutations(b, 40) {
			f.Add(kind, m)
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		checkWireDecode(t, kind, b)
	})
}

// Ensure that a decode error through the fast-path wrapper still wraps
// the sentinel the callers test for.
func TestFastDecodeWireErrors(t *testing.T) {
	if _, err := DecodeRequest([]byte("\xa4\x61v\x18\x01\x63set\x41x\x66action\x61a\x66target\x61t"), 0); !errors.Is(err, ErrMalformedRequest) {
		t.Fatalf("non-shortest request: %v", err)
	}
	if _, err := DecodeEnvelope([]byte("\xa0"), 0); !errors.Is(err, ErrMalformedEnvelope) {
		t.Fatalf("empty envelope: %v", err)
	}
}

// BenchmarkRecordCodec measures the encoding and decoding of the records
// and messages a fenced write handles, fast path against reflection.
func BenchmarkRecordCodec(b *testing.B) {
	cases := []struct {
		name string
		v    any
	}{
		{"control", &controlRecord{Epoch: 2, Mode: ModeOpen, ActiveGrant: "0123456789abcdef0123456789abcdef", CreatedAt: 1, ActivatedAt: 2,
			Denials: map[Reason]uint64{ReasonStaleEpoch: 3}}},
		{"grant", &grantRecord{ID: "0123456789abcdef0123456789abcdef", Scope: "bench/scope", Epoch: 2, Executor: "worker-a", Claim: "claim-1",
			Action: "act", RequestSHA256: codecSum, NotBefore: 1, NotAfter: 2, Decision: "change-123", CreatedAt: 1, AuditSeq: 7}},
		{"target", &targetRecord{Scope: "bench/scope", Revision: 2, Value: bytes.Repeat([]byte{'a'}, 256)}},
		{"receipt", &receiptRecord{Grant: "0123456789abcdef0123456789abcdef", RequestSHA256: codecSum, Target: "bench/target",
			RevBefore: 1, RevAfter: 2, AuditSeq: 9, At: 3}},
		{"envelope", &Envelope{V: 1, Scope: "bench/scope", Epoch: 2, Grant: "0123456789abcdef0123456789abcdef", Executor: "worker-a",
			Claim: "claim-1", Request: validRequest}},
		{"request", &Request{V: 1, Action: "act", Target: "bench/target", ExpectRevision: &codecRev, Set: &codecValue}},
	}
	for _, c := range cases {
		raw, _ := encodeFast(c.v)
		fresh := func() any { return reflect.New(reflect.TypeOf(c.v).Elem()).Interface() }
		b.Run(c.name+"/encode=fast", func(b *testing.B) {
			for b.Loop() {
				encodeFast(c.v)
			}
		})
		b.Run(c.name+"/encode=reflect", func(b *testing.B) {
			for b.Loop() {
				wireEnc.Marshal(c.v)
			}
		})
		b.Run(c.name+"/decode=fast", func(b *testing.B) {
			for b.Loop() {
				v := fresh()
				if !decodeRecordFast(raw, v) && !decodeWireFast(raw, v) {
					b.Fatal("fast path declined")
				}
			}
		})
		b.Run(c.name+"/decode=reflect", func(b *testing.B) {
			for b.Loop() {
				v := fresh()
				var err error
				switch v.(type) {
				case *Envelope, *Request:
					err = decodeCanonicalReflect(raw, v)
				default:
					err = recordDec.Unmarshal(raw, v)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Ensure that a refused record is still reported with its bucket and key
// quoted as bytes, whatever bytes the key holds.
func TestDecodeRecordErrorNamesKey(t *testing.T) {
	for _, key := range [][]byte{[]byte("scope/a"), []byte("a\x00\"b\xff"), receiptKey("s", "é")} {
		err := decodeRecord(bucketReceipts, key, []byte{0xff}, new(receiptRecord))
		inner := recordDec.Unmarshal([]byte{0xff}, new(receiptRecord))
		want := fmt.Sprintf("%v: record %q/%q: %v", ErrBadFormat, bucketReceipts, key, inner)
		if err == nil || err.Error() != want || !errors.Is(err, ErrBadFormat) {
			t.Fatalf("key %q: error %v, want %s", key, err, want)
		}
	}
}

// Ensure that a decoded envelope or request shares no bytes with its
// input, which the caller may reuse.
func TestFastDecodeWireCopies(t *testing.T) {
	for i, v := range codecCases()[13:] {
		b, _ := encodeFast(v)
		got := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		if !decodeWireFast(b, got) {
			continue // a null optional: not canonical, see TestFastDecodeWire
		}
		want := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		if err := decodeCanonicalReflect(bytes.Clone(b), want); err != nil {
			t.Fatal(err)
		}
		for j := range b {
			b[j] = 0xee
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: overwriting the input changed the value: %+v, want %+v", i, got, want)
		}
	}
}
