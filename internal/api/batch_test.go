package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Ensure that DecodeBatch reads back what AppendBatch writes, at every
// length where a CBOR head grows, with BatchSize the encoding's length.
func TestBatch_RoundTrip(t *testing.T) {
	for _, envs := range [][][]byte{
		{{}},
		{[]byte("a")},
		{bytes.Repeat([]byte{1}, 23), bytes.Repeat([]byte{2}, 24)},
		{bytes.Repeat([]byte{3}, 255), bytes.Repeat([]byte{4}, 256), bytes.Repeat([]byte{5}, 65535), bytes.Repeat([]byte{6}, 65536)},
		make([][]byte, 24),
		make([][]byte, 256),
	} {
		b := AppendBatch([]byte("x"), envs)[1:]
		if len(b) != BatchSize(envs) {
			t.Errorf("%d envelopes: BatchSize %d, encoding %d bytes", len(envs), BatchSize(envs), len(b))
		}
		got, err := DecodeBatch(b, 256)
		if err != nil {
			t.Fatalf("%d envelopes: %v", len(envs), err)
		}
		if len(got) != len(envs) {
			t.Fatalf("%d envelopes decoded as %d", len(envs), len(got))
		}
		for i := range envs {
			if !bytes.Equal(got[i], envs[i]) {
				t.Fatalf("envelope %d of %d differs", i, len(envs))
			}
		}
	}
}

// Ensure that DecodeBatch refuses every body that is not exactly one
// encoding of one to maxItems byte strings, each with the error that
// says why.
func TestDecodeBatch_Refused(t *testing.T) {
	one := AppendBatch(nil, [][]byte{[]byte("ab")})
	for _, tc := range []struct {
		name string
		in   []byte
		want error
		msg  string
	}{
		{"nothing", nil, ErrBatch, "missing"},
		{"empty array", []byte{0x80}, ErrBatch, "empty"},
		{"a map", []byte{0xa1, 0x41, 'a', 0x41, 'b'}, ErrBatch, "major type 5"},
		{"a byte string", []byte{0x42, 'a', 'b'}, ErrBatch, "major type 2"},
		{"a text string in it", []byte{0x81, 0x62, 'a', 'b'}, ErrBatch, "envelope 0 is CBOR major type 3"},
		{"an integer in it", []byte{0x81, 0x01}, ErrBatch, "major type 0"},
		{"indefinite array", []byte{0x9f, 0x42, 'a', 'b', 0xff}, ErrBatch, "indefinite"},
		{"indefinite byte string", []byte{0x81, 0x5f, 0x42, 'a', 'b', 0xff}, ErrBatch, "indefinite"},
		{"reserved length", []byte{0x81, 0x5c}, ErrBatch, "reserved"},
		{"array head not shortest", append([]byte{0x98, 0x01}, one[1:]...), ErrBatch, "shortest"},
		{"item head not shortest", []byte{0x81, 0x58, 0x02, 'a', 'b'}, ErrBatch, "shortest"},
		{"item head of 8 bytes", []byte{0x81, 0x5b, 0, 0, 0, 0, 0, 0, 0, 2, 'a', 'b'}, ErrBatch, "shortest"},
		{"head cut short", []byte{0x81, 0x59, 0x01}, ErrBatch, "cut short"},
		{"item cut short", []byte{0x81, 0x43, 'a', 'b'}, ErrBatch, "3 bytes, 2 remain"},
		{"fewer items than announced", []byte{0x82, 0x42, 'a', 'b'}, ErrBatch, "envelope 1 is missing"},
		{"more items announced than bytes", []byte{0x9a, 0, 1, 0, 0, 0x40}, ErrBatchTooMany, "65536 envelopes"},
		{"a huge count", []byte{0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ErrBatchTooMany, "over the limit"},
		{"bytes after it", append(append([]byte(nil), one...), 0x00), ErrBatch, "1 bytes after"},
		{"two arrays", append(append([]byte(nil), one...), one...), ErrBatch, "bytes after"},
		{"over maxItems", AppendBatch(nil, make([][]byte, 4)), ErrBatchTooMany, "4 envelopes, over the limit of 3"},
	} {
		got, err := DecodeBatch(tc.in, 3)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) || got != nil {
			t.Errorf("%s: DecodeBatch(% x) = %d envelopes, %v; want %v saying %q", tc.name, tc.in, len(got), err, tc.want, tc.msg)
		}
	}
	// Within the limit, the announced count is still checked against the
	// bytes before anything is allocated for it.
	if _, err := DecodeBatch([]byte{0x9a, 0, 1, 0, 0, 0x40}, 1<<20); !errors.Is(err, ErrBatch) || !strings.Contains(err.Error(), "announced") {
		t.Errorf("a count over the body's length: %v", err)
	}
}

// Ensure that whatever DecodeBatch accepts is the one encoding of what it
// returns, and that it never returns more than maxItems envelopes.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(AppendBatch(nil, [][]byte{[]byte("ab"), {}, bytes.Repeat([]byte{7}, 300)}), 4)
	f.Add([]byte{0x80}, 1)
	f.Add([]byte{0x98, 0x01, 0x40}, 2)
	f.Add([]byte{0x9f, 0x40, 0xff}, 2)
	f.Add([]byte{0x81, 0x5a, 0, 0, 0, 1, 0}, 2)
	f.Fuzz(func(t *testing.T, b []byte, maxItems int) {
		if maxItems < 1 || maxItems > 1<<16 {
			maxItems = 3
		}
		envs, err := DecodeBatch(b, maxItems)
		if err != nil {
			if envs != nil || !(errors.Is(err, ErrBatch) || errors.Is(err, ErrBatchTooMany)) {
				t.Fatalf("DecodeBatch(% x) = %d envelopes, %v", b, len(envs), err)
			}
			return
		}
		if len(envs) == 0 || len(envs) > maxItems {
			t.Fatalf("DecodeBatch(% x) returned %d envelopes with limit %d", b, len(envs), maxItems)
		}
		if again := AppendBatch(nil, envs); !bytes.Equal(again, b) {
			t.Fatalf("DecodeBatch accepted % x, whose envelopes encode as % x", b, again)
		}
	})
}

// batchOf builds a Batch answer with the hand encoders.
func batchOf(items []BatchResult) []byte {
	b := AppendBatchOpen(nil)
	for i, it := range items {
		if it.Error != nil {
			b = AppendBatchError(b, i, it.Status, *it.Error)
		} else {
			b = AppendBatchDecision(b, i, it.Status, it.Result)
		}
	}
	return AppendBatchClose(b)
}

// encodeStdAny is what the reflective encoder writes for v.
func encodeStdAny(t testing.TB, v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Ensure that the hand encoders of a batch answer write exactly what
// encoding/json writes for the Batch, and that ParseBatchJSON reads back
// an answer of decisions and leaves any other to encoding/json.
func TestBatchAnswer_Encoding(t *testing.T) {
	applied := &Submit{Outcome: "applied", Scope: "s", Epoch: 2, Grant: "g", Action: "a", Target: "t", Revision: 3, AuditSeq: 10}
	denied := &Submit{Outcome: "denied", Reason: "stale_or_unknown_epoch", Detail: "envelope epoch 1, \"scope\" epoch 2\n",
		Scope: "s", Epoch: 1, AuditSeq: 11, ReceiptSeq: 10}
	plain := &Submit{Outcome: "denied", Reason: "executor_mismatch", Detail: "é漢字", Scope: "s", Epoch: 1, AuditSeq: 12}
	tooLarge := &ErrorBody{Code: CodeTooLarge, Message: "envelope 2 is 70000 bytes, \"over\" <the> limit\u2028"}
	for _, tc := range []struct {
		name  string
		items []BatchResult
		fast  bool
	}{
		{"one decision", []BatchResult{{Status: 200, Result: applied}}, true},
		{"decisions", []BatchResult{{Status: 200, Result: applied}, {Status: 403, Result: plain}, {Status: 200, Result: applied}}, true},
		{"an escaped detail", []BatchResult{{Status: 200, Result: applied}, {Status: 403, Result: denied}}, false},
		{"an error", []BatchResult{{Status: 200, Result: applied}, {Status: 413, Error: tooLarge}}, false},
		{"errors only", []BatchResult{{Status: 503, Error: &ErrorBody{Code: "storage_busy", Message: "busy"}}}, false},
	} {
		got, want := batchOf(tc.items), encodeStdAny(t, Batch{Results: tc.items})
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, want)
			continue
		}
		var slow Batch
		if err := DecodeAnswer(got, &slow); err != nil || !reflect.DeepEqual(slow.Results, tc.items) {
			t.Errorf("%s: DecodeAnswer = %+v, %v", tc.name, slow, err)
		}
		fast, ok := ParseBatchJSON(got)
		if ok != tc.fast || (ok && !reflect.DeepEqual(fast, slow)) {
			t.Errorf("%s: ParseBatchJSON = %+v, %v; want %v and what DecodeAnswer read", tc.name, fast, ok, tc.fast)
		}
	}
}

// Ensure that ParseBatchJSON refuses answers that are not exactly what
// the hand encoders write.
func TestParseBatchJSON_Refused(t *testing.T) {
	s := &Submit{Outcome: "applied", Scope: "s", Epoch: 2, AuditSeq: 10}
	b := string(batchOf([]BatchResult{{Status: 200, Result: s}, {Status: 403, Result: s}}))
	for _, in := range []string{
		strings.Replace(b, `"status":403`, `"status":404`, 1),
		strings.Replace(b, `"status":200`, `"status":0200`, 1),
		strings.Replace(b, `"status":200`, `"status": 200`, 1),
		strings.Replace(b, `},{`, `}{`, 1),
		strings.Replace(b, `},{`, `},,{`, 1),
		strings.Replace(b, `"results"`, `"Results"`, 1),
		strings.Replace(b, `"result"`, `"answer"`, 1),
		strings.TrimSuffix(b, "\n"),
		b + " ",
		`{"results":[]}` + "\n" + "x",
		`{"results":[` + "\n",
	} {
		if got, ok := ParseBatchJSON([]byte(in)); ok {
			t.Errorf("ParseBatchJSON(%q) = %+v, true; want false", in, got)
		}
	}
}

// Ensure that whatever ParseBatchJSON accepts, encoding/json decodes to
// the same answer.
func FuzzParseBatchJSON(f *testing.F) {
	s := &Submit{Outcome: "applied", Scope: "s", Epoch: 1, Revision: 2, AuditSeq: 3}
	f.Add(batchOf([]BatchResult{{Status: 200, Result: s}}))
	f.Add(batchOf([]BatchResult{{Status: 200, Result: s}, {Status: 403, Result: &Submit{Outcome: "denied", ReceiptSeq: 4}}}))
	f.Add([]byte(`{"results":[]}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := ParseBatchJSON(b)
		if !ok {
			return
		}
		var want Batch
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("ParseBatchJSON accepted %q, which encoding/json refuses: %v", b, err)
		}
		if !reflect.DeepEqual(got.Results, want.Results) && (len(got.Results) != 0 || len(want.Results) != 0) {
			t.Fatalf("ParseBatchJSON(%q) = %+v, encoding/json %+v", b, got, want)
		}
	})
}
