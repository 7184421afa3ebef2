package api

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Ensure that DecodeStrict refuses every body that encoding/json would
// read case-insensitively, with the last duplicate winning, or while
// dropping a member, at every level, and that the error names the
// member; and that it decodes what it accepts as encoding/json does.
func TestDecodeStrict(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		into       func() any
		want       string // "" to accept; else a substring of the error
	}{
		{"hold", `{"scopes":["cfg/zz"],"reason":"r"}`, newHold, ""},
		{"hold all", `{"scopes":[],"reason":"r","all":true}`, newHold, ""},
		{"escaped name", `{"\u0073copes":["a"],"reason":"r"}`, newHold, ""},
		{"white space", " \n{ \"scopes\" : [ \"a\" ] , \"reason\" : \"r\" }\n\t", newHold, ""},
		{"null slice", `{"scopes":null,"reason":"r"}`, newHold, ""},
		{"case variant after", `{"scopes":["nope"],"Scopes":["cfg/zz"]}`, newHold, `member "Scopes" of the body: member names are case-sensitive, and this one is "scopes"`},
		{"case variant alone", `{"SCOPES":["cfg/zz"]}`, newHold, `member "SCOPES"`},
		{"kelvin sign", `{"scope":"s","executor":"e","claim":"c","request_b64":"","ttl":"","decision":"","epoch":1,"\u212aey":1}`, newActivate, "has no member \"\u212aey\""},
		{"long s", `{"ſcopes":["cfg/zz"]}`, newHold, `member "ſcopes" of the body: member names are case-sensitive, and this one is "scopes"`},
		{"kelvin folds to k", `{"scope":"s","target":"t","value_b64":"","\u212a":1}`, newTarget, "has no member \"\u212a\""},
		// The Kelvin sign folds onto the k of "kind", which encoding/json
		// would match: the name is refused as another case of it.
		{"kelvin in a name", `{"scope":"s","\u212aind":"t"}`, newTarget, `this one is "kind"`},
		{"long s in a known name", `{"\u017fcope":"s"}`, newScope, `this one is "scope"`},
		{"duplicate", `{"scopes":["a"],"scopes":["b"]}`, newHold, `member "scopes" of the body is given twice`},
		{"escaped duplicate", `{"scopes":["a"],"\u0073copes":["b"]}`, newHold, `member "scopes" of the body is given twice`},
		{"unknown", `{"scopes":["a"],"nope":1}`, newHold, `the body has no member "nope"`},
		{"object for a string", `{"scopes":[{"x":1}]}`, newHold, `cannot unmarshal object`},
		{"nested duplicate", `{"error":{"code":"a","code":"b"}}`, newError, `member "code" of "error" is given twice`},
		{"nested case variant", `{"error":{"Code":"a","message":"m"}}`, newError, `member "Code" of "error": member names are case-sensitive`},
		{"nested unknown", `{"error":{"code":"a","message":"m","hint":"h"}}`, newError, `"error" has no member "hint"`},
		{"embedded member", `{"grant":"g","created_at":null,"expired":true,"Expired":false}`, newGrant, `member "Expired"`},
		{"embedded duplicate", `{"grant":"g","grant":"h"}`, newGrant, `given twice`},
		{"map duplicate", `{"scopes":[{"scope":"s","denials":{"a":1,"a":2}}]}`, newStatus, `member "a" of "scopes"[0]."denials" is given twice`},
		// A map's keys are exact: two keys that differ in case are two.
		{"map case is a key", `{"scopes":[{"scope":"s","denials":{"a":1,"A":2}}]}`, newStatus, ""},
		{"deep duplicate", `{"scopes":[{"scope":"s","grant":{"grant":"g","scope":"x","scope":"y"}}]}`, newStatus, `member "scope" of "scopes"[0]."grant" is given twice`},
		{"null string", `{"scope":null}`, newScope, `"scope" is null`},
		{"null body", `null`, newScope, `the body is null`},
		{"null number", `{"scope":"s","executor":"e","epoch":null}`, newActivate, `"epoch" is null`},
		{"huge number", `{"scope":"s","epoch":1e400}`, newActivate, `epoch`},
		{"too big", `{"scope":"s","epoch":18446744073709551616}`, newActivate, `epoch`},
		{"negative", `{"scope":"s","epoch":-1}`, newActivate, `epoch`},
		{"fraction", `{"scope":"s","epoch":1.5}`, newActivate, `epoch`},
		{"wrong type", `{"scopes":"a"}`, newHold, `scopes`},
		{"trailing object", `{"scope":"a"}{"scope":"b"}`, newScope, `data after`},
		{"trailing bracket", `{"scope":"a"}]`, newScope, `data after`},
		{"trailing garbage", `{"scope":"a"} x`, newScope, `data after`},
		{"trailing comma", `{"scope":"a",}`, newScope, `invalid`},
		{"not utf-8", "{\"scope\":\"a\xff\"}", newScope, `not UTF-8 (at byte 11)`},
		{"lone high surrogate", `{"scope":"a\ud800"}`, newScope, `at byte 9 has an unpaired UTF-16 surrogate`},
		{"lone low surrogate", `{"scope":"s","target":"a\udc00b"}`, newTarget, `at byte 22 has an unpaired`},
		{"high then not low", `{"scope":"a\ud800\u0041"}`, newScope, `unpaired`},
		{"surrogate in a name", `{"scope":"s","\udfff":1}`, newScope, `has no member`},
		{"pair", `{"scope":"a\ud83d\ude00 \\u\"\ud800"}`, newScope, `at byte 9 has an unpaired`},
		{"escaped backslash before u", `{"scope":"a\\ud800"}`, newScope, ""},
		{"surrogate pair", `{"scope":"a\ud83d\ude00"}`, newScope, ""},
		{"array body", `[{"scope":"a"}]`, newScope, `cannot unmarshal`},
		{"empty", ``, newScope, `EOF`},
		{"deep", strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40), newAny, `nests over`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.into()
			err := DecodeStrict([]byte(tc.body), v)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("DecodeStrict(%s) = %v", tc.body, err)
				}
				w := tc.into()
				if err := json.Unmarshal([]byte(tc.body), w); err != nil || !reflect.DeepEqual(v, w) {
					t.Fatalf("DecodeStrict and encoding/json disagree on %s: %+v, %+v (%v)", tc.body, v, w, err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrJSON) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodeStrict(%s) = %v; want ErrJSON with %q", tc.body, err, tc.want)
			}
		})
	}
}

// Ensure that DecodeAnswer lets a member it does not know through, as a
// newer receiver may send one, but still refuses a duplicate and a member
// in another case than a known one, which could make a client read an
// answer otherwise than another reader.
func TestDecodeAnswer(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"outcome":"applied","new_member":{"x":[1,2]}}`, true},
		{`{"outcome":"denied","Outcome":"applied"}`, false},
		{`{"outcome":"denied","outcome":"applied"}`, false},
		{`{"outcome":"applied","new":{"a":1,"a":2}}`, false},
		{`{"outcome":"applied"} {}`, false},
		{`{"outcome":"applied","x\udfff":1}`, false},
	} {
		var s Submit
		err := DecodeAnswer([]byte(tc.body), &s)
		if (err == nil) != tc.ok {
			t.Errorf("DecodeAnswer(%s) = %v, want ok %v", tc.body, err, tc.ok)
		}
	}
	// encoding/json folds the Kelvin sign onto k: "anchor_chec\u212aed"
	// fills AnchorChecked there, and is refused here.
	body := []byte(`{"scopes":[],"audit_seq":1,"anchor_checked":false,"anchor_chec\u212aed":true}`)
	var lax Status
	if err := json.Unmarshal(body, &lax); err != nil || !lax.AnchorChecked {
		t.Fatalf("encoding/json no longer folds the Kelvin sign (%+v, %v): the case below tests nothing", lax, err)
	}
	var st Status
	if err := DecodeAnswer(body, &st); !errors.Is(err, ErrJSON) || !strings.Contains(err.Error(), `this one is "anchor_checked"`) {
		t.Fatalf("DecodeAnswer with a Kelvin-sign variant of a member: %v", err)
	}
}

func newHold() any     { return new(HoldRequest) }
func newActivate() any { return new(ActivateRequest) }
func newTarget() any   { return new(TargetCreateRequest) }
func newScope() any    { return new(ScopeCreateRequest) }
func newError() any    { return new(Error) }
func newGrant() any    { return new(Grant) }
func newStatus() any   { return new(Status) }
func newAny() any      { return new(any) }

// FuzzDecodeStrict checks, for any body, that DecodeStrict never accepts
// what encoding/json refuses, decodes what it accepts exactly as
// encoding/json does, and accepts only bodies whose every object member
// encoding/json would match exactly, once: so that encoding/json's case
// folding and last-duplicate-wins never decide what a request means.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{
		`{"scopes":["cfg/zz"],"reason":"r"}`,
		`{"scopes":["nope"],"Scopes":["cfg/zz"]}`,
		`{"scopes":["a"],"\u0073copes":["b"]}`,
		`{"ſcopes":["a"]}`,
		`{"scope":"s","executor":"e","claim":"c","request_b64":"AAE=","ttl":"1m","decision":"d","epoch":3}`,
		`{"scope":"s","epoch":1e400}`,
		`{"scope":"s","target":"t","value_b64":null}`,
		`{"scope":"a"} {"scope":"b"}`,
		`{"all":true,"reason":"r","scopes":null}`,
		"{\"scope\":\"\xff\"}",
		`{"scope":"a\ud800"}`,
		`{"scope":"a\ud83d\ude00 \\u\"\udc00"}`,
	} {
		for kind := range 4 {
			f.Add(kind, []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, kind int, b []byte) {
		into := []func() any{newHold, newActivate, newTarget, newScope}[uint(kind)%4]
		v := into()
		if DecodeStrict(b, v) != nil {
			return
		}
		w := into()
		if err := json.Unmarshal(b, w); err != nil {
			t.Fatalf("DecodeStrict accepted %q, which encoding/json refuses: %v", b, err)
		}
		if !reflect.DeepEqual(v, w) {
			t.Fatalf("DecodeStrict and encoding/json disagree on %q: %+v, %+v", b, v, w)
		}
		// Every member of the accepted top-level object is one of the
		// type's names, exactly, once.
		var members []json.RawMessage
		dec := json.NewDecoder(strings.NewReader(string(b)))
		tok, err := dec.Token()
		if err != nil || tok != json.Delim('{') {
			t.Fatalf("DecodeStrict accepted %q, which is not an object", b)
		}
		known := map[string]bool{}
		for _, f := range structFields(reflect.TypeOf(v).Elem()) {
			known[f.name] = true
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				t.Fatal(err)
			}
			name := tok.(string)
			if !known[name] || seen[name] {
				t.Fatalf("DecodeStrict accepted %q with member %q", b, name)
			}
			seen[name] = true
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				t.Fatal(err)
			}
			members = append(members, raw)
		}
	})
}

// Ensure that an error quotes a long member name cut short, so that a
// body's megabyte-long name is not echoed back whole.
func TestDecodeStrict_LongNameCut(t *testing.T) {
	name := strings.Repeat("é", 1<<16)
	for _, body := range []string{`{"` + name + `":1}`, `{"scope":"s","` + name + `":1,"` + name + `":2}`} {
		err := DecodeStrict([]byte(body), new(ScopeCreateRequest))
		if !errors.Is(err, ErrJSON) || len(err.Error()) > 400 || !strings.Contains(err.Error(), "(131072 bytes)") {
			t.Fatalf("error for a long member name: %.500v (%d bytes)", err, len(err.Error()))
		}
	}
}

// BenchmarkDecodeStrict measures the strict decoding of an activation
// body and of a page of 1000 events against encoding/json's alone.
func BenchmarkDecodeStrict(b *testing.B) {
	act := []byte(`{"scope":"configmap/prod/backup-policy","executor":"spiffe://example.org/agent/worker-a","claim":"c",` +
		`"request_b64":"` + strings.Repeat("QUJD", 100) + `","ttl":"15m","decision":"review-1","epoch":3}`)
	ev := `{"seq":1,"hash":"` + strings.Repeat("ab", 32) + `","prev":"` + strings.Repeat("cd", 32) + `","at":"2026-01-01T00:00:00Z",` +
		`"kind":"submit","scope":"s","epoch":2,"grant":"g","executor":"e","action":"a","outcome":"applied","target":"t"}`
	page := []byte(`{"events":[` + strings.TrimSuffix(strings.Repeat(ev+",", 1000), ",") + `]}`)
	for _, tc := range []struct {
		name string
		body []byte
		into func() any
	}{{"activate", act, newActivate}, {"events", page, func() any { return new(Events) }}} {
		b.Run(tc.name+"/strict", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := DecodeAnswer(tc.body, tc.into()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/encoding_json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := json.Unmarshal(tc.body, tc.into()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// node is a type that contains a pointer to itself.
type node struct {
	Name string `json:"name"`
	Next *node  `json:"next"`
}

// Ensure that a type that contains a pointer to itself is read strictly
// at every level of the body.
func TestDecodeStrict_RecursiveType(t *testing.T) {
	var n node
	if err := DecodeStrict([]byte(`{"name":"a","next":{"name":"b","next":{"name":"c","next":null}}}`), &n); err != nil ||
		n.Next.Next.Name != "c" {
		t.Fatalf("%+v %v", n, err)
	}
	for _, body := range []string{`{"name":"a","next":{"name":"b","next":{"Name":"c"}}}`,
		`{"name":"a","next":{"name":"b","next":{"name":"c","name":"d"}}}`} {
		if err := DecodeStrict([]byte(body), new(node)); !errors.Is(err, ErrJSON) || !strings.Contains(err.Error(), `"next"."next"`) {
			t.Fatalf("DecodeStrict(%s) = %v", body, err)
		}
	}
}
