package kvfence

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// kv is one map entry for hand-built CBOR. val is either raw CBOR bytes
// (rawCBOR) or a Go value encoded canonically.
type kv struct {
	key string
	val any
}

type rawCBOR []byte

// cborMap builds a definite-length map with the entries in the given order,
// so tests can produce duplicates, unsorted keys and odd encodings that no
// encoder would.
func cborMap(t *testing.T, entries ...kv) []byte {
	t.Helper()
	if len(entries) > 23 {
		t.Fatal("cborMap: too many entries")
	}
	out := []byte{0xa0 | byte(len(entries))}
	for _, e := range entries {
		k, err := wireEnc.Marshal(e.key)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, k...)
		if raw, ok := e.val.(rawCBOR); ok {
			out = append(out, raw...)
			continue
		}
		v, err := wireEnc.Marshal(e.val)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v...)
	}
	return out
}

var validRequest = []byte{0xa1} // replaced in init below by a real request

func init() {
	b, err := EncodeRequest(&Request{V: 1, Action: "act", Target: "t", Set: ptr([]byte("x"))})
	if err != nil {
		panic(err)
	}
	validRequest = b
}

// envelopeEntries returns a valid envelope's entries in canonical order,
// with replace applied (a nil val drops the entry).
func envelopeEntries(replace map[string]any) []kv {
	entries := []kv{{"v", uint64(1)}, {"claim", "c"}, {"epoch", uint64(1)}, {"grant", "g"},
		{"scope", "s"}, {"request", validRequest}, {"executor", "w"}}
	var out []kv
	for _, e := range entries {
		if v, ok := replace[e.key]; ok {
			if v == nil {
				continue
			}
			e.val = v
		}
		out = append(out, e)
	}
	return out
}

// Ensure that the hand-built canonical envelope equals the encoder's, so the
// malformed variants below differ from a valid envelope in one way only.
func TestEnvelope_HandBuiltIsCanonical(t *testing.T) {
	want, err := EncodeEnvelope(&Envelope{V: 1, Scope: "s", Epoch: 1, Grant: "g", Executor: "w", Claim: "c", Request: validRequest})
	if err != nil {
		t.Fatal(err)
	}
	got := cborMap(t, envelopeEntries(nil)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("hand-built %x, encoder %x", got, want)
	}
	if _, err := DecodeEnvelope(got, 0); err != nil {
		t.Fatalf("DecodeEnvelope(valid): %v", err)
	}
}

// Ensure that every malformed class is rejected by the envelope decoder.
func TestDecodeEnvelope_Malformed(t *testing.T) {
	valid := cborMap(t, envelopeEntries(nil)...)
	entries := envelopeEntries(nil)
	swapped := append([]kv(nil), entries...)
	swapped[1], swapped[2] = swapped[2], swapped[1]
	indef := append([]byte{0xbf}, valid[1:]...)
	indef = append(indef, 0xff)

	tests := []struct {
		name  string
		input []byte
		limit int
		want  string
	}{
		{"empty", nil, 0, "empty"},
		{"not a map", []byte{0x80}, 0, "not a CBOR map"},
		{"duplicate key", cborMap(t, append(entries, kv{"executor", "w"})...), 0, "duplicate"},
		{"unknown key", cborMap(t, append(entries, kv{"zzzzzzzzzz", "x"})...), 0, "unknown field"},
		{"key differs in case", cborMap(t, envelopeEntries(map[string]any{"scope": nil})[:5]...), 0, ""},
		{"unsorted keys", cborMap(t, swapped...), 0, "canonical"},
		{"indefinite-length map", indef, 0, "indefinite"},
		{"indefinite-length string", cborMap(t, envelopeEntries(map[string]any{"claim": rawCBOR{0x7f, 0x61, 0x63, 0xff}})...), 0, "indefinite"},
		{"tag", cborMap(t, envelopeEntries(map[string]any{"epoch": rawCBOR{0xc1, 0x01}})...), 0, "tag"},
		{"float epoch", cborMap(t, envelopeEntries(map[string]any{"epoch": rawCBOR{0xf9, 0x3c, 0x00}})...), 0, "cannot unmarshal"},
		{"non-shortest integer", cborMap(t, envelopeEntries(map[string]any{"epoch": rawCBOR{0x18, 0x01}})...), 0, "canonical"},
		{"text where bytes belong", cborMap(t, envelopeEntries(map[string]any{"request": "abc"})...), 0, "cannot unmarshal"},
		{"trailing bytes", append(append([]byte(nil), valid...), 0x00), 0, "extraneous"},
		{"over the size limit", valid, len(valid) - 1, "limit"},
		{"missing field", cborMap(t, envelopeEntries(map[string]any{"claim": nil})...), 0, "canonical"},
		{"wrong version", cborMap(t, envelopeEntries(map[string]any{"v": uint64(2)})...), 0, "version"},
		{"empty scope", cborMap(t, envelopeEntries(map[string]any{"scope": ""})...), 0, "scope is empty"},
		{"invalid UTF-8", cborMap(t, envelopeEntries(map[string]any{"scope": rawCBOR{0x62, 0xff, 0xfe}})...), 0, "UTF-8"},
		{"control character", cborMap(t, envelopeEntries(map[string]any{"grant": "a\nb"})...), 0, "control"},
		{"empty request", cborMap(t, envelopeEntries(map[string]any{"request": []byte{}})...), 0, "request is empty"},
		{"nested too deep", cborMap(t, envelopeEntries(map[string]any{"claim": rawCBOR{0x81, 0x81, 0x81, 0x81, 0x81, 0x01}})...), 0, ""},
	}
	// "key differs in case": a valid envelope whose "scope" key is spelled "Scope".
	tests[4].input = cborMap(t, kv{"v", uint64(1)}, kv{"Scope", "s"}, kv{"claim", "c"}, kv{"epoch", uint64(1)},
		kv{"grant", "g"}, kv{"request", validRequest}, kv{"executor", "w"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeEnvelope(tt.input, tt.limit)
			if !errors.Is(err, ErrMalformedEnvelope) {
				t.Fatalf("DecodeEnvelope = %v, want ErrMalformedEnvelope", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

// Ensure that the request decoder enforces its own rules on top of the
// shared canonical checks.
func TestDecodeRequest_Malformed(t *testing.T) {
	base := func(replace ...kv) []byte {
		entries := []kv{{"v", uint64(1)}, {"set", []byte("x")}, {"action", "a"}, {"target", "t"}}
		for _, r := range replace {
			entries = append(entries, r)
		}
		return cborMap(t, entries...)
	}
	if _, err := DecodeRequest(base(), 0); err != nil {
		t.Fatalf("valid hand-built request: %v", err)
	}
	tests := []struct {
		name  string
		input []byte
		want  string
	}{
		{"set and patch", cborMap(t, kv{"v", uint64(1)}, kv{"set", []byte("x")}, kv{"patch", []byte("[]")}, kv{"action", "a"}, kv{"target", "t"}), "mutually exclusive"},
		{"neither set nor patch", cborMap(t, kv{"v", uint64(1)}, kv{"action", "a"}, kv{"target", "t"}), "required"},
		{"patch not JSON Patch", cborMap(t, kv{"v", uint64(1)}, kv{"patch", []byte("{}")}, kv{"action", "a"}, kv{"target", "t"}), "JSON Patch"},
		{"expect_revision zero", base(kv{"expect_revision", uint64(0)}), "expect_revision 0"},
		{"empty patch encoded", cborMap(t, kv{"v", uint64(1)}, kv{"set", []byte("x")}, kv{"patch", []byte{}}, kv{"action", "a"}, kv{"target", "t"}), ""},
		{"float revision", base(kv{"expect_revision", rawCBOR{0xfb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0}}), ""},
		{"unknown key", base(kv{"expect_valuee", []byte("x")}), "unknown field"},
		{"empty action", cborMap(t, kv{"v", uint64(1)}, kv{"set", []byte("x")}, kv{"action", ""}, kv{"target", "t"}), "action is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeRequest(tt.input, 0)
			if !errors.Is(err, ErrMalformedRequest) {
				t.Fatalf("DecodeRequest = %v, want ErrMalformedRequest", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

// Ensure that optional fields round-trip, including present-but-empty
// values, which are meaningful ("expect the empty value", "set to empty").
func TestRequest_RoundTrip(t *testing.T) {
	for _, r := range []*Request{
		{V: 1, Action: "a", Target: "t", Set: ptr([]byte{})},
		{V: 1, Action: "a", Target: "t", ExpectValue: ptr([]byte{}), ExpectRevision: ptr(uint64(7)), Set: ptr([]byte("v"))},
		{V: 1, Action: "a", Target: "t", Patch: []byte(fixPatch)},
	} {
		b, err := EncodeRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRequest(b, 0)
		if err != nil {
			t.Fatalf("DecodeRequest(%x): %v", b, err)
		}
		again, err := EncodeRequest(got)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("round trip %x -> %x (%v)", b, again, err)
		}
		if (r.Set == nil) != (got.Set == nil) || (r.ExpectValue == nil) != (got.ExpectValue == nil) {
			t.Fatalf("optional presence lost: %+v -> %+v", r, got)
		}
	}
}

// FuzzDecodeEnvelope checks that the decoder never panics and accepts only
// inputs that are exactly their own canonical encoding.
func FuzzDecodeEnvelope(f *testing.F) {
	valid, err := EncodeEnvelope(&Envelope{V: 1, Scope: "s", Epoch: 3, Grant: "g", Executor: "w", Claim: "c", Request: validRequest})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte{0xa0})
	f.Add([]byte{0xbf, 0xff})
	f.Add(append(append([]byte(nil), valid...), 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEnvelope(b, 0)
		if err != nil {
			if !errors.Is(err, ErrMalformedEnvelope) {
				t.Fatalf("error does not wrap ErrMalformedEnvelope: %v", err)
			}
			return
		}
		again, err := EncodeEnvelope(e)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("accepted non-canonical input %x (re-encodes to %x, %v)", b, again, err)
		}
	})
}

// FuzzDecodeRequest is FuzzDecodeEnvelope for requests.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(validRequest)
	p, err := EncodeRequest(&Request{V: 1, Action: "a", Target: "t", ExpectRevision: ptr(uint64(1)), Patch: []byte(fixPatch)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(p)
	f.Add([]byte{0xa0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b, 0)
		if err != nil {
			if !errors.Is(err, ErrMalformedRequest) {
				t.Fatalf("error does not wrap ErrMalformedRequest: %v", err)
			}
			return
		}
		again, err := EncodeRequest(r)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("accepted non-canonical input %x (re-encodes to %x, %v)", b, again, err)
		}
	})
}
