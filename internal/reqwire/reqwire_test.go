package reqwire_test

import (
	"errors"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/kvfence/kvfence/internal/reqwire"
	"github.com/kvfence/kvfence/kvfence"
)

func encode(t testing.TB, r *kvfence.Request) []byte {
	t.Helper()
	b, err := kvfence.EncodeRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func validRequests(t testing.TB) map[string][]byte {
	rev := uint64(3)
	set := []byte("v2")
	empty := []byte{}
	expect := []byte("v1")
	return map[string][]byte{
		"set":            encode(t, &kvfence.Request{V: 1, Action: "act-3", Target: "cm/a", Set: &set}),
		"set empty":      encode(t, &kvfence.Request{V: 1, Action: "act-empty", Target: "cm/a", Set: &empty}),
		"preconditions":  encode(t, &kvfence.Request{V: 1, Action: "act-4", Target: "cm/a", ExpectRevision: &rev, ExpectValue: &expect, Set: &set}),
		"patch":          encode(t, &kvfence.Request{V: 1, Action: "raise-retention", Target: "cm/b", Patch: []byte(`[{"op":"replace","path":"/days","value":45}]`)}),
		"unicode action": encode(t, &kvfence.Request{V: 1, Action: "aktion-ü", Target: "cm/b", Set: &set}),
	}
}

// Ensure that Action reads from every request the receiver encodes the
// action the receiver decodes.
func TestAction_AgreesWithReceiver(t *testing.T) {
	for name, b := range validRequests(t) {
		r, err := kvfence.DecodeRequest(b, reqwire.MaxSize)
		if err != nil {
			t.Fatalf("%s: receiver: %v", name, err)
		}
		got, err := reqwire.Action(b)
		if err != nil || got != r.Action {
			t.Errorf("%s: Action = %q, %v; the receiver reads %q", name, got, err, r.Action)
		}
	}
}

// Ensure that bytes the receiver refuses as a request are refused here too,
// whatever action they would seem to name, so that no approval binds a
// request whose action the two could read differently.
func TestAction_RefusesWhatTheReceiverRefuses(t *testing.T) {
	valid := validRequests(t)["set"]
	raw := func(m map[string]any) []byte {
		em, _ := cbor.CoreDetEncOptions().EncMode()
		b, err := em.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for name, b := range map[string][]byte{
		"empty":             nil,
		"not a map":         {0x83, 0x01, 0x02, 0x03},
		"trailing byte":     append(append([]byte{}, valid...), 0x00),
		"truncated":         valid[:len(valid)-1],
		"unknown key":       raw(map[string]any{"v": 1, "action": "a", "target": "t", "set": []byte("x"), "extra": 1}),
		"no action":         raw(map[string]any{"v": 1, "target": "t", "set": []byte("x")}),
		"empty action":      raw(map[string]any{"v": 1, "action": "", "target": "t", "set": []byte("x")}),
		"control in action": raw(map[string]any{"v": 1, "action": "a\x1b[2J", "target": "t", "set": []byte("x")}),
		"version 2":         raw(map[string]any{"v": 2, "action": "a", "target": "t", "set": []byte("x")}),
		"set and patch":     raw(map[string]any{"v": 1, "action": "a", "target": "t", "set": []byte("x"), "patch": []byte("[]")}),
		"no mutation":       raw(map[string]any{"v": 1, "action": "a", "target": "t"}),
		"expect 0":          raw(map[string]any{"v": 1, "action": "a", "target": "t", "set": []byte("x"), "expect_revision": 0}),
		// Two "action" keys: a lenient decoder could read either one.
		"duplicate action": {0xa5, 0x61, 'v', 0x01, 0x63, 's', 'e', 't', 0x41, 'x', 0x66, 'a', 'c', 't', 'i', 'o', 'n', 0x61, 'a',
			0x66, 'a', 'c', 't', 'i', 'o', 'n', 0x61, 'b', 0x66, 't', 'a', 'r', 'g', 'e', 't', 0x61, 't'},
		// Keys out of canonical order.
		"unsorted": {0xa4, 0x66, 'a', 'c', 't', 'i', 'o', 'n', 0x61, 'a', 0x61, 'v', 0x01, 0x63, 's', 'e', 't', 0x41, 'x',
			0x66, 't', 'a', 'r', 'g', 'e', 't', 0x61, 't'},
	} {
		if _, err := kvfence.DecodeRequest(b, reqwire.MaxSize); err == nil {
			t.Fatalf("%s: the receiver accepts it; the case is wrong", name)
		}
		if a, err := reqwire.Action(b); !errors.Is(err, reqwire.ErrMalformed) {
			t.Errorf("%s: Action = %q, %v; want ErrMalformed", name, a, err)
		}
	}
}

// FuzzAction holds Action to the receiver's decoder: whatever the receiver
// accepts, Action accepts with the same action.
func FuzzAction(f *testing.F) {
	for _, b := range validRequests(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := kvfence.DecodeRequest(b, reqwire.MaxSize)
		got, aerr := reqwire.Action(b)
		if err == nil && (aerr != nil || got != r.Action) {
			t.Fatalf("receiver reads action %q; Action = %q, %v", r.Action, got, aerr)
		}
	})
}
