package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// Ensure that the hand-written encoder produces exactly RFC 8949 core
// deterministic encoding, as an independent encoder does it.
func TestEncodeEntry_CoreDeterministic(t *testing.T) {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := testChain(t, 64)
	full := &Entry{Seq: 1<<32 + 5, Prev: make([]byte, 32), At: -1 << 40, Kind: "k", Scope: "s", Epoch: 1 << 20,
		Grant: "g", Executor: "x", Action: "a", Outcome: "o", Reason: "r", RequestSHA256: make([]byte, 32),
		Target: "t", RevBefore: 255, RevAfter: 256, ValueSHA256: make([]byte, 32), Decision: "d",
		Note: strings.Repeat("é", 200), Actor: "unix:uid:0"}
	fullRaw, err := EncodeEntry(full)
	if err != nil {
		t.Fatal(err)
	}
	raws := append([][]byte{fullRaw}, rawsOf(recs)...)
	// Every head size, for lengths and for integers, positive and negative.
	for _, n := range []int{0, 1, 23, 24, 255, 256, 65000} {
		for _, v := range []uint64{23, 24, 1<<8 - 1, 1 << 8, 1<<16 - 1, 1 << 16, 1<<32 - 1, 1 << 32, 1<<63 - 1} {
			e := &Entry{Seq: v, Prev: make([]byte, 32), At: -int64(v), Kind: "k", Note: strings.Repeat("n", n), RevAfter: v}
			raw, err := EncodeEntry(e)
			if err != nil {
				t.Fatal(err)
			}
			raws = append(raws, raw)
		}
	}
	for i, raw := range raws {
		e, err := DecodeEntry(raw)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if n := entrySize(&e); n != len(raw) {
			t.Fatalf("entry %d: entrySize %d, encoding is %d bytes", i, n, len(raw))
		}
		want, err := em.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(raw, want) {
			t.Fatalf("entry %d:\n got %x\nwant %x", i, raw, want)
		}
	}
}

func rawsOf(recs []record) [][]byte {
	out := make([][]byte, len(recs))
	for i, r := range recs {
		out[i] = r.v
	}
	return out
}

// Ensure that the smallest entry is spelled exactly as the package
// documentation shows it.
func TestEncodeEntry_DocExample(t *testing.T) {
	raw, err := EncodeEntry(&Entry{Seq: 1, Prev: make([]byte, 32), Kind: "init"})
	if err != nil {
		t.Fatal(err)
	}
	want := "a4" + "626174" + "00" + "63736571" + "01" + "646b696e64" + "64696e6974" +
		"6470726576" + "5820" + strings.Repeat("00", 32)
	if got := hex.EncodeToString(raw); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// Ensure that EncodeEntry refuses every entry that DecodeEntry would refuse.
func TestEncodeEntry_Refuses(t *testing.T) {
	ok := func() *Entry { return &Entry{Seq: 1, Prev: make([]byte, 32), Kind: "k"} }
	for _, tc := range []struct {
		name   string
		edit   func(*Entry)
		append bool // Append refuses it too (Append sets seq and prev itself)
	}{
		{"seq 0", func(e *Entry) { e.Seq = 0 }, false},
		{"no kind", func(e *Entry) { e.Kind = "" }, true},
		{"short prev", func(e *Entry) { e.Prev = e.Prev[:31] }, false},
		{"nil prev", func(e *Entry) { e.Prev = nil }, false},
		{"short request digest", func(e *Entry) { e.RequestSHA256 = []byte{1} }, true},
		{"long value digest", func(e *Entry) { e.ValueSHA256 = make([]byte, 33) }, true},
		{"invalid UTF-8", func(e *Entry) { e.Note = "\xff" }, true},
		{"oversize", func(e *Entry) { e.Note = strings.Repeat("x", MaxEntrySize) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := ok()
			tc.edit(e)
			if _, err := EncodeEntry(e); !errors.Is(err, ErrBadEntry) {
				t.Fatalf("EncodeEntry: %v, want ErrBadEntry", err)
			}
			if !tc.append {
				return
			}
			c := NewChain(Head{Seq: 7})
			if _, _, err := c.Append(e); !errors.Is(err, ErrBadEntry) || c.Head() != (Head{Seq: 7}) {
				t.Fatalf("Append: %v, head %v", err, c.Head())
			}
		})
	}
}

// Ensure that DecodeEntry accepts only the canonical encoding.
func TestDecodeEntry_Rejects(t *testing.T) {
	good, err := EncodeEntry(&Entry{Seq: 1, Prev: make([]byte, 32), Kind: "init"})
	if err != nil {
		t.Fatal(err)
	}
	prev := "5820" + strings.Repeat("00", 32)
	for _, tc := range []struct{ name, hex, why string }{
		{"trailing byte", hex.EncodeToString(good) + "00", "extraneous data"},
		{"non-shortest seq", "a4626174006373657118016" + "46b696e6464696e69746470726576" + prev, "canonical"},
		{"indefinite map", "bf626174006373657101646b696e6464696e69746470726576" + prev + "ff", "indefinite-length"},
		{"unsorted keys", "a4637365710162617400646b696e6464696e69746470726576" + prev, "canonical"},
		{"duplicate key", "a5626174006373657101646b696e6464696e6974646b696e6464696e69746470726576" + prev, "duplicate map key"},
		{"unknown key", "a5626174006373657101646b696e6464696e697463666f6f006470726576" + prev, "unknown field"},
		{"empty optional field", "a5626174006373657101646b696e6464696e6974646e6f7465606470726576" + prev, "canonical"},
		{"zero optional uint", "a5626174006373657101646b696e6464696e69746470726576" + prev + "6565706f636800", "canonical"},
		{"missing prev", "a3626174006373657101646b696e6464696e6974", "prev is 0 bytes"},
		{"short prev", "a4626174006373657101646b696e6464696e697464707265765801" + "00", "prev is 1 bytes"},
		{"prev as text", "a4626174006373657101646b696e6464696e69746470726576" + "7820" + strings.Repeat("30", 32), "cannot unmarshal UTF-8 text"},
		{"float at", "a4626174f90000" + "6373657101646b696e6464696e69746470726576" + prev, "cannot unmarshal"},
		{"tagged seq", "a46261740063736571c101646b696e6464696e69746470726576" + prev, "tag"},
		{"invalid UTF-8 kind", "a4626174006373657101646b696e6464ff6e69746470726576" + prev, "invalid UTF-8"},
		{"not a map", "80", "cannot unmarshal array"},
		{"empty", "", "EOF"},
		{"oversize", hex.EncodeToString(make([]byte, MaxEntrySize+1)), "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := hex.DecodeString(tc.hex)
			if err != nil {
				t.Fatal(err)
			}
			if e, err := DecodeEntry(raw); !errors.Is(err, ErrBadEntry) {
				t.Fatalf("DecodeEntry = %+v, %v; want ErrBadEntry", e, err)
			} else if tc.why != "" && !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("DecodeEntry: %v; want it refused for %q", err, tc.why)
			}
		})
	}
}

// Ensure that a decoded entry re-encodes to the same bytes and the same hash.
func TestDecodeEntry_RoundTrip(t *testing.T) {
	recs, _ := testChain(t, 8)
	for _, r := range recs {
		e, err := DecodeEntry(r.v)
		if err != nil {
			t.Fatal(err)
		}
		again, err := EncodeEntry(&e)
		if err != nil || !bytes.Equal(again, r.v) {
			t.Fatalf("re-encoding: %v\n got %x\nwant %x", err, again, r.v)
		}
	}
}

// Ensure that Append links each entry to the hash of the one before, and
// leaves the returned bytes and e.Prev independent of later appends.
func TestChain_Append(t *testing.T) {
	c := NewChain(Head{})
	var prevHash Hash
	var kept []*Entry
	var raws [][]byte
	for i := uint64(1); i <= 3; i++ {
		e := testEntry(i)
		raw, h, err := c.Append(e)
		if err != nil {
			t.Fatal(err)
		}
		if e.Seq != i || !bytes.Equal(e.Prev, prevHash[:]) || h != HashEntry(raw) || c.Head() != (Head{i, h}) {
			t.Fatalf("entry %d: seq %d prev %x hash %x head %v", i, e.Seq, e.Prev, h, c.Head())
		}
		if cap(raw) != len(raw) || cap(e.Prev) != HashSize {
			t.Fatalf("entry %d: raw or prev has spare capacity that an append could clobber", i)
		}
		kept, raws, prevHash = append(kept, e), append(raws, bytes.Clone(raw)), h
	}
	recs := make([]record, len(kept))
	for i, e := range kept {
		again, err := EncodeEntry(e)
		if err != nil || !bytes.Equal(again, raws[i]) {
			t.Fatalf("entry %d changed after later appends: %v", i+1, err)
		}
		recs[i] = record{SeqKey(e.Seq), raws[i]}
	}
	verifyChain(t, recs, memWith(t, checkpointOf(t, receiverKey, testReceiver, recs, 3)))
}

// Ensure that the hash is domain-separated, not the plain SHA-256, and that
// keys sort in seq order.
func TestHashEntry(t *testing.T) {
	if got, want := HashEntry([]byte("x")), sha256.Sum256([]byte("kvfence/audit/v1\nx")); got != want {
		t.Fatalf("HashEntry = %x, want %x", got, want)
	}
	if hex.EncodeToString(SeqKey(0x0102)) != "0000000000000102" {
		t.Fatalf("SeqKey is not 8-byte big-endian")
	}
}

func BenchmarkChainAppend(b *testing.B) {
	c := NewChain(Head{})
	e := testEntry(4)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.Append(e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeEntry(b *testing.B) {
	raw, err := EncodeEntry(&Entry{Seq: 4, Prev: make([]byte, 32), Kind: "submit"})
	if err != nil {
		b.Fatal(err)
	}
	recs, _ := testChain(b, 4)
	raw = recs[3].v
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeEntry(raw); err != nil {
			b.Fatal(err)
		}
	}
}
