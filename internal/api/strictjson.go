package api

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// MaxJSONDepth bounds how deeply the objects and arrays of a body nest;
// the API's deepest shape nests four levels.
const MaxJSONDepth = 32

// DecodeStrict decodes b, one JSON value with nothing after it but white
// space, into v, a pointer. It refuses what encoding/json would accept and
// read differently from another reader, or silently: a member name that is
// not exactly one of the type's (encoding/json matches names without
// regard to case, with Unicode folding, so that "Scopes", "SCOPES" and
// "ſcopes" all fill Scopes), a member given twice at any level
// (encoding/json keeps the last), a member the type does not have, a null
// where the type has no null, bytes that are not UTF-8, an unpaired
// UTF-16 surrogate escape (encoding/json reads U+FFFD), objects and arrays
// nested over MaxJSONDepth, and data after the value. Member names are compared after their escapes are decoded:
// "\u0073copes" is "scopes", and counts as a duplicate of it. Every error
// wraps ErrJSON and names the member.
func DecodeStrict(b []byte, v any) error { return decodeChecked(b, v, false) }

// DecodeAnswer is DecodeStrict for a receiver's answer: a member the type
// does not have is let through, so that a receiver may add members
// without breaking older clients, but a member in another case than one
// it has, a duplicate, and everything else DecodeStrict refuses, are still
// refused.
func DecodeAnswer(b []byte, v any) error { return decodeChecked(b, v, true) }

func decodeChecked(b []byte, v any, allowUnknown bool) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("%w: decoding into %T, not a pointer", ErrJSON, v)
	}
	if !utf8.Valid(b) {
		return fmt.Errorf("%w: the body is not UTF-8 (at byte %d)", ErrJSON, invalidUTF8At(b))
	}
	w := walker{dec: json.NewDecoder(bytes.NewReader(b)), allowUnknown: allowUnknown}
	w.dec.UseNumber()
	if err := w.value(schemaOf(rv.Type().Elem()), "the body", 0); err != nil {
		return err
	}
	if _, err := w.dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: the body has data after its JSON value", ErrJSON)
	}
	if off := loneSurrogate(b); off >= 0 {
		return fmt.Errorf("%w: the string at byte %d has an unpaired UTF-16 surrogate escape", ErrJSON, off)
	}
	// The names are exact, known and unique, so encoding/json's matching
	// (exact first) fills exactly the fields they name; it still checks
	// each value's type and range (a number over a uint64 is refused).
	dec := json.NewDecoder(bytes.NewReader(b))
	if !allowUnknown {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrJSON, err)
	}
	return nil
}

// loneSurrogate returns the offset of the first string of b, a JSON text
// known to be well formed, with a \uD800-\uDFFF escape that is not half
// of a pair, or -1. encoding/json turns one into U+FFFD, another reader
// into something else, so that a name would not be the same name to both.
func loneSurrogate(b []byte) int {
	start := -1
	for i := 0; i < len(b); i++ {
		switch {
		case start < 0:
			if b[i] == '"' {
				start = i
			}
		case b[i] == '"':
			start = -1
		case b[i] == '\\' && b[i+1] != 'u':
			i++
		case b[i] == '\\':
			r := hex4(b[i+2 : i+6])
			switch {
			case r >= 0xdc00 && r <= 0xdfff:
				return start
			case r >= 0xd800 && r <= 0xdbff:
				if i+12 > len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
					return start
				}
				if lo := hex4(b[i+8 : i+12]); lo < 0xdc00 || lo > 0xdfff {
					return start
				}
				i += 6
			}
			i += 5
		}
	}
	return -1
}

// hex4 decodes four hex digits, known to be hex digits.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		default:
			r |= rune(c-'A') + 10
		}
	}
	return r
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// walker reads a body's tokens against the schema of the type it will
// be decoded into.
type walker struct {
	dec          *json.Decoder
	allowUnknown bool
}

func (w *walker) value(s *schema, at string, depth int) error {
	tok, err := w.dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrJSON, at, err)
	}
	switch tok := tok.(type) {
	case json.Delim:
		for s != nil && s.kind == kindPointer {
			s = s.elem
		}
		if depth >= MaxJSONDepth {
			return fmt.Errorf("%w: %s nests over %d levels", ErrJSON, at, MaxJSONDepth)
		}
		if tok == '{' {
			return w.object(s, at, depth+1)
		}
		return w.array(s, at, depth+1)
	case nil:
		if s != nil && !s.nullable {
			return fmt.Errorf("%w: %s is null, which it cannot be", ErrJSON, at)
		}
	}
	return nil
}

func (w *walker) object(s *schema, at string, depth int) error {
	seen := map[string]bool{}
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrJSON, at, err)
		}
		name, _ := tok.(string)
		if seen[name] {
			return fmt.Errorf("%w: member %s of %s is given twice", ErrJSON, quoteName(name), at)
		}
		seen[name] = true
		var child *schema
		switch {
		case s == nil || s.kind == kindAny:
		case s.kind == kindMap:
			child = s.elem
		case s.kind == kindStruct:
			f, ok := s.fields[name]
			if ok {
				child = f
				break
			}
			if exact, ok := s.folded[foldName(name)]; ok {
				return fmt.Errorf("%w: member %s of %s: member names are case-sensitive, and this one is %q", ErrJSON, quoteName(name), at,
					exact)
			}
			if !w.allowUnknown {
				return fmt.Errorf("%w: %s has no member %s (it has %s)", ErrJSON, at, quoteName(name), s.names)
			}
		}
		// A value of the wrong kind is walked as anything, and refused
		// by the decoding that follows.
		if err := w.value(child, memberPath(at, name), depth); err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // '}'
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrJSON, at, err)
	}
	return nil
}

func (w *walker) array(s *schema, at string, depth int) error {
	var elem *schema
	if s != nil && s.kind == kindArray {
		elem = s.elem
	}
	for i := 0; w.dec.More(); i++ {
		if err := w.value(elem, fmt.Sprintf("%s[%d]", at, i), depth); err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // ']'
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrJSON, at, err)
	}
	return nil
}

func memberPath(at, name string) string {
	if at == "the body" {
		return quoteName(name)
	}
	return at + "." + quoteName(name)
}

// maxQuotedName bounds a member name quoted in an error, which goes back
// to the caller: a megabyte-long name is not echoed whole.
const maxQuotedName = 64

// quoteName quotes a member name for an error, cut to maxQuotedName bytes
// on a rune boundary.
func quoteName(name string) string {
	if len(name) <= maxQuotedName {
		return fmt.Sprintf("%q", name)
	}
	cut := maxQuotedName
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", name[:cut], len(name))
}

// foldName is the key under which encoding/json would match name: its
// simple case folding, so that the Kelvin sign and the long s fold as
// encoding/json folds them.
func foldName(name string) string {
	var b strings.Builder
	for _, r := range name {
		b.WriteRune(foldRune(r))
	}
	return b.String()
}

// foldRune maps r to the smallest rune of its case-folding orbit, which
// is the same for every rune that folds to the same letter.
func foldRune(r rune) rune {
	min := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < min {
			min = f
		}
	}
	return min
}

// Kinds of schema: what a JSON value decodes into.
const (
	kindAny     = iota // an interface, a custom decoder, or a scalar
	kindStruct         // an object with known members
	kindMap            // an object with any members
	kindArray          // an array
	kindPointer        // a pointer: null, or what elem reads
)

// schema is what the walk needs to know of a Go type: its kind, whether a
// null is a value of it, and a struct's member names, exact and folded.
type schema struct {
	kind     int
	nullable bool
	fields   map[string]*schema
	folded   map[string]string
	names    string
	elem     *schema
}

var schemas sync.Map // reflect.Type → *schema

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func schemaOf(t reflect.Type) *schema {
	if s, ok := schemas.Load(t); ok {
		return s.(*schema)
	}
	s := buildSchema(t, map[reflect.Type]*schema{})
	schemas.Store(t, s)
	return s
}

func buildSchema(t reflect.Type, building map[reflect.Type]*schema) *schema {
	if s, ok := building[t]; ok {
		return s
	}
	s := &schema{}
	building[t] = s
	pt := reflect.PointerTo(t)
	switch {
	case t.Implements(jsonUnmarshaler) || pt.Implements(jsonUnmarshaler) || t.Implements(textUnmarshaler) ||
		pt.Implements(textUnmarshaler):
		// Its own decoder reads it: only uniqueness is checked.
		s.kind, s.nullable = kindAny, true
	case t.Kind() == reflect.Pointer:
		// A reference, not a copy: the element may still be being built
		// (a type that contains a pointer to itself).
		s.kind, s.nullable, s.elem = kindPointer, true, buildSchema(t.Elem(), building)
	case t.Kind() == reflect.Interface:
		s.kind, s.nullable = kindAny, true
	case t.Kind() == reflect.Struct:
		s.kind = kindStruct
		s.fields, s.folded = map[string]*schema{}, map[string]string{}
		var names []string
		for _, f := range structFields(t) {
			s.fields[f.name] = buildSchema(f.typ, building)
			s.folded[foldName(f.name)] = f.name
			names = append(names, fmt.Sprintf("%q", f.name))
		}
		s.names = strings.Join(names, ", ")
	case t.Kind() == reflect.Map:
		s.kind, s.nullable, s.elem = kindMap, true, buildSchema(t.Elem(), building)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		// Bytes are a base64 string.
		s.kind, s.nullable = kindAny, true
	case t.Kind() == reflect.Slice:
		s.kind, s.nullable, s.elem = kindArray, true, buildSchema(t.Elem(), building)
	case t.Kind() == reflect.Array:
		s.kind, s.elem = kindArray, buildSchema(t.Elem(), building)
	default:
		s.kind = kindAny
	}
	return s
}

// field is one JSON member of a struct.
type field struct {
	name  string
	typ   reflect.Type
	depth int
}

// structFields returns t's JSON members as encoding/json names them: by
// tag or field name, exported fields only, "-" left out, an untagged
// embedded struct's members promoted, and of the same name at the same
// depth neither (encoding/json drops both; the type's tags here never
// collide).
func structFields(t reflect.Type) []field {
	var out []field
	byName := map[string]int{}
	var walk func(t reflect.Type, depth int, visited map[reflect.Type]bool)
	walk = func(t reflect.Type, depth int, visited map[reflect.Type]bool) {
		if visited[t] {
			return
		}
		visited[t] = true
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			ft := sf.Type
			if sf.Anonymous && name == "" {
				et := ft
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct {
					walk(et, depth+1, visited)
					continue
				}
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if j, ok := byName[name]; ok {
				switch {
				case out[j].depth < depth:
					continue
				case out[j].depth == depth:
					out[j].name = "" // ambiguous: neither
					continue
				}
				out[j] = field{name: name, typ: ft, depth: depth}
				continue
			}
			byName[name] = len(out)
			out = append(out, field{name: name, typ: ft, depth: depth})
		}
	}
	walk(t, 0, map[reflect.Type]bool{})
	kept := out[:0]
	for _, f := range out {
		if f.name != "" {
			kept = append(kept, f)
		}
	}
	return kept
}
