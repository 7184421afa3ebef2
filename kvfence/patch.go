package kvfence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"
)

// The patch a request carries is RFC 6902 JSON Patch with RFC 6901 JSON
// Pointers, read strictly. An approver reviews the patch's bytes, so the
// receiver must not give them a meaning the approver could not read off
// them: every refusal below closes a way in which two readers of the same
// bytes could disagree about what they do.
//
//   - The patch is UTF-8 JSON (RFC 8259) with nothing after it: one array
//     of operation objects.
//   - No object anywhere in the patch, values included, has a member name
//     twice. RFC 8259 only says names SHOULD be unique and leaves the
//     meaning of duplicates to the reader; one reader takes the first, one
//     the last, so {"op":"test",...,"op":"replace"} is a test to one and a
//     replace to another. A duplicate inside a value would likewise be
//     inserted into the target, or compared by test, as something its
//     readers disagree on.
//   - No string has an unpaired UTF-16 surrogate escape (\ud800 alone),
//     which readers variously keep, replace with U+FFFD or refuse.
//   - Each operation has exactly the members RFC 6902 defines for its op:
//     "op" and "path" always, "value" for add, replace and test, "from"
//     for move and copy. RFC 6902 §4 says other members MUST be ignored;
//     they are refused here instead, since a member the receiver ignores
//     may be one the approver read as meaningful ("valeu" for "value").
//     A test without "value" is refused, not read as a test for null.
//   - "path" and "from" are JSON strings holding RFC 6901 pointers: "" or
//     "/"-separated reference tokens in which "~" appears only as "~0" or
//     "~1".
//
// Whether a pointer names something in the target (an array index has no
// leading zero and no sign, "-" only where add appends, and so on) depends
// on the target, so it is decided when the patch is applied (patchapply.go).

// patchOp is one operation of a validated patch.
type patchOp struct {
	op    string
	path  pointer
	from  pointer // move and copy only
	value *source // add, replace and test only
}

// pointer is an RFC 6901 JSON Pointer: its text as the patch wrote it
// (after JSON string decoding) and its reference tokens with "~1" and "~0"
// already replaced by "/" and "~".
type pointer struct {
	text   string
	tokens []string
}

// opMembers lists, for each op RFC 6902 defines, the members besides "op"
// and "path" it requires.
var opMembers = map[string][]string{
	"add":     {"value"},
	"remove":  nil,
	"replace": {"value"},
	"move":    {"from"},
	"copy":    {"from"},
	"test":    {"value"},
}

// ValidatePatch reports whether patch is a JSON Patch this package will
// carry in a request: a strictly well-formed RFC 6902 patch as described in
// the package documentation. The error wraps ErrMalformedPatch and names
// the first problem found. A valid patch may still fail to apply to a
// particular target; that is decided at Submit.
func ValidatePatch(patch []byte) error {
	_, err := parsePatch(patch)
	return err
}

// parsePatch validates b and returns its operations. Errors wrap
// ErrMalformedPatch.
func parsePatch(b []byte) ([]patchOp, error) {
	ops, err := parsePatchOps(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformedPatch, err)
	}
	return ops, nil
}

func parsePatchOps(b []byte) ([]patchOp, error) {
	if len(b) > math.MaxInt32 {
		return nil, errors.New("too large")
	}
	if !utf8.Valid(b) {
		return nil, errors.New("not valid UTF-8")
	}
	// The token walk checks the grammar, trailing data and duplicate names
	// before anything decodes into a map, where duplicates would vanish.
	if err := checkJSONText(b); err != nil {
		return nil, err
	}
	if err := checkSurrogates(b); err != nil {
		return nil, err
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); t[0] != '[' {
		return nil, errors.New("not a JSON array of operations")
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(b, &elems); err != nil {
		return nil, err
	}
	ops := make([]patchOp, 0, len(elems))
	for i, e := range elems {
		op, err := parseOp(e)
		if err != nil {
			return nil, fmt.Errorf("operation %d: %v", i, err)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// parseOp parses one operation object whose names are known to be unique.
func parseOp(raw json.RawMessage) (patchOp, error) {
	if raw[0] != '{' {
		return patchOp{}, errors.New("not a JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return patchOp{}, err
	}
	var op patchOp
	var err error
	if op.op, err = stringMember(m, "op"); err != nil {
		return patchOp{}, err
	}
	extra, ok := opMembers[op.op]
	if !ok {
		return patchOp{}, fmt.Errorf("op %q is not one of add, remove, replace, move, copy, test", op.op)
	}
	want := append([]string{"op", "path"}, extra...)
	for _, name := range want {
		if _, ok := m[name]; !ok {
			return patchOp{}, fmt.Errorf("%s operation has no %q member", op.op, name)
		}
	}
	if len(m) != len(want) {
		for name := range m {
			if !contains(want, name) {
				return patchOp{}, fmt.Errorf("%s operation has member %q, which RFC 6902 does not define for it", op.op, name)
			}
		}
	}
	if op.path, err = pointerMember(m, "path"); err != nil {
		return patchOp{}, err
	}
	if contains(want, "from") {
		if op.from, err = pointerMember(m, "from"); err != nil {
			return patchOp{}, err
		}
	}
	if v, ok := m["value"]; ok {
		op.value = newSource(v)
	}
	return op, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// stringMember returns member name of m, which must be a JSON string.
// (Unmarshal alone would turn null into "".)
func stringMember(m map[string]json.RawMessage, name string) (string, error) {
	raw, ok := m[name]
	if !ok {
		return "", fmt.Errorf("no %q member", name)
	}
	if raw[0] != '"' {
		return "", fmt.Errorf("member %q is not a string", name)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", err
	}
	return s, nil
}

func pointerMember(m map[string]json.RawMessage, name string) (pointer, error) {
	s, err := stringMember(m, name)
	if err != nil {
		return pointer{}, err
	}
	p, err := parsePointer(s)
	if err != nil {
		return pointer{}, fmt.Errorf("member %q: %v", name, err)
	}
	return p, nil
}

// parsePointer parses s as RFC 6901 §3 defines a JSON Pointer.
func parsePointer(s string) (pointer, error) {
	p := pointer{text: s}
	if s == "" {
		return p, nil
	}
	if s[0] != '/' {
		return pointer{}, fmt.Errorf("JSON Pointer %q is neither empty nor starts with /", s)
	}
	for _, tok := range strings.Split(s[1:], "/") {
		for i := 0; i < len(tok); i++ {
			if tok[i] == '~' && (i+1 == len(tok) || (tok[i+1] != '0' && tok[i+1] != '1')) {
				return pointer{}, fmt.Errorf("JSON Pointer %q has ~ not followed by 0 or 1", s)
			}
		}
		// ~1 first: "~01" is "~1", not "/" (RFC 6901 §4).
		p.tokens = append(p.tokens, strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~"))
	}
	return p, nil
}

// checkJSONText walks b token by token and requires one JSON value, nothing
// after it but white space, and no object with a member name twice. Names
// are compared after unescaping, so "a" and "\u0061" are the same name.
func checkJSONText(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // numbers out of float64's range are still JSON
	type frame struct {
		names   map[string]struct{} // nil for an array
		wantKey bool
	}
	var stack []frame
	done := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if !done {
				return errors.New("not a complete JSON text")
			}
			return nil
		}
		if err != nil {
			return err
		}
		if done {
			return errors.New("data after the JSON text")
		}
		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{', '[':
				if top != nil && top.names != nil {
					top.wantKey = true // after this value, the next member
				}
				f := frame{}
				if tok == '{' {
					f.names, f.wantKey = map[string]struct{}{}, true
				}
				stack = append(stack, f)
				continue
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			if top != nil && top.names != nil && top.wantKey {
				if _, dup := top.names[tok]; dup {
					return fmt.Errorf("an object has the member name %q twice", tok)
				}
				top.names[tok] = struct{}{}
				top.wantKey = false
				continue
			}
			if top != nil && top.names != nil {
				top.wantKey = true
			}
		default:
			if top != nil && top.names != nil {
				top.wantKey = true
			}
		}
		done = len(stack) == 0
	}
}

// checkSurrogates refuses a string with an unpaired surrogate escape
// anywhere in b, which must be valid JSON.
func checkSurrogates(b []byte) error {
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			continue
		}
		end := stringEnd(b, i)
		if _, lone := decodeString(b[i:end]); lone {
			// Quoted and cut: the string is the patch's own text, and
			// this message reaches terminals and denial details.
			return fmt.Errorf("the string %.48q has an unpaired UTF-16 surrogate escape", b[i:end])
		}
		i = end - 1
	}
	return nil
}

// stringEnd returns the index just after the JSON string that starts at
// b[i], which must be a well-formed string literal.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// decodeString decodes the JSON string literal s (quotes included, known
// to be well formed) to its code points. They are returned as UTF-8, except
// that an unpaired surrogate escape is kept as the three bytes WTF-8 gives
// it rather than replaced with U+FFFD: two strings then decode to the same
// bytes exactly when they have the same code points, which is how RFC 6902
// §4.6 and RFC 6901 §4 compare strings. lone reports such an escape.
func decodeString(s []byte) (out string, lone bool) {
	s = s[1 : len(s)-1]
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s), false
	}
	buf := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			buf = append(buf, c)
			continue
		}
		i++
		switch s[i] {
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r := hex4(s[i+1 : i+5])
			i += 4
			switch {
			case r >= 0xd800 && r < 0xdc00 && i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u':
				if lo := hex4(s[i+3 : i+7]); lo >= 0xdc00 && lo < 0xe000 {
					buf = utf8.AppendRune(buf, 0x10000+(r-0xd800)<<10+(lo-0xdc00))
					i += 6
					continue
				}
				fallthrough
			case r >= 0xd800 && r < 0xe000:
				lone = true
				buf = append(buf, 0xe0|byte(r>>12), 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
			default:
				buf = utf8.AppendRune(buf, r)
			}
		default: // '"', '\\', '/'
			buf = append(buf, s[i])
		}
	}
	return string(buf), lone
}

func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}
