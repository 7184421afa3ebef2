package kubetarget

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxValueBytes bounds a value that Apply accepts and a data field that
// Read decodes: the API server refuses a ConfigMap whose data is over
// 1 MiB, and the JSON text of such data may be somewhat larger.
const MaxValueBytes = 2 << 20

// maxKeyLen is the longest ConfigMap key the API server accepts.
const maxKeyLen = 253

// ErrInvalidValue means a value is not a JSON object of strings whose keys
// are valid ConfigMap keys, each once.
var ErrInvalidValue = errors.New("kubetarget: the value is not a ConfigMap's data")

// CanonicalValue decodes a value (a JSON object of strings) and returns it
// in canonical form (RFC 8785), or an error wrapping ErrInvalidValue.
func CanonicalValue(value []byte) ([]byte, error) {
	data, err := DecodeData(value)
	if err != nil {
		return nil, err
	}
	return EncodeData(data), nil
}

// DecodeData decodes a value into a ConfigMap's data. It refuses, with an
// error wrapping ErrInvalidValue, anything but one JSON object whose
// members are strings: invalid UTF-8 (which a JSON decoder would replace
// silently), a key that appears twice (which a decoder would resolve
// silently by the last one), a \u escape of a lone UTF-16 surrogate
// (which it would replace silently with U+FFFD), a key that is not a
// valid ConfigMap key, and trailing data.
func DecodeData(value []byte) (map[string]string, error) {
	if len(value) > MaxValueBytes {
		return nil, fmt.Errorf("%w: %d bytes, over the %d-byte limit", ErrInvalidValue, len(value), MaxValueBytes)
	}
	if !utf8.Valid(value) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrInvalidValue)
	}
	if err := checkSurrogates(value); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidValue, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%w: not a JSON object", ErrInvalidValue)
	}
	data := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidValue, err)
		}
		key := tok.(string) // inside an object the decoder yields only string keys
		if err := checkKey(key); err != nil {
			return nil, err
		}
		if _, dup := data[key]; dup {
			return nil, fmt.Errorf("%w: key %q appears more than once", ErrInvalidValue, key)
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidValue, err)
		}
		s, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("%w: key %q holds %s, not a string", ErrInvalidValue, key, describe(tok))
		}
		data[key] = s
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("%w: %v", ErrInvalidValue, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the object", ErrInvalidValue)
	}
	return data, nil
}

// checkSurrogates refuses a \u escape of a UTF-16 surrogate that is not
// the high half of a pair followed at once by the escape of its low half:
// two values that differ only in such an escape would decode to one
// string. A backslash occurs in valid JSON only inside a string, so the
// bytes are scanned without tracking strings; anything malformed is left
// to the decoder.
func checkSurrogates(value []byte) error {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(value) || value[i] != '\\' || value[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(value[i+2:i+6]), 16, 16)
		return rune(n), err == nil
	}
	for i := 0; i < len(value); i++ {
		if value[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // a two-byte escape, or one the decoder refuses
			continue
		}
		switch {
		case r >= 0xd800 && r < 0xdc00:
			low, ok := hex4(i + 6)
			if !ok || low < 0xdc00 || low > 0xdfff {
				return fmt.Errorf("%w: \\u%04x is half of a UTF-16 surrogate pair without its other half", ErrInvalidValue, r)
			}
			i += 11
		case r >= 0xdc00 && r <= 0xdfff:
			return fmt.Errorf("%w: \\u%04x is half of a UTF-16 surrogate pair without its other half", ErrInvalidValue, r)
		default:
			i += 5
		}
	}
	return nil
}

// describe names a JSON token's kind for an error message.
func describe(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		return "an object or array"
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	default:
		return fmt.Sprintf("%T", tok)
	}
}

// checkKey refuses a key the API server would refuse in a ConfigMap's
// data: empty, over 253 bytes, "." or "..", or with a byte outside
// [-._a-zA-Z0-9].
func checkKey(key string) error {
	if key == "" || len(key) > maxKeyLen || key == "." || key == ".." {
		return fmt.Errorf("%w: %q is not a valid ConfigMap key", ErrInvalidValue, key)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c == '-' || c == '.' || c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return fmt.Errorf("%w: %q is not a valid ConfigMap key", ErrInvalidValue, key)
		}
	}
	return nil
}

// EncodeData returns data as canonical JSON (RFC 8785): members sorted by
// their keys' UTF-16 code units, no whitespace, strings with only the
// escapes JSON requires (quote, backslash and control characters, with
// the short forms \b \t \n \f \r and lower-case \u00xx otherwise). Valid
// ConfigMap keys are ASCII, so their order is also byte order.
func EncodeData(data map[string]string) []byte {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return lessUTF16(keys[i], keys[j]) })
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(&b, k)
		b.WriteByte(':')
		writeString(&b, data[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// lessUTF16 orders strings by their UTF-16 code units, as RFC 8785 sorts
// keys.
func lessUTF16(a, b string) bool {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return ua[i] < ub[i]
		}
	}
	return len(ua) < len(ub)
}

// writeString writes s as an RFC 8785 JSON string. s is valid UTF-8: it
// comes from DecodeData or from the API server's JSON.
func writeString(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\f':
			b.WriteString(`\f`)
		case c == '\r':
			b.WriteString(`\r`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}
