package kvfence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// The applier is this package's own rather than a configured general
// library because the semantics are the security boundary and must be
// exactly RFC 6902 and RFC 6901: general JSON Patch libraries accept
// negative and signed array indices, read a missing "value" as null, treat
// the pointer "/" as the whole document, and decode operations into maps in
// which a duplicate member silently wins. Options switch some of that off,
// not all of it, and the rest would have to be checked again outside the
// library with a second pointer evaluator. A small applier that does only
// what the RFCs say is easier to make, and to show, exactly right.
//
// The target is kept as its original bytes and parsed lazily: a container
// is split into its members or elements only when a pointer or a test goes
// into it, and everything else is written back as it was, compacted but
// never re-escaped. Each JSON text has a table of where each of its
// containers ends, built in one pass, so that skipping a nested value costs
// a lookup; the work of a patch is then linear in the size of the target
// plus the size of the patch, plus the copies, which are bounded.

// errPatchTest means a test operation did not hold.
var errPatchTest = errors.New("patch test operation failed")

// applyPatch applies ops to the JSON text value and returns the result,
// compacted. A failed test wraps errPatchTest; any other error means the
// patch does not apply to this value. Both leave value unchanged.
func applyPatch(ops []patchOp, value []byte) ([]byte, error) {
	// RFC 8259 §8.1: a JSON text is UTF-8. Strings compare by code point,
	// which other encodings would leave undefined. json.Valid also limits
	// nesting to 10000 levels (RFC 8259 §9 lets a parser limit depth).
	if len(value) > math.MaxInt32 || !utf8.Valid(value) || !json.Valid(value) {
		return nil, errors.New("the target's value is not a UTF-8 JSON text nested at most 10000 deep")
	}
	d := &document{root: newNode(newSource(value))}
	for i, op := range ops {
		if err := d.apply(op); err != nil {
			if errors.Is(err, errPatchTest) {
				return nil, fmt.Errorf("operation %d: %w", i, err)
			}
			return nil, fmt.Errorf("patch operation %d (%s %q) does not apply to the target's value: %w", i, op.op, op.path.text, err)
		}
	}
	var out bytes.Buffer
	if err := d.root.write(&out); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// document is a target's value while a patch is applied to it.
type document struct {
	root *node
	// copied is the size of every value copied so far. Copies are the one
	// way a patch can make a value grow faster than the patch itself (copy
	// "" into "/a", again and again); the bound keeps that from doing
	// unbounded work under the write lock.
	copied int
}

func (d *document) apply(op patchOp) error {
	switch op.op {
	case "add":
		return d.add(op.path, newNode(op.value))
	case "remove":
		_, err := d.remove(op.path)
		return err
	case "replace":
		return d.replace(op.path, newNode(op.value))
	case "move":
		// RFC 6902 §4.4: "from" MUST NOT be a proper prefix of "path".
		if isProperPrefix(op.from.tokens, op.path.tokens) {
			return fmt.Errorf("cannot move %q into its own child %q", op.from.text, op.path.text)
		}
		if equalTokens(op.from.tokens, op.path.tokens) {
			// A remove and an add at one location leave it as it was,
			// provided it exists.
			_, err := d.find(op.from)
			return err
		}
		v, err := d.remove(op.from)
		if err != nil {
			return err
		}
		return d.add(op.path, v)
	case "copy":
		v, err := d.find(op.from)
		if err != nil {
			return err
		}
		if d.copied += v.size(); d.copied > MaxTargetValueSize {
			return fmt.Errorf("copies add up to more than %d bytes", MaxTargetValueSize)
		}
		return d.add(op.path, v.clone())
	case "test":
		v, err := d.find(op.path)
		if err != nil {
			return fmt.Errorf("%w: %v", errPatchTest, err)
		}
		eq, err := equal(v, newNode(op.value))
		if err != nil {
			return err
		}
		if !eq {
			return fmt.Errorf("%w: the value at %q differs", errPatchTest, op.path.text)
		}
		return nil
	}
	return fmt.Errorf("unknown op %q", op.op)
}

func isProperPrefix(a, b []string) bool {
	return len(a) < len(b) && equalTokens(a, b[:len(a)])
}

func equalTokens(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// find evaluates p (RFC 6901 §4) and returns the value it references.
func (d *document) find(p pointer) (*node, error) {
	n := d.root
	for k, tok := range p.tokens {
		if err := n.open(); err != nil {
			return nil, err
		}
		switch n.kind {
		case '{':
			i, ok := n.x.index[tok]
			if !ok {
				return nil, fmt.Errorf("%q does not exist: no member %q", p.text, tok)
			}
			n = n.x.members[i].val
		case '[':
			i, err := arrayIndex(tok, len(n.x.elems), false)
			if err != nil {
				return nil, fmt.Errorf("%q does not exist: %v", p.text, err)
			}
			n = n.x.elems[i]
		default:
			return nil, fmt.Errorf("%q does not exist: %q is not an object or array", p.text, pointerPrefix(p, k))
		}
	}
	return n, nil
}

// pointerPrefix is the text of p's first k tokens, for messages.
func pointerPrefix(p pointer, k int) string {
	var b bytes.Buffer
	for _, tok := range p.tokens[:k] {
		b.WriteByte('/')
		b.WriteString(tok)
	}
	return b.String()
}

// parent evaluates all of p but its last token, which must name a member or
// element of an object or array. p must not be the root.
func (d *document) parent(p pointer) (*node, string, error) {
	last := len(p.tokens) - 1
	n, err := d.find(pointer{text: p.text, tokens: p.tokens[:last]})
	if err != nil {
		return nil, "", err
	}
	if err := n.open(); err != nil {
		return nil, "", err
	}
	if n.kind != '{' && n.kind != '[' {
		return nil, "", fmt.Errorf("the parent of %q is not an object or array", p.text)
	}
	return n, p.tokens[last], nil
}

// arrayIndex parses tok as RFC 6901 §4 defines an array index: "0" or
// digits without a leading zero, with no sign. "-" names the element after
// the last, which only add may use (RFC 6902 §4.1). The index must be below
// n, or at most n if end is set (add's insertion points).
func arrayIndex(tok string, n int, end bool) (int, error) {
	if tok == "-" {
		if end {
			return n, nil
		}
		return 0, errors.New(`"-" names the element after the last, which does not exist`)
	}
	if tok == "" || (tok[0] == '0' && len(tok) > 1) {
		return 0, fmt.Errorf("%q is not an array index", tok)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return 0, fmt.Errorf("%q is not an array index", tok)
		}
	}
	i, err := strconv.Atoi(tok)
	if err != nil || i > n || (i == n && !end) {
		return 0, fmt.Errorf("index %s is out of range for an array of %d elements", tok, n)
	}
	return i, nil
}

// add is RFC 6902 §4.1.
func (d *document) add(p pointer, v *node) error {
	if len(p.tokens) == 0 {
		d.root = v
		return nil
	}
	n, tok, err := d.parent(p)
	if err != nil {
		return err
	}
	if n.kind == '{' {
		if i, ok := n.x.index[tok]; ok {
			n.x.members[i].val = v
			return nil
		}
		n.x.index[tok] = len(n.x.members)
		n.x.members = append(n.x.members, member{name: tok, val: v})
		return nil
	}
	i, err := arrayIndex(tok, len(n.x.elems), true)
	if err != nil {
		return err
	}
	n.x.elems = append(n.x.elems, nil)
	copy(n.x.elems[i+1:], n.x.elems[i:])
	n.x.elems[i] = v
	return nil
}

// remove is RFC 6902 §4.2; it returns the value removed.
func (d *document) remove(p pointer) (*node, error) {
	if len(p.tokens) == 0 {
		return nil, errors.New("cannot remove the whole document")
	}
	n, tok, err := d.parent(p)
	if err != nil {
		return nil, err
	}
	if n.kind == '{' {
		i, ok := n.x.index[tok]
		if !ok {
			return nil, fmt.Errorf("%q does not exist: no member %q", p.text, tok)
		}
		v := n.x.members[i].val
		n.x.members = append(n.x.members[:i], n.x.members[i+1:]...)
		delete(n.x.index, tok)
		for j := i; j < len(n.x.members); j++ {
			n.x.index[n.x.members[j].name] = j
		}
		return v, nil
	}
	i, err := arrayIndex(tok, len(n.x.elems), false)
	if err != nil {
		return nil, fmt.Errorf("%q does not exist: %v", p.text, err)
	}
	v := n.x.elems[i]
	n.x.elems = append(n.x.elems[:i], n.x.elems[i+1:]...)
	return v, nil
}

// replace is RFC 6902 §4.3: the location must exist. Replacing in place is
// the remove and add the RFC describes, without moving the member.
func (d *document) replace(p pointer, v *node) error {
	if len(p.tokens) == 0 {
		d.root = v
		return nil
	}
	n, tok, err := d.parent(p)
	if err != nil {
		return err
	}
	if n.kind == '{' {
		i, ok := n.x.index[tok]
		if !ok {
			return fmt.Errorf("%q does not exist: no member %q", p.text, tok)
		}
		n.x.members[i].val = v
		return nil
	}
	i, err := arrayIndex(tok, len(n.x.elems), false)
	if err != nil {
		return fmt.Errorf("%q does not exist: %v", p.text, err)
	}
	n.x.elems[i] = v
	return nil
}

// source is a JSON text and, for each '{' and '[' in it, where it ends.
type source struct {
	b      []byte
	opens  []int // positions of '{' and '[' outside strings, ascending
	closes []int // closes[k] is the position of the bracket closing opens[k]
}

// newSource indexes b, which must be valid JSON.
func newSource(b []byte) *source {
	s := &source{b: b}
	var stack []int
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEnd(b, i) - 1
		case '{', '[':
			stack = append(stack, len(s.opens))
			s.opens = append(s.opens, i)
			s.closes = append(s.closes, 0)
		case '}', ']':
			s.closes[stack[len(stack)-1]] = i
			stack = stack[:len(stack)-1]
		}
	}
	return s
}

// end returns the index just after the value that starts at b[i].
func (s *source) end(i int) int {
	switch s.b[i] {
	case '{', '[':
		k := sort.SearchInts(s.opens, i)
		return s.closes[k] + 1
	case '"':
		return stringEnd(s.b, i)
	}
	j := i
	for j < len(s.b) && !isDelimiter(s.b[j]) {
		j++
	}
	return j
}

func isDelimiter(c byte) bool {
	switch c {
	case ',', ']', '}', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// node is one JSON value. Until it is opened it is just its bytes in src;
// an object or array is opened into members or elements when a pointer or
// a comparison goes into it, and from then on those are the value. A node
// is kept to 32 bytes, since a target of small values has many of them.
type node struct {
	src        *source
	start, end int32
	// kind is '{', '[', '"', 't', 'f', 'n' (null) or '0' (a number).
	kind byte
	x    *nodeState // set once the node is opened or compared
}

// nodeState is what a node has once it is opened or compared.
type nodeState struct {
	opened  bool
	members []member       // an opened object
	index   map[string]int // an opened object's member positions by name
	elems   []*node        // an opened array
	str     *string        // a string's code points, once decoded
	num     *decimal       // a number's value, once parsed
}

// member is an object member. raw is its name as the target wrote it,
// written back unchanged; a member a patch added has none.
type member struct {
	name string
	raw  []byte
	val  *node
}

// newNode is the whole of src as a value.
func newNode(src *source) *node {
	n := &node{}
	start := skipSpace(src.b, 0)
	n.set(src, start, src.end(start))
	return n
}

func (n *node) set(src *source, start, end int) {
	n.src, n.start, n.end, n.kind = src, int32(start), int32(end), src.b[start]
	if n.kind == '-' || (n.kind >= '0' && n.kind <= '9') {
		n.kind = '0'
	}
}

func (n *node) bytes() []byte { return n.src.b[n.start:n.end] }

func (n *node) opened() bool { return n.x != nil && n.x.opened }

func (n *node) state() *nodeState {
	if n.x == nil {
		n.x = &nodeState{}
	}
	return n.x
}

// open splits an object or array into its members or elements. An object
// with a member name twice is refused: RFC 8259 leaves its meaning to the
// reader, so no pointer into it and no comparison with it is well defined.
func (n *node) open() error {
	if n.opened() || (n.kind != '{' && n.kind != '[') {
		return nil
	}
	// Counted first, so that the children are allocated at once.
	count := 0
	n.each(func(_, _, _, _ int) { count++ })
	nodes := make([]node, count)
	k := 0
	if n.kind == '[' {
		elems := make([]*node, count)
		n.each(func(_, _, vs, ve int) {
			nodes[k].set(n.src, vs, ve)
			elems[k] = &nodes[k]
			k++
		})
		n.state().elems, n.x.opened = elems, true
		return nil
	}
	members := make([]member, count)
	index := make(map[string]int, count)
	var dup error
	n.each(func(ks, ke, vs, ve int) {
		name, _ := decodeString(n.src.b[ks:ke])
		if _, ok := index[name]; ok && dup == nil {
			dup = fmt.Errorf("the target's value has an object with the member name %q twice", name)
		}
		index[name] = k
		nodes[k].set(n.src, vs, ve)
		members[k] = member{name: name, raw: n.src.b[ks:ke], val: &nodes[k]}
		k++
	})
	if dup != nil {
		return dup
	}
	st := n.state()
	st.members, st.index, st.opened = members, index, true
	return nil
}

// each calls fn with the bounds of each member name (objects only) and
// value of the container n, in order.
func (n *node) each(fn func(ks, ke, vs, ve int)) {
	b := n.src.b
	i := skipSpace(b, int(n.start)+1)
	for b[i] != '}' && b[i] != ']' {
		ks, ke := 0, 0
		if n.kind == '{' {
			ks, ke = i, stringEnd(b, i)
			i = skipSpace(b, skipSpace(b, ke)+1) // past the ':'
		}
		ve := n.src.end(i)
		fn(ks, ke, i, ve)
		if i = skipSpace(b, ve); b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
}

// text returns a string's code points (see decodeString).
func (n *node) text() string {
	st := n.state()
	if st.str == nil {
		s, _ := decodeString(n.bytes())
		st.str = &s
	}
	return *st.str
}

// clone returns a copy of n that later operations can change without
// changing n. The bytes are shared; they never change.
func (n *node) clone() *node {
	c := &node{src: n.src, start: n.start, end: n.end, kind: n.kind}
	if !n.opened() {
		return c
	}
	c.x = &nodeState{opened: true}
	if n.kind == '{' {
		c.x.members = make([]member, len(n.x.members))
		c.x.index = make(map[string]int, len(n.x.index))
		for i, m := range n.x.members {
			c.x.members[i] = member{name: m.name, raw: m.raw, val: m.val.clone()}
			c.x.index[m.name] = i
		}
		return c
	}
	c.x.elems = make([]*node, len(n.x.elems))
	for i, e := range n.x.elems {
		c.x.elems[i] = e.clone()
	}
	return c
}

// size is an upper bound of n's written size.
func (n *node) size() int {
	if !n.opened() {
		return int(n.end - n.start)
	}
	s := 2
	for _, m := range n.x.members {
		name := len(m.raw)
		if m.raw == nil {
			name = 2 + 6*len(m.name) // every byte escaped, at worst
		}
		s += name + 2 + m.val.size()
	}
	for _, e := range n.x.elems {
		s += 1 + e.size()
	}
	return s
}

// write appends n to buf: an unopened value compacted from its original
// bytes, an opened one member by member with the names as written.
func (n *node) write(buf *bytes.Buffer) error {
	if !n.opened() {
		return json.Compact(buf, n.bytes())
	}
	if n.kind == '{' {
		buf.WriteByte('{')
		for i, m := range n.x.members {
			if i > 0 {
				buf.WriteByte(',')
			}
			if m.raw != nil {
				buf.Write(m.raw)
			} else {
				writeString(buf, m.name)
			}
			buf.WriteByte(':')
			if err := m.val.write(buf); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
		return nil
	}
	buf.WriteByte('[')
	for i, e := range n.x.elems {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := e.write(buf); err != nil {
			return err
		}
	}
	buf.WriteByte(']')
	return nil
}

// writeString writes s, valid UTF-8, as a JSON string, escaping only what
// RFC 8259 §7 requires: a member name a patch adds is written as plainly
// as the rest of the document.
func writeString(buf *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	buf.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			buf.WriteByte('\\')
			buf.WriteByte(c)
		case c < 0x20:
			buf.WriteString(`\u00`)
			buf.WriteByte(hex[c>>4])
			buf.WriteByte(hex[c&0xf])
		default:
			buf.WriteByte(c)
		}
	}
	buf.WriteByte('"')
}

// equal is RFC 6902 §4.6: values of the same type, numbers equal in value,
// strings equal in code points, arrays equal element by element in order,
// objects with the same names and equal values in any order.
func equal(a, b *node) (bool, error) {
	if a.kind != b.kind {
		return false, nil
	}
	switch a.kind {
	case '"':
		return a.text() == b.text(), nil
	case '0':
		x, err := a.number()
		if err != nil {
			return false, err
		}
		y, err := b.number()
		if err != nil {
			return false, err
		}
		return *x == *y, nil
	case '[':
		if err := a.open(); err != nil {
			return false, err
		}
		if err := b.open(); err != nil {
			return false, err
		}
		if len(a.x.elems) != len(b.x.elems) {
			return false, nil
		}
		for i := range a.x.elems {
			if eq, err := equal(a.x.elems[i], b.x.elems[i]); !eq || err != nil {
				return false, err
			}
		}
		return true, nil
	case '{':
		if err := a.open(); err != nil {
			return false, err
		}
		if err := b.open(); err != nil {
			return false, err
		}
		if len(a.x.members) != len(b.x.members) {
			return false, nil
		}
		for _, m := range a.x.members {
			j, ok := b.x.index[m.name]
			if !ok {
				return false, nil
			}
			if eq, err := equal(m.val, b.x.members[j].val); !eq || err != nil {
				return false, err
			}
		}
		return true, nil
	}
	return true, nil // true, false and null equal themselves
}

// decimal is a JSON number's exact value: digits without leading or
// trailing zeros, times ten to exp. Zero has no digits and is not negative.
type decimal struct {
	neg    bool
	digits string
	exp    int64
}

// number returns n's value.
func (n *node) number() (*decimal, error) {
	st := n.state()
	if st.num == nil {
		d, err := parseDecimal(n.bytes())
		if err != nil {
			return nil, err
		}
		st.num = &d
	}
	return st.num, nil
}

// maxExpDigits bounds an exponent's significant digits. RFC 8259 §9 lets
// an implementation limit the range of numbers; a number beyond it cannot
// be compared, which fails the patch rather than guessing.
const maxExpDigits = 15

// parseDecimal parses s, a well-formed JSON number, exactly.
func parseDecimal(s []byte) (decimal, error) {
	var d decimal
	i := 0
	if s[0] == '-' {
		d.neg = true
		i++
	}
	var mant []byte
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		mant = append(mant, s[i])
		i++
	}
	var frac int64
	if i < len(s) && s[i] == '.' {
		for i++; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			mant = append(mant, s[i])
			frac++
		}
	}
	if i < len(s) { // 'e' or 'E'
		i++
		neg := false
		if s[i] == '+' || s[i] == '-' {
			neg = s[i] == '-'
			i++
		}
		e := bytes.TrimLeft(s[i:], "0")
		if len(e) > maxExpDigits {
			return decimal{}, fmt.Errorf("the number %.40s... has an exponent beyond what this receiver compares", s)
		}
		for _, c := range e {
			d.exp = d.exp*10 + int64(c-'0')
		}
		if neg {
			d.exp = -d.exp
		}
	}
	d.exp -= frac
	mant = bytes.TrimLeft(mant, "0")
	trimmed := bytes.TrimRight(mant, "0")
	if len(trimmed) == 0 {
		return decimal{}, nil
	}
	d.exp += int64(len(mant) - len(trimmed))
	d.digits = string(trimmed)
	return d, nil
}
