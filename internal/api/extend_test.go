package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// Ensure that a grant extension request that DecodeStrict accepts encodes
// back to a request that decodes the same.
func FuzzGrantExtendRequest(f *testing.F) {
	f.Add([]byte(`{"grant":"0123456789abcdef0123456789abcdef","ttl":"30m"}`))
	f.Add([]byte(`{"grant":"g","ttl":"-1h","Grant":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var req GrantExtendRequest
		if err := DecodeStrict(b, &req); err != nil {
			return
		}
		raw, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		var back GrantExtendRequest
		if err := DecodeStrict(raw, &back); err != nil || back != req {
			t.Fatalf("%s reads back as %+v (%v), not %+v", raw, back, err, req)
		}
	})
}

// Ensure that a grant extension answer that decodes and converts encodes
// back to the same grant, so that the client holds what the receiver said.
func FuzzGrantExtendAnswer(f *testing.F) {
	f.Add([]byte(`{"grant":"g","scope":"s","epoch":1,"executor":"w","claim":"c","action":"a","request_sha256":"` +
		strings.Repeat("ab", 32) + `","not_before":"2026-12-03T17:00:00Z","not_after":"2026-12-03T18:00:00.5Z",` +
		`"decision":"","audit_seq":4,"created_at":"2026-12-03T17:00:00Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ans GrantExtend
		if err := DecodeAnswer(b, &ans); err != nil {
			return
		}
		g, err := ans.ToGrant()
		if err != nil {
			return
		}
		back, err := GrantExtendOf(g).ToGrant()
		if err != nil || !reflect.DeepEqual(back, g) {
			t.Fatalf("%+v reads back as %+v, %v", g, back, err)
		}
	})
}
