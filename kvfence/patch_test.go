package kvfence

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// patchOutcome classifies what became of a patch: "" (applied),
// "malformed" (refused by the validator), "test" (a test op failed) or
// "apply" (it does not apply to the document).
func patchOutcome(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrMalformedPatch):
		return "malformed"
	case errors.Is(err, errPatchTest):
		return "test"
	default:
		return "apply"
	}
}

// runPatch validates patch and applies it to doc as Submit does.
func runPatch(patch, doc []byte) ([]byte, error) {
	ops, err := parsePatch(patch)
	if err != nil {
		return nil, err
	}
	return applyPatch(ops, doc)
}

// sameJSON reports whether a and b decode to the same value, member order
// aside.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	for _, v := range []struct {
		b   []byte
		out *any
	}{{a, &x}, {b, &y}} {
		dec := json.NewDecoder(bytes.NewReader(v.b))
		dec.UseNumber()
		if err := dec.Decode(v.out); err != nil {
			t.Fatalf("decode %s: %v", v.b, err)
		}
	}
	return reflect.DeepEqual(x, y)
}

// Ensure that every example of RFC 6902 Appendix A has the result or the
// error the RFC gives it (A.11 excepted, which is refused on purpose: see
// its comment in the vector file).
func TestPatch_RFC6902AppendixA(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "patch", "rfc6902-appendix-a.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vectors []struct {
		Name   string
		Doc    json.RawMessage
		Patch  json.RawMessage
		Result json.RawMessage
		Error  string
	}
	if err := json.Unmarshal(b, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) != 16 {
		t.Fatalf("%d vectors, want A.1 to A.16", len(vectors))
	}
	for _, v := range vectors {
		t.Run(v.Name, func(t *testing.T) {
			out, err := runPatch(v.Patch, v.Doc)
			if got := patchOutcome(err); got != v.Error {
				t.Fatalf("outcome %q (%v), want %q", got, err, v.Error)
			}
			if err == nil && !sameJSON(t, out, v.Result) {
				t.Fatalf("result %s, want %s", out, v.Result)
			}
		})
	}
}

// Ensure that each pointer of RFC 6901 §5 references the value the RFC
// says, both through a test op and by evaluating it directly.
func TestPatch_RFC6901Examples(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "patch", "rfc6901-section5.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vectors struct {
		Doc      json.RawMessage
		Pointers []struct {
			Pointer json.RawMessage
			Value   json.RawMessage
		}
	}
	if err := json.Unmarshal(b, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors.Pointers) != 12 {
		t.Fatalf("%d pointers, want the RFC's 12", len(vectors.Pointers))
	}
	for _, v := range vectors.Pointers {
		t.Run(string(v.Pointer), func(t *testing.T) {
			test := `[{"op":"test","path":` + string(v.Pointer) + `,"value":` + string(v.Value) + `}]`
			if _, err := runPatch([]byte(test), vectors.Doc); err != nil {
				t.Fatalf("%s: %v", test, err)
			}
			wrong := `[{"op":"test","path":` + string(v.Pointer) + `,"value":"something else"}]`
			if _, err := runPatch([]byte(wrong), vectors.Doc); patchOutcome(err) != "test" {
				t.Fatalf("%s: %v, want a failed test", wrong, err)
			}
			var s string
			if err := json.Unmarshal(v.Pointer, &s); err != nil {
				t.Fatal(err)
			}
			p, err := parsePointer(s)
			if err != nil {
				t.Fatal(err)
			}
			n, err := (&document{root: newNode(newSource(vectors.Doc))}).find(p)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := n.write(&got); err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, got.Bytes(), v.Value) {
				t.Fatalf("%s references %s, want %s", s, got.Bytes(), v.Value)
			}
		})
	}
}

// Ensure that each deviation of lenient appliers is refused, and that the
// conforming form of the same operation applies.
func TestPatch_Deviations(t *testing.T) {
	const doc = `{"":1,"arr":[1,2,3],"n":1,"nul":null}`
	tests := []struct {
		name, patch string
		want        string // patchOutcome, or the exact result
	}{
		{"negative index on add", `[{"op":"add","path":"/arr/-1","value":9}]`, "apply"},
		{"negative index on replace", `[{"op":"replace","path":"/arr/-1","value":9}]`, "apply"},
		{"append with -", `[{"op":"add","path":"/arr/-","value":9}]`, `{"":1,"arr":[1,2,3,9],"n":1,"nul":null}`},
		{"test without value, missing path", `[{"op":"test","path":"/missing"}]`, "malformed"},
		{"test without value, null member", `[{"op":"test","path":"/nul"}]`, "malformed"},
		{"test for null, missing path", `[{"op":"test","path":"/missing","value":null}]`, "test"},
		{"test for null, null member", `[{"op":"test","path":"/nul","value":null}]`, doc},
		{"index 01", `[{"op":"replace","path":"/arr/01","value":9}]`, "apply"},
		{"index 00", `[{"op":"replace","path":"/arr/00","value":9}]`, "apply"},
		{"index +1", `[{"op":"replace","path":"/arr/+1","value":9}]`, "apply"},
		{"index 0", `[{"op":"replace","path":"/arr/0","value":9}]`, `{"":1,"arr":[9,2,3],"n":1,"nul":null}`},
		{"index 1", `[{"op":"remove","path":"/arr/1"}]`, `{"":1,"arr":[1,3],"n":1,"nul":null}`},
		{"test / against the whole document", `[{"op":"test","path":"/","value":` + doc + `}]`, "test"},
		{"test / against member \"\"", `[{"op":"test","path":"/","value":1}]`, doc},
		{"test \"\" against the whole document", `[{"op":"test","path":"","value":` + doc + `}]`, doc},
		{"duplicate op", `[{"op":"test","path":"/n","value":2,"op":"replace"}]`, "malformed"},
		{"duplicate op, other order", `[{"op":"replace","path":"/n","value":2,"op":"test"}]`, "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runPatch([]byte(tt.patch), []byte(doc))
			if got := patchOutcome(err); got != "" {
				if got != tt.want {
					t.Fatalf("outcome %q (%v), want %s", got, err, tt.want)
				}
				return
			}
			if string(out) != tt.want {
				t.Fatalf("applied: %s, want %s", out, tt.want)
			}
		})
	}
}

// Ensure that the validator refuses every patch that is not strictly a
// well-formed RFC 6902 patch, and accepts the ones that are.
func TestValidatePatch(t *testing.T) {
	tests := []struct {
		name, patch string
		want        string // "" to accept, else a substring of the error
	}{
		{"empty patch", `[]`, ""},
		{"white space around", " \n[ ]\t\r\n", ""},
		{"white space between", "[ \n {\"op\" : \"remove\" , \"path\" : \"/a\"} \n, {\"op\":\"add\",\"path\":\"/b\",\"value\": [ 1 ] } ]", ""},
		{"every op", `[{"op":"add","path":"/a","value":1},{"op":"remove","path":"/a"},{"op":"replace","path":"","value":{}},` +
			`{"op":"move","from":"/a","path":"/b"},{"op":"copy","from":"/a","path":"/b"},{"op":"test","path":"/~0~1","value":[]}]`, ""},
		{"surrogate pair", `[{"op":"test","path":"/\ud83d\ude00","value":"\ud83d\ude00"}]`, ""},
		{"names unique after unescaping", `[{"op":"add","path":"/a","value":{"a":1,"b":2}}]`, ""},
		{"same name in sibling objects", `[{"op":"add","path":"/a","value":[{"k":1},{"k":2}]}]`, ""},
		{"number beyond float64", `[{"op":"test","path":"/a","value":1e400}]`, ""},

		{"empty input", ``, "not a complete JSON text"},
		{"not UTF-8", "[{\"op\":\"remove\",\"path\":\"/\xff\"}]", "UTF-8"},
		{"not JSON", `[{"op":"remove",}]`, "invalid character"},
		{"null", `null`, "not a JSON array"},
		{"object", `{"op":"remove","path":"/a"}`, "not a JSON array"},
		{"string", `"[]"`, "not a JSON array"},
		{"number element", `[1]`, "operation 0: not a JSON object"},
		{"null element", `[null]`, "operation 0: not a JSON object"},
		{"array element", `[[]]`, "operation 0: not a JSON object"},
		{"trailing garbage", `[]x`, "invalid character"},
		{"second value", `[] []`, "after the JSON text"},
		{"trailing comma", `[{"op":"remove","path":"/a"},]`, "invalid character"},
		{"op not a string", `[{"op":1,"path":"/a"}]`, `"op" is not a string`},
		{"op null", `[{"op":null,"path":"/a"}]`, `"op" is not a string`},
		{"op missing", `[{"path":"/a"}]`, `no "op" member`},
		{"unknown op", `[{"op":"merge","path":"/a"}]`, `op "merge"`},
		{"op in capitals", `[{"op":"Add","path":"/a","value":1}]`, `op "Add"`},
		{"path missing", `[{"op":"remove"}]`, `no "path" member`},
		{"add without value", `[{"op":"add","path":"/a"}]`, `no "value" member`},
		{"replace without value", `[{"op":"replace","path":"/a"}]`, `no "value" member`},
		{"test without value", `[{"op":"test","path":"/a"}]`, `no "value" member`},
		{"move without from", `[{"op":"move","path":"/a"}]`, `no "from" member`},
		{"copy without from", `[{"op":"copy","path":"/a"}]`, `no "from" member`},
		{"remove with value", `[{"op":"remove","path":"/a","value":1}]`, `member "value"`},
		{"add with from", `[{"op":"add","path":"/a","value":1,"from":"/b"}]`, `member "from"`},
		{"move with value", `[{"op":"move","from":"/b","path":"/a","value":1}]`, `member "value"`},
		{"unknown member", `[{"op":"add","path":"/baz","value":"qux","xyz":123}]`, `member "xyz"`},
		{"member in capitals", `[{"op":"remove","path":"/a","Path":"/b"}]`, `member "Path"`},
		{"path not a string", `[{"op":"remove","path":1}]`, `"path" is not a string`},
		{"path null", `[{"op":"remove","path":null}]`, `"path" is not a string`},
		{"from not a string", `[{"op":"copy","from":["a"],"path":"/a"}]`, `"from" is not a string`},
		{"pointer without leading slash", `[{"op":"remove","path":"a"}]`, "starts with /"},
		{"pointer with ~ at the end", `[{"op":"remove","path":"/a~"}]`, "~ not followed by 0 or 1"},
		{"pointer with ~2", `[{"op":"remove","path":"/a~2"}]`, "~ not followed by 0 or 1"},
		{"from with a bad escape", `[{"op":"move","from":"/~x","path":"/a"}]`, "~ not followed by 0 or 1"},
		{"duplicate op", `[{"op":"test","path":"/a","value":1,"op":"replace"}]`, `"op" twice`},
		{"duplicate path", `[{"op":"remove","path":"/a","path":"/b"}]`, `"path" twice`},
		{"duplicate value", `[{"op":"add","path":"/a","value":1,"value":2}]`, `"value" twice`},
		{"duplicate through an escape", `[{"op":"remove","path":"/a","p\u0061th":"/b"}]`, `"path" twice`},
		{"duplicate inside a value", `[{"op":"add","path":"/a","value":{"k":1,"k":2}}]`, `"k" twice`},
		{"duplicate deep inside a value", `[{"op":"add","path":"/a","value":[{"x":[{"k":1,"k":1}]}]}]`, `"k" twice`},
		{"lone high surrogate in a value", `[{"op":"add","path":"/a","value":"\ud800"}]`, "unpaired"},
		{"lone low surrogate in a path", `[{"op":"remove","path":"/\udc00"}]`, "unpaired"},
		{"high surrogate before a non-surrogate", `[{"op":"add","path":"/a","value":"\ud800\u0041"}]`, "unpaired"},
		{"lone surrogate in a name", `[{"op":"add","path":"/a","value":{"\udfff":1}}]`, "unpaired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidatePatch([]byte(tt.patch))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrMalformedPatch) {
				t.Fatalf("ValidatePatch = %v, want ErrMalformedPatch", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
			// The request decoder refuses it too, as a malformed request.
			_, err = EncodeRequest(&Request{V: 1, Action: "a", Target: "t", Patch: []byte(tt.patch)})
			if !errors.Is(err, ErrMalformedRequest) || !errors.Is(err, ErrMalformedPatch) {
				t.Fatalf("EncodeRequest = %v, want ErrMalformedRequest and ErrMalformedPatch", err)
			}
		})
	}
}

// Ensure that application follows RFC 6902 and RFC 6901 operation by
// operation, keeps the bytes it does not touch (compacted, never
// re-escaped) and compares values as RFC 6902 §4.6 says.
func TestApplyPatch(t *testing.T) {
	tests := []struct {
		name, doc, patch string
		want             string // the exact result, or "test" or "apply"
	}{
		// What is not patched is kept, compacted, never re-escaped.
		{"untouched bytes kept", `{ "a" : "<x>\u0041&\/", "b" : 1.0, "c": {"d": "\u00e9", "e" : [ 1E2 ]} }`,
			`[{"op":"replace","path":"/b","value":2}]`, `{"a":"<x>\u0041&\/","b":2,"c":{"d":"\u00e9","e":[1E2]}}`},
		{"member names kept as written", `{"\u0061":1,"b":2}`, `[{"op":"remove","path":"/b"}]`, `{"\u0061":1}`},
		{"tests only: compacted, unchanged", ` {"a" : [1, 2]} `, `[{"op":"test","path":"/a/1","value":2}]`, `{"a":[1,2]}`},
		{"empty patch", `{"a" : 1}`, `[]`, `{"a":1}`},
		{"value compacted", `{}`, `[{"op":"add","path":"/k","value": { "x" : [ 1 , "<&>" ] } }]`, `{"k":{"x":[1,"<&>"]}}`},
		{"new name escaped only where JSON requires", `{}`, `[{"op":"add","path":"/<k>\"\\\n\u00e9","value":1}]`, `{"<k>\"\\\u000aé":1}`},
		{"name addressed through its escape", `{"\u00e9":1}`, `[{"op":"replace","path":"/é","value":2}]`, `{"\u00e9":2}`},

		// add (§4.1)
		{"add replaces an existing member in place", `{"a":1,"b":2}`, `[{"op":"add","path":"/a","value":3}]`, `{"a":3,"b":2}`},
		{"add the whole document", `{"a":1}`, `[{"op":"add","path":"","value":[1]}]`, `[1]`},
		{"add at the end index", `[1,2]`, `[{"op":"add","path":"/2","value":3}]`, `[1,2,3]`},
		{"add past the end", `[1,2]`, `[{"op":"add","path":"/3","value":3}]`, "apply"},
		{"add into a missing parent", `{}`, `[{"op":"add","path":"/a/b","value":1}]`, "apply"},
		{"add into a string", `{"s":"x"}`, `[{"op":"add","path":"/s/0","value":1}]`, "apply"},
		{"add at a name, not an index", `[1]`, `[{"op":"add","path":"/a","value":1}]`, "apply"},
		{"add at an index beyond int", `[1]`, `[{"op":"add","path":"/18446744073709551616","value":1}]`, "apply"},
		{"add at an empty token of an array", `[1]`, `[{"op":"add","path":"/","value":1}]`, "apply"},
		{"add member \"\"", `{}`, `[{"op":"add","path":"/","value":1}]`, `{"":1}`},
		// remove (§4.2)
		{"remove the whole document", `{"a":1}`, `[{"op":"remove","path":""}]`, "apply"},
		{"remove a missing member", `{"a":1}`, `[{"op":"remove","path":"/b"}]`, "apply"},
		{"remove past the end", `[1]`, `[{"op":"remove","path":"/1"}]`, "apply"},
		{"remove then address the rest", `{"a":1,"b":2,"c":3}`, `[{"op":"remove","path":"/a"},{"op":"replace","path":"/c","value":4}]`, `{"b":2,"c":4}`},
		// replace (§4.3)
		{"replace the whole document", `{"a":1}`, `[{"op":"replace","path":"","value":"x"}]`, `"x"`},
		{"replace a missing member", `{"a":1}`, `[{"op":"replace","path":"/b","value":1}]`, "apply"},
		{"replace past the end", `[1]`, `[{"op":"replace","path":"/1","value":1}]`, "apply"},
		// move (§4.4)
		{"move to itself", `{"a":{"b":1}}`, `[{"op":"move","from":"/a","path":"/a"}]`, `{"a":{"b":1}}`},
		{"move a missing value to itself", `{"a":1}`, `[{"op":"move","from":"/b","path":"/b"}]`, "apply"},
		{"move into its own child", `{"a":{"b":1}}`, `[{"op":"move","from":"/a","path":"/a/b"}]`, "apply"},
		{"move the document into a child", `{"a":1}`, `[{"op":"move","from":"","path":"/a"}]`, "apply"},
		{"move to a name with the same prefix", `{"a":1}`, `[{"op":"move","from":"/a","path":"/ab"}]`, `{"ab":1}`},
		{"move up into its parent", `{"a":{"b":1}}`, `[{"op":"move","from":"/a/b","path":"/a"}]`, `{"a":1}`},
		{"move from a missing value", `{"a":1}`, `[{"op":"move","from":"/b","path":"/c"}]`, "apply"},
		{"move to -", `{"a":[1,2,3]}`, `[{"op":"move","from":"/a/0","path":"/a/-"}]`, `{"a":[2,3,1]}`},
		// copy (§4.5)
		{"copy is independent of its source", `{"a":{"x":1}}`, `[{"op":"copy","from":"/a","path":"/b"},{"op":"replace","path":"/b/x","value":2}]`, `{"a":{"x":1},"b":{"x":2}}`},
		{"copy of a changed value", `{"a":{"x":1}}`, `[{"op":"add","path":"/a/y","value":2},{"op":"copy","from":"/a","path":"/b"},{"op":"remove","path":"/a/x"}]`, `{"a":{"y":2},"b":{"x":1,"y":2}}`},
		{"copy from a missing value", `{}`, `[{"op":"copy","from":"/a","path":"/b"}]`, "apply"},
		{"copy into itself", `{"a":[1]}`, `[{"op":"copy","from":"/a","path":"/a/0"}]`, `{"a":[[1],1]}`},
		// test (§4.6)
		{"test a missing member", `{}`, `[{"op":"test","path":"/a","value":null}]`, "test"},
		{"test through a scalar", `{"a":1}`, `[{"op":"test","path":"/a/b","value":1}]`, "test"},
		{"test at -", `[1]`, `[{"op":"test","path":"/-","value":1}]`, "test"},
		{"numbers equal by value", `{"a":[1,1.0,100,1e2,-0,0.5,1e400]}`, `[{"op":"test","path":"/a","value":[1.00,10e-1,1E+2,100.0,0,5E-1,10e399]}]`, `{"a":[1,1.0,100,1e2,-0,0.5,1e400]}`},
		{"numbers differ by value", `{"a":1e400}`, `[{"op":"test","path":"/a","value":1e401}]`, "test"},
		{"number is not a string", `{"a":10}`, `[{"op":"test","path":"/a","value":"10"}]`, "test"},
		{"null is not false", `{"a":null}`, `[{"op":"test","path":"/a","value":false}]`, "test"},
		{"true is true", `{"a":true}`, `[{"op":"test","path":"/a","value":true}]`, `{"a":true}`},
		{"true is not false", `{"a":true}`, `[{"op":"test","path":"/a","value":false}]`, "test"},
		{"object is not array", `{"a":{}}`, `[{"op":"test","path":"/a","value":[]}]`, "test"},
		{"objects in any order", `{"a":{"x":1,"y":[2,{"z":3}]}}`, `[{"op":"test","path":"/a","value":{"y":[2,{"z":3}],"x":1}}]`, `{"a":{"x":1,"y":[2,{"z":3}]}}`},
		{"object with a member less", `{"a":{"x":1,"y":2}}`, `[{"op":"test","path":"/a","value":{"x":1}}]`, "test"},
		{"object with a member more", `{"a":{"x":1}}`, `[{"op":"test","path":"/a","value":{"x":1,"y":2}}]`, "test"},
		{"object with another name", `{"a":{"x":1}}`, `[{"op":"test","path":"/a","value":{"y":1}}]`, "test"},
		{"arrays in order", `{"a":[1,2]}`, `[{"op":"test","path":"/a","value":[2,1]}]`, "test"},
		{"array with an element less", `{"a":[1,2]}`, `[{"op":"test","path":"/a","value":[1]}]`, "test"},
		{"strings through escapes", `{"s":"\u00e9\ud83d\ude00a\/b\"\\"}`, `[{"op":"test","path":"/s","value":"é😀a/b\"\u005c"}]`, `{"s":"\u00e9\ud83d\ude00a\/b\"\\"}`},
		{"strings differ in one code point", `{"s":"abc"}`, `[{"op":"test","path":"/s","value":"abd"}]`, "test"},
		{"unpaired surrogate is not U+FFFD", `{"s":"\ud800"}`, `[{"op":"test","path":"/s","value":"\ufffd"}]`, "test"},
		{"composed is not decomposed", `{"s":"\u00e9"}`, `[{"op":"test","path":"/s","value":"e\u0301"}]`, "test"},
		{"a test stops the patch", `{"a":1}`, `[{"op":"replace","path":"/a","value":2},{"op":"test","path":"/a","value":1}]`, "test"},
		{"an exponent beyond comparison", `{"a":1e1000000000000000}`, `[{"op":"test","path":"/a","value":1}]`, "apply"},

		// The target itself.
		{"target not JSON", `{"a":1`, `[]`, "apply"},
		{"target not UTF-8", "{\"a\":\"\xff\"}", `[]`, "apply"},
		{"target empty", ``, `[]`, "apply"},
		{"duplicate names on the path", `{"a":1,"a":2}`, `[{"op":"replace","path":"/a","value":3}]`, "apply"},
		{"duplicate names in a compared value", `{"a":{"k":1,"k":1}}`, `[{"op":"test","path":"/a","value":{"k":1}}]`, "apply"},
		{"duplicate names elsewhere are carried", `{"x":{"k":1,"k":2},"y":1}`, `[{"op":"replace","path":"/y","value":2}]`, `{"x":{"k":1,"k":2},"y":2}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runPatch([]byte(tt.patch), []byte(tt.doc))
			if got := patchOutcome(err); got != "" {
				if got != tt.want {
					t.Fatalf("outcome %q (%v), want %s", got, err, tt.want)
				}
				return
			}
			if string(out) != tt.want {
				t.Fatalf("applied: %s, want %s", out, tt.want)
			}
		})
	}
}

// Ensure that copies cannot make a value grow beyond MaxTargetValueSize,
// however few bytes the patch has.
func TestApplyPatch_CopyLimit(t *testing.T) {
	doc := []byte(`{"a":"` + strings.Repeat("x", MaxTargetValueSize/3) + `"}`)
	two := `[{"op":"copy","from":"/a","path":"/b"},{"op":"copy","from":"/a","path":"/c"}]`
	if _, err := runPatch([]byte(two), doc); err != nil {
		t.Fatalf("two copies: %v", err)
	}
	four := `[{"op":"copy","from":"","path":"/b"},{"op":"copy","from":"","path":"/c"},{"op":"copy","from":"","path":"/d"}]`
	if _, err := runPatch([]byte(four), doc); patchOutcome(err) != "apply" || !strings.Contains(err.Error(), "copies add up") {
		t.Fatalf("doubling copies: %v, want the copy limit", err)
	}
}

// FuzzPatch checks that the validator and the applier never panic, that
// every error of the validator wraps ErrMalformedPatch, that a patch it
// accepts is accepted again in its re-encoded form with the same meaning,
// and that whatever the applier returns is UTF-8 JSON that it keeps as it
// is.
func FuzzPatch(f *testing.F) {
	for _, s := range [][2]string{
		{fixPatch, fixValue},
		{`[{"op":"add","path":"/arr/-1","value":9}]`, patchDoc},
		{`[{"op":"test","path":"/missing"}]`, patchDoc},
		{`[{"op":"replace","path":"/arr/01","value":9}]`, patchDoc},
		{`[{"op":"test","path":"/","value":1}]`, patchDoc},
		{`[{"op":"test","path":"/n","value":2,"op":"replace"}]`, patchDoc},
		{`[{"op":"move","from":"/arr/0","path":"/arr/-"},{"op":"copy","from":"","path":"/c"}]`, patchDoc},
		{`[{"op":"test","path":"/~01","value":10}]`, `{"/": 9, "~1": 10}`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, patch, doc []byte) {
		ops, err := parsePatch(patch)
		if err != nil {
			if !errors.Is(err, ErrMalformedPatch) {
				t.Fatalf("error does not wrap ErrMalformedPatch: %v", err)
			}
			return
		}
		again := encodePatch(t, ops)
		ops2, err := parsePatch(again)
		if err != nil {
			t.Fatalf("accepted %q, refused its re-encoding %q: %v", patch, again, err)
		}
		if third := encodePatch(t, ops2); !bytes.Equal(third, again) {
			t.Fatalf("re-encoding changed the patch: %q -> %q", again, third)
		}
		out, err := applyPatch(ops, doc)
		if err != nil {
			return
		}
		if !utf8.Valid(out) || !json.Valid(out) {
			t.Fatalf("applying %q to %q gave %q, not UTF-8 JSON", patch, doc, out)
		}
		same, err := applyPatch(nil, out)
		if err != nil || !bytes.Equal(same, out) {
			t.Fatalf("an empty patch changed %q to %q (%v)", out, same, err)
		}
		out2, err := applyPatch(ops2, doc)
		if err != nil || !bytes.Equal(out2, out) {
			t.Fatalf("the re-encoded patch gave %q (%v), the original %q", out2, err, out)
		}
	})
}

// encodePatch writes ops back as a compact JSON Patch.
func encodePatch(t *testing.T, ops []patchOp) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteByte('[')
	for i, op := range ops {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"op":`)
		writeString(&b, op.op)
		b.WriteString(`,"path":`)
		writeString(&b, op.path.text)
		if op.op == "move" || op.op == "copy" {
			b.WriteString(`,"from":`)
			writeString(&b, op.from.text)
		}
		if op.value != nil {
			b.WriteString(`,"value":`)
			if err := newNode(op.value).write(&b); err != nil {
				t.Fatal(err)
			}
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	return b.Bytes()
}

// Ensure that a move into the moved value's own child is refused for that
// reason (RFC 6902 §4.4), before anything is removed, and not only because
// its destination is gone once the source is.
func TestApplyPatch_MoveIntoOwnChild(t *testing.T) {
	for _, patch := range []string{
		`[{"op":"move","from":"/a","path":"/a/b"}]`,
		`[{"op":"move","from":"","path":"/a"}]`,
		`[{"op":"move","from":"/a","path":"/a/-"}]`,
	} {
		_, err := runPatch([]byte(patch), []byte(`{"a":{"b":[1]}}`))
		if patchOutcome(err) != "apply" || !strings.Contains(err.Error(), "into its own child") {
			t.Errorf("%s: %v, want a refusal to move into its own child", patch, err)
		}
	}
}
