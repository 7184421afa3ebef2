package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/kvfence"
)

// encodeStd is what the reflective encoder writes for s, the bytes
// AppendJSON must reproduce.
func encodeStd(t testing.TB, s Submit) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Ensure that AppendJSON writes exactly what encoding/json writes, for
// every ASCII byte, invalid UTF-8, the line and paragraph separators that
// encoding/json escapes, HTML characters it leaves alone, and extreme
// numbers.
func TestSubmitAppendJSON(t *testing.T) {
	var ascii strings.Builder
	for c := range 0x80 {
		ascii.WriteByte(byte(c))
	}
	strs := []string{"", "applied", ascii.String(), "a\xffb", "\xc3", "\xed\xa0\x80", "x\u2028y\u2029z",
		"<script>&amp;</script>", "é漢字🙂", `"\`, "\x00\x1f\x7f", strings.Repeat("\u2028\xff\"", 50)}
	for _, s := range strs {
		for _, n := range []uint64{0, 1, 1 << 63, ^uint64(0)} {
			in := Submit{Outcome: s, Reason: s, Detail: s, Scope: s, Epoch: n, Grant: s, Action: s, Target: s,
				Revision: n + 1, AuditSeq: n ^ 7, ReceiptSeq: n, Dispatch: s, DispatchID: s, Version: s}
			want := encodeStd(t, in)
			if got := in.AppendJSON([]byte("prefix")); !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Errorf("AppendJSON(%q, %d):\n got %q\nwant prefix%q", s, n, got, want)
			}
		}
	}
}

// Ensure that AppendJSON agrees with encoding/json on any strings.
func FuzzSubmitAppendJSON(f *testing.F) {
	f.Add("denied", "executor_mismatch", "a \"quoted\"\n detail \xff", uint64(3))
	f.Add("applied", "", "\u2028", uint64(0))
	f.Fuzz(func(t *testing.T, outcome, reason, detail string, n uint64) {
		in := Submit{Outcome: outcome, Reason: reason, Detail: detail, Scope: detail + outcome, Epoch: n,
			Grant: reason, Action: outcome, Target: detail, Revision: n * 3, AuditSeq: ^n, ReceiptSeq: n / 2, Dispatch: reason, Version: detail}
		if got, want := in.AppendJSON(nil), encodeStd(t, in); !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON:\n got %q\nwant %q", got, want)
		}
	})
}

// Ensure that ParseSubmitJSON reads back what AppendJSON writes for
// strings that need no escaping, and refuses escaped or altered answers,
// which the client then gives to encoding/json.
func TestParseSubmitJSON(t *testing.T) {
	in := Submit{Outcome: "denied", Reason: "executor_mismatch", Detail: "the grant names spiffe://x/y; é漢字",
		Scope: "s", Epoch: 7, Grant: "g", Action: "a", Target: "t", Revision: ^uint64(0), AuditSeq: 0}
	b := in.AppendJSON(nil)
	if got, ok := ParseSubmitJSON(b); !ok || got != in {
		t.Fatalf("ParseSubmitJSON(%q) = %+v, %v; want %+v, true", b, got, ok, in)
	}
	refused := []string{
		strings.Replace(string(b), `"s"`, `"\u0073"`, 1),                                // an escape
		strings.Replace(string(b), `"epoch":7`, `"epoch":07`, 1),                        // a leading zero
		strings.Replace(string(b), `"epoch":7`, `"epoch": 7`, 1),                        // white space
		strings.Replace(string(b), `:18446744073709551615`, `:18446744073709551616`, 1), // overflow
		strings.Replace(string(b), `"t"`, "\"t\xff\"", 1),                               // invalid UTF-8, which encoding/json replaces
		strings.Replace(string(b), `"t"`, "\"t\x01\"", 1),                               // a control character
		strings.TrimSuffix(string(b), "\n"),                                             // not the whole answer
		string(b) + "{}",                                                                // more after it
		strings.Replace(string(b), `"reason"`, `"Reason"`, 1),                           // another key
		`{"error":{"code":"internal","message":"x"}}` + "\n",
		strings.Replace(string(b), "}\n", `,"receipt_seq":0}`+"\n", 1),  // a 0 that AppendJSON omits
		strings.Replace(string(b), "}\n", `,"receipt_seq":}`+"\n", 1),   // no number
		strings.Replace(string(b), "}\n", `,"receipt_seq":01}`+"\n", 1), // a leading zero
	}
	for _, s := range refused {
		if got, ok := ParseSubmitJSON([]byte(s)); ok {
			t.Errorf("ParseSubmitJSON(%q) = %+v, true; want false", s, got)
		}
	}
}

// Ensure that a denial's receipt_seq crosses the wire: written when set,
// omitted when 0, read back by both readers and carried into the result.
func TestSubmit_ReceiptSeq(t *testing.T) {
	for _, n := range []uint64{0, 1, 42, ^uint64(0)} {
		res := kvfence.Result{Outcome: kvfence.Denied, Reason: "stale_or_unknown_epoch", Scope: "s", Epoch: 3,
			AuditSeq: 9, ReceiptSeq: n}
		in := SubmitOf(res)
		b := in.AppendJSON(nil)
		if has := bytes.Contains(b, []byte(`"receipt_seq"`)); has != (n != 0) {
			t.Fatalf("receipt_seq %d: answer %s", n, b)
		}
		fast, ok := ParseSubmitJSON(b)
		if !ok || fast != in {
			t.Fatalf("ParseSubmitJSON(%s) = %+v, %v", b, fast, ok)
		}
		var slow Submit
		if err := DecodeAnswer(b, &slow); err != nil || slow != in {
			t.Fatalf("DecodeAnswer(%s) = %+v, %v", b, slow, err)
		}
		back, err := slow.Result()
		if err != nil || back != res {
			t.Fatalf("Result = %+v, %v; want %+v", back, err, res)
		}
	}
}

// Ensure that whatever ParseSubmitJSON accepts, encoding/json decodes to
// the same answer.
func FuzzParseSubmitJSON(f *testing.F) {
	f.Add(Submit{Outcome: "applied", Scope: "s", Epoch: 1, Revision: 2, AuditSeq: 3}.appendForFuzz())
	f.Add([]byte(`{"outcome":"a","reason":"","detail":"","scope":"","epoch":0,"grant":"","action":"","target":"","revision":0,"audit_seq":0}` + "\n"))
	f.Add(Submit{Outcome: "denied", Scope: "s", Epoch: 1, AuditSeq: 3, ReceiptSeq: 2}.appendForFuzz())
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := ParseSubmitJSON(b)
		if !ok {
			return
		}
		var want Submit
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("ParseSubmitJSON accepted %q, which encoding/json refuses: %v", b, err)
		}
		if got != want {
			t.Fatalf("ParseSubmitJSON(%q) = %+v, encoding/json %+v", b, got, want)
		}
	})
}

func (s Submit) appendForFuzz() []byte { return s.AppendJSON(nil) }
