package kvfence

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/audit"
)

var updateVectors = flag.Bool("update-wire-vectors", false, "rewrite testdata/wire/vectors.json")

// wireVectorsPath is the cross-language vector file: Go writes it, and
// both Go (here) and the Python client (clients/python/tests) check it.
var wireVectorsPath = filepath.Join("..", "testdata", "wire", "vectors.json")

// requestVector is one valid request: its fields, its canonical bytes and
// their SHA-256 (the digest a grant binds).
type requestVector struct {
	Name           string  `json:"name"`
	Action         string  `json:"action"`
	Target         string  `json:"target"`
	SetB64         *[]byte `json:"set_b64,omitempty"`
	Patch          *string `json:"patch,omitempty"`
	ExpectRevision *uint64 `json:"expect_revision,omitempty"`
	ExpectValueB64 *[]byte `json:"expect_value_b64,omitempty"`
	CBORHex        string  `json:"cbor_hex"`
	SHA256         string  `json:"sha256"`
}

// envelopeVector is one valid envelope, its fields and canonical bytes.
type envelopeVector struct {
	Name       string `json:"name"`
	Scope      string `json:"scope"`
	Epoch      uint64 `json:"epoch"`
	Grant      string `json:"grant"`
	Executor   string `json:"executor"`
	Claim      string `json:"claim"`
	RequestHex string `json:"request_hex"`
	CBORHex    string `json:"cbor_hex"`
}

// invalidVector is bytes that the decoder refuses.
type invalidVector struct {
	Name    string `json:"name"`
	CBORHex string `json:"cbor_hex"`
}

// entryVector is an audit entry as the events endpoint sends it, its
// canonical bytes and link hash.
type entryVector struct {
	Name    string          `json:"name"`
	Entry   audit.EntryJSON `json:"entry"`
	CBORHex string          `json:"cbor_hex"`
}

// wireVectors is the file's shape.
type wireVectors struct {
	Comment          string           `json:"comment"`
	Requests         []requestVector  `json:"requests"`
	Envelopes        []envelopeVector `json:"envelopes"`
	InvalidRequests  []invalidVector  `json:"invalid_requests"`
	InvalidEnvelopes []invalidVector  `json:"invalid_envelopes"`
	Entries          []entryVector    `json:"entries"`
}

func (v requestVector) request() *Request {
	r := &Request{V: WireVersion, Action: v.Action, Target: v.Target, ExpectRevision: v.ExpectRevision,
		Set: v.SetB64, ExpectValue: v.ExpectValueB64}
	if v.Patch != nil {
		r.Patch = []byte(*v.Patch)
	}
	return r
}

// buildWireVectors encodes every vector with this package's encoder, so
// that the file is exactly what Go produces.
func buildWireVectors(t *testing.T) wireVectors {
	t.Helper()
	u := func(n uint64) *uint64 { return &n }
	b := func(s string) *[]byte { v := []byte(s); return &v }
	s := func(v string) *string { return &v }
	long := strings.Repeat("x", 300)
	big := strings.Repeat("\x00\xff", 150)
	out := wireVectors{Comment: "Cross-language vectors of the canonical request, envelope and audit entry encodings " +
		"(docs/design.md §5), written by kvfence/wirevectors_test.go (go test ./kvfence -run TestWireVectors " +
		"-update-wire-vectors) and checked by it and by clients/python/tests/test_vectors.py. Byte fields are " +
		"padded standard base64 (_b64) or lowercase hex (_hex)."}
	out.Requests = []requestVector{
		{Name: "set", Action: "raise-retention", Target: "configmap/prod/backup-policy", SetB64: b(`{"data":{"retention_days":"45"}}`)},
		{Name: "set empty value", Action: "a", Target: "t", SetB64: b("")},
		{Name: "patch", Action: "raise-retention", Target: "configmap/prod/backup-policy",
			Patch: s(`[{"op":"test","path":"/data/retention_days","value":"30"},{"op":"replace","path":"/data/retention_days","value":"45"}]`)},
		{Name: "preconditions", Action: "a", Target: "t", SetB64: b("new"), ExpectRevision: u(1), ExpectValueB64: b("old")},
		{Name: "expect empty value", Action: "a", Target: "t", SetB64: b("x"), ExpectValueB64: b("")},
		{Name: "revision 23", Action: "a", Target: "t", SetB64: b("x"), ExpectRevision: u(23)},
		{Name: "revision 24", Action: "a", Target: "t", SetB64: b("x"), ExpectRevision: u(24)},
		{Name: "revision 255", Action: "a", Target: "t", SetB64: b("x"), ExpectRevision: u(255)},
		{Name: "revision 256", Action: "a", Target: "t", SetB64: b("x"), ExpectRevision: u(256)},
		{Name: "revision 65536", Action: "a", Target: "t", SetB64: b("x"), ExpectRevision: u(65536)},
		{Name: "revision 2^32", Action: "a", Target: "t", SetB64: b("x"), ExpectRevision: u(1 << 32)},
		{Name: "revision max", Action: "a", Target: "t", SetB64: b("x"), ExpectRevision: u(^uint64(0))},
		{Name: "every field with patch", Action: "act", Target: "tgt", Patch: s(`[{"op":"remove","path":"/a~1b/~0c"}]`),
			ExpectRevision: u(7), ExpectValueB64: b(`{"a/b":{"~c":1}}`)},
		{Name: "unicode names", Action: "réglage-日本", Target: "ns/ünï/κλειδί", SetB64: b("värde")},
		{Name: "long names and value", Action: long, Target: long[:24], SetB64: b(big)},
	}
	for i := range out.Requests {
		v := &out.Requests[i]
		raw, err := EncodeRequest(v.request())
		if err != nil {
			t.Fatalf("request %q: %v", v.Name, err)
		}
		sum := sha256.Sum256(raw)
		v.CBORHex, v.SHA256 = hex.EncodeToString(raw), hex.EncodeToString(sum[:])
	}
	req0, _ := hex.DecodeString(out.Requests[0].CBORHex)
	reqLong, _ := hex.DecodeString(out.Requests[len(out.Requests)-1].CBORHex)
	out.Envelopes = []envelopeVector{
		{Name: "envelope", Scope: "configmap/prod/backup-policy", Epoch: 1, Grant: "0123456789abcdef0123456789abcdef",
			Executor: "spiffe://example.org/agent/worker-a", Claim: "claim-a", RequestHex: hex.EncodeToString(req0)},
		{Name: "epoch 24", Scope: "s", Epoch: 24, Grant: "g", Executor: "e", Claim: "c", RequestHex: hex.EncodeToString(req0)},
		{Name: "epoch 65536", Scope: "s", Epoch: 65536, Grant: "g", Executor: "e", Claim: "c", RequestHex: hex.EncodeToString(req0)},
		{Name: "epoch max", Scope: "s", Epoch: ^uint64(0), Grant: "g", Executor: "e", Claim: "c", RequestHex: hex.EncodeToString(req0)},
		{Name: "long request", Scope: "ünï", Epoch: 3, Grant: "g", Executor: "unix:uid:1000", Claim: long,
			RequestHex: hex.EncodeToString(reqLong)},
	}
	for i := range out.Envelopes {
		v := &out.Envelopes[i]
		rq, _ := hex.DecodeString(v.RequestHex)
		raw, err := EncodeEnvelope(&Envelope{V: WireVersion, Scope: v.Scope, Epoch: v.Epoch, Grant: v.Grant,
			Executor: v.Executor, Claim: v.Claim, Request: rq})
		if err != nil {
			t.Fatalf("envelope %q: %v", v.Name, err)
		}
		v.CBORHex = hex.EncodeToString(raw)
	}
	req := func(replace ...kv) []byte {
		return cborMap(t, append([]kv{{"v", uint64(1)}, {"set", []byte("x")}, {"action", "a"}, {"target", "t"}}, replace...)...)
	}
	inv := func(name string, raw []byte) invalidVector {
		return invalidVector{Name: name, CBORHex: hex.EncodeToString(raw)}
	}
	valid := req()
	out.InvalidRequests = []invalidVector{
		inv("non-shortest version", cborMap(t, kv{"v", rawCBOR{0x18, 0x01}}, kv{"set", []byte("x")}, kv{"action", "a"}, kv{"target", "t"})),
		inv("keys out of order", cborMap(t, kv{"set", []byte("x")}, kv{"v", uint64(1)}, kv{"action", "a"}, kv{"target", "t"})),
		inv("duplicate key", cborMap(t, kv{"v", uint64(1)}, kv{"set", []byte("x")}, kv{"set", []byte("y")}, kv{"action", "a"}, kv{"target", "t"})),
		inv("indefinite-length map", append(append([]byte{0xbf}, valid[1:]...), 0xff)),
		inv("tagged value", cborMap(t, kv{"v", uint64(1)}, kv{"set", rawCBOR{0xd8, 0x18, 0x41, 'x'}}, kv{"action", "a"}, kv{"target", "t"})),
		inv("float version", cborMap(t, kv{"v", rawCBOR{0xf9, 0x3c, 0x00}}, kv{"set", []byte("x")}, kv{"action", "a"}, kv{"target", "t"})),
		inv("true version", cborMap(t, kv{"v", rawCBOR{0xf5}}, kv{"set", []byte("x")}, kv{"action", "a"}, kv{"target", "t"})),
		inv("version 2", cborMap(t, kv{"v", uint64(2)}, kv{"set", []byte("x")}, kv{"action", "a"}, kv{"target", "t"})),
		inv("unknown key", req(kv{"expect_valuee", []byte("x")})),
		inv("set and patch", cborMap(t, kv{"v", uint64(1)}, kv{"set", []byte("x")}, kv{"patch", []byte(`[]`)}, kv{"action", "a"}, kv{"target", "t"})),
		inv("neither set nor patch", cborMap(t, kv{"v", uint64(1)}, kv{"action", "a"}, kv{"target", "t"})),
		inv("expect_revision 0", req(kv{"expect_revision", uint64(0)})),
		inv("empty patch encoded", cborMap(t, kv{"v", uint64(1)}, kv{"set", []byte("x")}, kv{"patch", []byte{}}, kv{"action", "a"}, kv{"target", "t"})),
		inv("patch not an array", cborMap(t, kv{"v", uint64(1)}, kv{"patch", []byte(`{}`)}, kv{"action", "a"}, kv{"target", "t"})),
		inv("patch member twice", cborMap(t, kv{"v", uint64(1)}, kv{"patch", []byte(`[{"op":"remove","path":"/a","path":"/b"}]`)}, kv{"action", "a"}, kv{"target", "t"})),
		inv("patch extra member", cborMap(t, kv{"v", uint64(1)}, kv{"patch", []byte(`[{"op":"remove","path":"/a","value":1}]`)}, kv{"action", "a"}, kv{"target", "t"})),
		inv("patch bad pointer", cborMap(t, kv{"v", uint64(1)}, kv{"patch", []byte(`[{"op":"remove","path":"/a~2"}]`)}, kv{"action", "a"}, kv{"target", "t"})),
		inv("set as text", cborMap(t, kv{"v", uint64(1)}, kv{"set", "x"}, kv{"action", "a"}, kv{"target", "t"})),
		inv("control character in action", cborMap(t, kv{"v", uint64(1)}, kv{"set", []byte("x")}, kv{"action", "a\n"}, kv{"target", "t"})),
		inv("bidi control in target", cborMap(t, kv{"v", uint64(1)}, kv{"set", []byte("x")}, kv{"action", "a"}, kv{"target", "t\u202e"})),
		inv("trailing byte", append(append([]byte{}, valid...), 0x00)),
		inv("not a map", []byte{0x83, 0x01, 0x02, 0x03}),
		inv("empty", []byte{}),
	}
	env := func(replace map[string]any) []byte { return cborMap(t, envelopeEntries(replace)...) }
	out.InvalidEnvelopes = []invalidVector{
		inv("missing claim", env(map[string]any{"claim": nil})),
		inv("empty request", env(map[string]any{"request": []byte{}})),
		inv("negative epoch", env(map[string]any{"epoch": rawCBOR{0x20}})),
		inv("non-shortest epoch", env(map[string]any{"epoch": rawCBOR{0x19, 0x00, 0x01}})),
		inv("request as text", env(map[string]any{"request": "x"})),
		inv("bidi control in executor", env(map[string]any{"executor": "w\u2066"})),
		inv("C1 control in scope", env(map[string]any{"scope": "s\u0085"})),
		inv("name over 512 bytes", env(map[string]any{"grant": strings.Repeat("g", 513)})),
		inv("invalid UTF-8 in claim", env(map[string]any{"claim": rawCBOR{0x62, 0xc3, 0x28}})),
		inv("unknown key", cborMap(t, append(envelopeEntries(nil), kv{"zzz", uint64(1)})...)),
	}
	for _, e := range []struct {
		name string
		ent  audit.Entry
	}{
		{"submit entry", audit.Entry{Seq: 7, Prev: bytes.Repeat([]byte{0xab}, 32), At: 1764790016112345678, Kind: "submit",
			Scope: "configmap/prod/backup-policy", Epoch: 2, Grant: "0123456789abcdef0123456789abcdef",
			Executor: "spiffe://example.org/agent/worker-a", Action: "raise-retention", Outcome: "applied",
			RequestSHA256: bytes.Repeat([]byte{0x01}, 32), Target: "configmap/prod/backup-policy", RevBefore: 1, RevAfter: 2,
			ValueSHA256: bytes.Repeat([]byte{0x02}, 32)}},
		{"hold entry", audit.Entry{Seq: 1 << 20, Prev: make([]byte, 32), At: 1_000_000_000, Kind: "hold", Scope: "s", Epoch: 3,
			Reason: "worker-a stalled", Note: "ünï", Actor: "unix:uid:0"}},
		{"archive entry", audit.Entry{Seq: 30, Prev: bytes.Repeat([]byte{0xcd}, 32), At: 5, Kind: "archived", BaseSeq: 29,
			BaseHash: bytes.Repeat([]byte{0x03}, 32), BaseFence: bytes.Repeat([]byte{0x04}, 32), Decision: "d"}},
	} {
		raw, err := audit.EncodeEntry(&e.ent)
		if err != nil {
			t.Fatalf("entry %q: %v", e.name, err)
		}
		out.Entries = append(out.Entries, entryVector{Name: e.name, Entry: e.ent.JSON(audit.HashEntry(raw)), CBORHex: hex.EncodeToString(raw)})
	}
	return out
}

// TestWireVectors holds the vector file to this package's encoder and
// decoder: the file is exactly what the encoder writes, each valid vector
// decodes to the fields it was built from, and each invalid one is
// refused.
func TestWireVectors(t *testing.T) {
	vs := buildWireVectors(t)
	want, err := json.MarshalIndent(vs, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	if *updateVectors {
		if err := os.MkdirAll(filepath.Dir(wireVectorsPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(wireVectorsPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(wireVectorsPath)
	if err != nil {
		t.Fatalf("%v (run with -update-wire-vectors to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what the encoder writes now; if the change is meant, run go test ./kvfence -run TestWireVectors -update-wire-vectors", wireVectorsPath)
	}
	for _, v := range vs.Requests {
		raw, _ := hex.DecodeString(v.CBORHex)
		r, err := DecodeRequest(raw, 0)
		if err != nil {
			t.Fatalf("request %q: %v", v.Name, err)
		}
		r.patch = nil
		if wantR := v.request(); !reflect.DeepEqual(r, wantR) {
			t.Fatalf("request %q decodes to %+v, built from %+v", v.Name, r, wantR)
		}
	}
	for _, v := range vs.Envelopes {
		raw, _ := hex.DecodeString(v.CBORHex)
		e, err := DecodeEnvelope(raw, 0)
		if err != nil {
			t.Fatalf("envelope %q: %v", v.Name, err)
		}
		if e.Scope != v.Scope || e.Epoch != v.Epoch || e.Grant != v.Grant || e.Executor != v.Executor ||
			e.Claim != v.Claim || hex.EncodeToString(e.Request) != v.RequestHex {
			t.Fatalf("envelope %q decodes to %+v", v.Name, e)
		}
	}
	for _, v := range vs.InvalidRequests {
		raw, _ := hex.DecodeString(v.CBORHex)
		if _, err := DecodeRequest(raw, 0); !errors.Is(err, ErrMalformedRequest) {
			t.Fatalf("invalid request %q: DecodeRequest = %v, want ErrMalformedRequest", v.Name, err)
		}
	}
	for _, v := range vs.InvalidEnvelopes {
		raw, _ := hex.DecodeString(v.CBORHex)
		if _, err := DecodeEnvelope(raw, 0); !errors.Is(err, ErrMalformedEnvelope) {
			t.Fatalf("invalid envelope %q: DecodeEnvelope = %v, want ErrMalformedEnvelope", v.Name, err)
		}
	}
	for _, v := range vs.Entries {
		raw, _ := hex.DecodeString(v.CBORHex)
		h := audit.HashEntry(raw)
		if hex.EncodeToString(h[:]) != v.Entry.Hash {
			t.Fatalf("entry %q: hash %x, the vector says %s", v.Name, h, v.Entry.Hash)
		}
	}
}
