package api

import (
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends the response's JSON encoding, byte for byte what
// encoding/json's Encoder with SetEscapeHTML(false) writes for s, trailing
// newline included. The submit answer is written once per fenced write, on
// the served receiver's hot path, where the reflective encoder's buffers
// and allocations cost more than the rest of the handler together.
func (s *Submit) AppendJSON(b []byte) []byte {
	b = append(b, `{"outcome":`...)
	b = appendJSONString(b, s.Outcome)
	b = append(b, `,"reason":`...)
	b = appendJSONString(b, s.Reason)
	b = append(b, `,"detail":`...)
	b = appendJSONString(b, s.Detail)
	b = append(b, `,"scope":`...)
	b = appendJSONString(b, s.Scope)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendUint(b, s.Epoch, 10)
	b = append(b, `,"grant":`...)
	b = appendJSONString(b, s.Grant)
	b = append(b, `,"action":`...)
	b = appendJSONString(b, s.Action)
	b = append(b, `,"target":`...)
	b = appendJSONString(b, s.Target)
	b = append(b, `,"revision":`...)
	b = strconv.AppendUint(b, s.Revision, 10)
	b = append(b, `,"audit_seq":`...)
	b = strconv.AppendUint(b, s.AuditSeq, 10)
	if s.ReceiptSeq != 0 {
		b = append(b, `,"receipt_seq":`...)
		b = strconv.AppendUint(b, s.ReceiptSeq, 10)
	}
	for _, f := range [...]struct{ key, v string }{{`,"dispatch":`, s.Dispatch}, {`,"dispatch_id":`, s.DispatchID}, {`,"version":`, s.Version}} {
		if f.v != "" {
			b = appendJSONString(append(b, f.key...), f.v)
		}
	}
	return append(b, "}\n"...)
}

// appendJSONString appends s as a JSON string the way encoding/json does
// without HTML escaping: quote, backslash and control characters escaped
// (\b \f \n \r \t by name, the rest as \u00XX), invalid UTF-8 replaced by
// U+FFFD, and U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
