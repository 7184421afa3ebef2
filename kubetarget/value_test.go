package kubetarget

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that a ConfigMap's data is written in RFC 8785's canonical form:
// keys sorted, no whitespace, only the escapes JSON requires, and the
// same bytes whatever form the value came in.
func TestCanonicalValue(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", `{}`, `{}`},
		{"whitespace and order", " {\n \"b\" : \"2\", \"a\":\"1\" }\n", `{"a":"1","b":"2"}`},
		{"key order is byte order", `{"b":"","B":"","_":"","-":"",".a":"","0":""}`, `{"-":"",".a":"","0":"","B":"","_":"","b":""}`},
		{"short escapes", `{"k":"\b\t\n\f\r\"\\"}`, `{"k":"\b\t\n\f\r\"\\"}`},
		{"other controls as lower-case hex", `{"k":"\u0001\u001F"}`, `{"k":"\u0001\u001f"}`},
		{"escaped printable characters written plainly", `{"k":"\u0041\/\u00e9\u2028<>&"}`, "{\"k\":\"A/\u00e9\u2028<>&\"}"},
		{"non-ASCII plainly", `{"k":"日本 😀"}`, `{"k":"日本 😀"}`},
		{"surrogate pair escape", `{"k":"\ud83d\ude00"}`, `{"k":"😀"}`},
		{"DEL plainly", "{\"k\":\"\x7f\"}", "{\"k\":\"\x7f\"}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CanonicalValue([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("CanonicalValue(%q) = %q; want %q", tc.in, got, tc.want)
			}
			again, err := CanonicalValue(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Errorf("canonical form is not a fixed point: %q, %v", again, err)
			}
		})
	}
}

// Ensure that anything but one JSON object of strings with valid, unique
// ConfigMap keys is refused with ErrInvalidValue, including what a JSON
// decoder would otherwise accept silently (a repeated key, invalid UTF-8,
// trailing data).
func TestDecodeDataRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty input", ``, "EOF"},
		{"null", `null`, "not a JSON object"},
		{"array", `["a"]`, "not a JSON object"},
		{"string", `"a"`, "not a JSON object"},
		{"number value", `{"a":1}`, "holds a number"},
		{"null value", `{"a":null}`, "holds null"},
		{"bool value", `{"a":true}`, "holds a boolean"},
		{"object value", `{"a":{}}`, "holds an object or array"},
		{"repeated key", `{"a":"1","a":"2"}`, "more than once"},
		{"key with slash", `{"a/b":"1"}`, "not a valid ConfigMap key"},
		{"key with space", `{"a b":"1"}`, "not a valid ConfigMap key"},
		{"empty key", `{"":"1"}`, "not a valid ConfigMap key"},
		{"dot key", `{".":"1"}`, "not a valid ConfigMap key"},
		{"dot-dot key", `{"..":"1"}`, "not a valid ConfigMap key"},
		{"non-ASCII key", `{"é":"1"}`, "not a valid ConfigMap key"},
		{"long key", `{"` + strings.Repeat("k", maxKeyLen+1) + `":"1"}`, "not a valid ConfigMap key"},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", "UTF-8"},
		{"trailing object", `{}{}`, "after the object"},
		{"trailing garbage", `{} x`, "after the object"},
		{"unterminated", `{"a":"1"`, "EOF"},
		{"too large", `{"a":"` + strings.Repeat("x", MaxValueBytes) + `"}`, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeData([]byte(tc.in))
			if !errors.Is(err, ErrInvalidValue) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeData(%.40q) = %v; want ErrInvalidValue with %q", tc.in, err, tc.want)
			}
		})
	}
}

// Ensure that the longest valid key is accepted, so that the key check
// refuses no key the API server accepts at the bound.
func TestDecodeDataLongestKey(t *testing.T) {
	k := strings.Repeat("k", maxKeyLen)
	d, err := DecodeData([]byte(`{"` + k + `":"v"}`))
	if err != nil || d[k] != "v" {
		t.Fatalf("DecodeData of a %d-byte key: %v, %v", maxKeyLen, d, err)
	}
}

// FuzzDecodeData checks that whatever DecodeData accepts, EncodeData
// writes as JSON that means the same data and that decodes back to it,
// and that the canonical form is a fixed point.
func FuzzDecodeData(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"1","b":"2"}`, `{"k":"\u0001\n\"\\"}`, `{"a":"1","a":"2"}`, `{"a":1}`, "{\"a\":\"\xff\"}", `{"k":"\ud83d\ude00\u2028"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := DecodeData(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidValue) {
				t.Fatalf("error not ErrInvalidValue: %v", err)
			}
			return
		}
		enc := EncodeData(d)
		var std map[string]string
		if err := json.Unmarshal(enc, &std); err != nil || len(std) != len(d) {
			t.Fatalf("canonical %q is not the same JSON: %v", enc, err)
		}
		for k, v := range d {
			if std[k] != v {
				t.Fatalf("key %q: %q after encoding, %q before", k, std[k], v)
			}
		}
		again, err := CanonicalValue(enc)
		if err != nil || !bytes.Equal(again, enc) {
			t.Fatalf("canonical form %q not a fixed point: %q, %v", enc, again, err)
		}
	})
}

// The receiver finds the check through kvfence.ValueChecker.
var _ kvfence.ValueChecker = (*Dispatcher)(nil)

// Ensure that the dispatcher's value check is CanonicalValue: a value in
// another order or spacing comes back canonical, and one a ConfigMap
// cannot hold (a number, a nested object) is refused.
func TestCheckValue(t *testing.T) {
	var d Dispatcher
	for _, tc := range []struct {
		in, want string
		err      bool
	}{
		{in: `{ "b": "2", "a": "1" }`, want: `{"a":"1","b":"2"}`},
		{in: `{"retention_days":45}`, err: true},
		{in: `{"a":{"b":"c"}}`, err: true},
	} {
		got, err := d.CheckValue([]byte(tc.in))
		if tc.err != (err != nil) || (!tc.err && string(got) != tc.want) || (tc.err && !errors.Is(err, ErrInvalidValue)) {
			t.Errorf("CheckValue(%s) = %s, %v; want %s (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// FuzzCanonicalValue checks that a value CanonicalValue accepts comes back
// in a form it maps to itself, holding the same data, and that a value
// holding U+FFFD after decoding had it in its bytes, not from an escape
// the decoder replaced.
func FuzzCanonicalValue(f *testing.F) {
	for _, s := range []string{`{"a":"1"}`, `{ "b":"2","a":"\u00e9"}`, `{"a":"\ud83d\ude00"}`, `{"a":"\ud800"}`,
		`{"a":"\\ud800"}`, `{"a":1}`, `[]`, `{"a":"x"} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := CanonicalValue(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidValue) {
				t.Fatalf("CanonicalValue(%q): %v, not ErrInvalidValue", in, err)
			}
			return
		}
		again, err := CanonicalValue(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("CanonicalValue(%q) = %q, which maps to %q, %v", in, out, again, err)
		}
		if bytes.Contains(out, []byte("\uFFFD")) && !bytes.Contains(in, []byte("\uFFFD")) && !bytes.Contains(bytes.ToLower(in), []byte(`\ufffd`)) {
			t.Fatalf("CanonicalValue(%q) = %q: a replacement character the input did not hold", in, out)
		}
	})
}
