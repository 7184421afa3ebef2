package api

import (
	"bytes"
	"unicode/utf8"
)

// ParseSubmitJSON decodes b when it is exactly what AppendJSON writes for
// strings that need no escaping: the keys in order, no white space but the
// final newline, strings of valid UTF-8 without a quote, a backslash or a
// control character, and numbers in canonical decimal. It reports false
// for anything else, which the caller then decodes with encoding/json; it
// never accepts what encoding/json would decode differently. The client
// reads one submit answer per fenced write, and this is the form every
// ordinary answer has.
func ParseSubmitJSON(b []byte) (Submit, bool) {
	var s Submit
	p := submitParser{b: b}
	if !p.submit(&s) || !p.lit("\n") || len(p.b) != 0 {
		return Submit{}, false
	}
	return s, true
}

// ParseBatchJSON decodes b when it is exactly what the AppendBatch
// functions write for decisions alone (statuses 200 and 403), each as
// ParseSubmitJSON reads it; it reports false for anything else, which the
// caller then decodes with encoding/json.
func ParseBatchJSON(b []byte) (Batch, bool) {
	p := submitParser{b: b}
	if !p.lit(`{"results":[`) {
		return Batch{}, false
	}
	// Each element is at least 200 bytes; the estimate only sizes the
	// slice.
	out := Batch{Results: make([]BatchResult, 0, len(b)/200+1)}
	subs := make([]Submit, 0, cap(out.Results))
	for i := 0; !p.lit("]}\n"); i++ {
		var status uint64
		if i > 0 && !p.lit(",") {
			return Batch{}, false
		}
		subs = append(subs, Submit{})
		if !p.lit(`{"status":`) || !p.num(&status) || (status != 200 && status != 403) ||
			!p.lit(`,"result":`) || !p.submit(&subs[i]) || !p.lit("}") {
			return Batch{}, false
		}
		out.Results = append(out.Results, BatchResult{Status: int(status)})
	}
	if len(p.b) != 0 {
		return Batch{}, false
	}
	for i := range out.Results {
		out.Results[i].Result = &subs[i]
	}
	return out, true
}

// submit consumes a submit answer's object, as AppendJSON writes it
// without its newline.
func (p *submitParser) submit(s *Submit) bool {
	return p.lit(`{"outcome":`) && p.str(&s.Outcome) &&
		p.lit(`,"reason":`) && p.str(&s.Reason) &&
		p.lit(`,"detail":`) && p.str(&s.Detail) &&
		p.lit(`,"scope":`) && p.str(&s.Scope) &&
		p.lit(`,"epoch":`) && p.num(&s.Epoch) &&
		p.lit(`,"grant":`) && p.str(&s.Grant) &&
		p.lit(`,"action":`) && p.str(&s.Action) &&
		p.lit(`,"target":`) && p.str(&s.Target) &&
		p.lit(`,"revision":`) && p.num(&s.Revision) &&
		p.lit(`,"audit_seq":`) && p.num(&s.AuditSeq) &&
		// receipt_seq is omitted when 0, so a 0 is not AppendJSON's.
		(!p.lit(`,"receipt_seq":`) || p.num(&s.ReceiptSeq) && s.ReceiptSeq != 0) &&
		p.lit("}")
}

// submitParser consumes the canonical submit answer from the front of b.
type submitParser struct{ b []byte }

func (p *submitParser) lit(s string) bool {
	if len(p.b) < len(s) || string(p.b[:len(s)]) != s {
		return false
	}
	p.b = p.b[len(s):]
	return true
}

func (p *submitParser) str(out *string) bool {
	if len(p.b) == 0 || p.b[0] != '"' {
		return false
	}
	end := bytes.IndexByte(p.b[1:], '"')
	if end < 0 {
		return false
	}
	v := p.b[1 : 1+end]
	for _, c := range v {
		if c < 0x20 || c == '\\' {
			return false
		}
	}
	if !utf8.Valid(v) {
		return false
	}
	*out = string(v)
	p.b = p.b[end+2:]
	return true
}

func (p *submitParser) num(out *uint64) bool {
	n := 0
	for n < len(p.b) && p.b[n] >= '0' && p.b[n] <= '9' {
		n++
	}
	// No digits, a leading zero, or more digits than any uint64 has.
	if n == 0 || n > 20 || (n > 1 && p.b[0] == '0') {
		return false
	}
	var v uint64
	for _, c := range p.b[:n] {
		d := uint64(c - '0')
		if v > (^uint64(0)-d)/10 {
			return false
		}
		v = v*10 + d
	}
	*out = v
	p.b = p.b[n:]
	return true
}
