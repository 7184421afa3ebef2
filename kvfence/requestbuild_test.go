package kvfence

import (
	"bytes"
	"testing"
)

// Ensure that the request constructors give the request a struct literal
// would, copy the caller's bytes, and encode canonically.
func TestRequestConstructors(t *testing.T) {
	value, patch, expect := []byte("v"), []byte(`[{"op":"remove","path":"/a"}]`), []byte("old")
	for _, tc := range []struct {
		name string
		got  *Request
		want *Request
	}{
		{"set", SetRequest("a", "t", value), &Request{V: 1, Action: "a", Target: "t", Set: ptr([]byte("v"))}},
		{"set with revision", SetRequest("a", "t", value).WithExpectRevision(4),
			&Request{V: 1, Action: "a", Target: "t", Set: ptr([]byte("v")), ExpectRevision: ptr(uint64(4))}},
		{"patch", PatchRequest("a", "t", patch), &Request{V: 1, Action: "a", Target: "t", Patch: []byte(`[{"op":"remove","path":"/a"}]`)}},
		{"patch with value", PatchRequest("a", "t", patch).WithExpectValue(expect),
			&Request{V: 1, Action: "a", Target: "t", Patch: []byte(`[{"op":"remove","path":"/a"}]`), ExpectValue: ptr([]byte("old"))}},
		{"empty value", SetRequest("a", "t", nil), &Request{V: 1, Action: "a", Target: "t", Set: ptr([]byte{})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EncodeRequest(tc.got)
			if err != nil {
				t.Fatal(err)
			}
			want, err := EncodeRequest(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			// The caller's slices change after the call; the request must not.
			for _, b := range [][]byte{value, patch, expect} {
				b[0] ^= 0xff
				defer func() { b[0] ^= 0xff }()
			}
			again, err := EncodeRequest(tc.got)
			if err != nil || !bytes.Equal(got, want) || !bytes.Equal(again, want) {
				t.Fatalf("encoded %x, after the caller's change %x (%v), want %x", got, again, err, want)
			}
		})
	}
}
