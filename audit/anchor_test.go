package audit

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Ensure that the anchor format round-trips and reads as documented.
func TestMarshalAnchor(t *testing.T) {
	sc, err := Sign(receiverKey, testCheckpoint())
	if err != nil {
		t.Fatal(err)
	}
	text, err := sc.MarshalAnchor()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(text), "\n")
	want := []string{"kvfence checkpoint v3", "receiver receiver-1", "seq 42",
		"head dead000000000000000000000000000000000000000000000000000000000000",
		"root 7ee0000000000000000000000000000000000000000000000000000000000000",
		"state 57a7000000000000000000000000000000000000000000000000000000000000",
		"epoch_high_water 7", "at 2026-01-01T00:00:00.123456789Z", "key " + KeyFingerprint(pubOf(receiverKey)).String()}
	for i, w := range want {
		if lines[i] != w {
			t.Errorf("line %d = %q, want %q", i+1, lines[i], w)
		}
	}
	if len(lines) != 11 || !strings.HasPrefix(lines[9], "sig ") || lines[10] != "" {
		t.Fatalf("anchor has %d lines:\n%s", len(lines), text)
	}
	got, err := ParseAnchor(text)
	if err != nil || got != sc {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
}

// Ensure that every single-byte change of an anchor file is refused by the
// parser or by the signature check.
func TestParseAnchor_Mangling(t *testing.T) {
	for _, c := range []Checkpoint{testCheckpoint(), testCheckpointAdmission()} {
		sc, _ := Sign(receiverKey, c)
		text, _ := sc.MarshalAnchor()
		mangle(text, func(i int, m []byte) {
			got, err := ParseAnchor(m)
			if err == nil {
				err = got.Verify(pubOf(receiverKey))
			}
			if err == nil {
				t.Fatalf("byte %d = %#x: accepted:\n%s", i, m[i], m)
			}
		})
	}
}

// Ensure that ParseAnchor accepts one spelling per checkpoint only.
func TestParseAnchor_Rejects(t *testing.T) {
	sc, _ := Sign(receiverKey, testCheckpoint())
	good, _ := sc.MarshalAnchor()
	edit := func(old, new string) []byte {
		if !bytes.Contains(good, []byte(old)) {
			t.Fatalf("anchor lacks %q", old)
		}
		return bytes.Replace(good, []byte(old), []byte(new), 1)
	}
	head := "dead000000000000000000000000000000000000000000000000000000000000"
	for _, tc := range []struct {
		name string
		text []byte
	}{
		{"empty", nil},
		{"other version", edit("checkpoint v3", "checkpoint v4")},
		{"no root line", edit("root 7ee0000000000000000000000000000000000000000000000000000000000000\n", "")},
		{"zero root", edit("root 7ee0", "root 0000")},
		{"short root", edit("root 7ee0", "root ee0")},
		{"root after state", edit("root 7ee0000000000000000000000000000000000000000000000000000000000000\nstate 57a7000000000000000000000000000000000000000000000000000000000000",
			"state 57a7000000000000000000000000000000000000000000000000000000000000\nroot 7ee0000000000000000000000000000000000000000000000000000000000000")},
		{"no state line", edit("state 57a7000000000000000000000000000000000000000000000000000000000000\n", "")},
		{"short state", edit("state 57a7", "state 7a7")},
		{"leading zero", edit("seq 42", "seq 042")},
		{"plus sign", edit("seq 42", "seq +42")},
		{"seq 0", edit("seq 42", "seq 0")},
		{"seq overflow", edit("seq 42", "seq 18446744073709551616")},
		{"upper-case hex", edit(head, strings.ToUpper(head))},
		{"short head", edit(head, head[2:])},
		{"time zone", edit("00:00:00.123456789Z", "01:00:00.123456789+01:00")},
		{"trailing zeros", edit(".123456789Z", ".1234567890Z")},
		{"time beyond int64", edit("2026-", "2263-")},
		{"no fingerprint prefix", edit("key SHA256:", "key ")},
		{"padded fingerprint", edit("key SHA256:"+KeyFingerprint(pubOf(receiverKey)).String()[7:], "key "+KeyFingerprint(pubOf(receiverKey)).String()+"=")},
		{"CRLF", bytes.ReplaceAll(good, []byte("\n"), []byte("\r\n"))},
		{"missing final newline", good[:len(good)-1]},
		{"extra line", append(bytes.Clone(good), "note x\n"...)},
		{"blank line", append(bytes.Clone(good), '\n')},
		{"swapped lines", edit("seq 42\nhead "+head, "head "+head+"\nseq 42")},
		{"two spaces", edit("seq 42", "seq  42")},
		{"oversize", append(bytes.Clone(good), bytes.Repeat([]byte{'x'}, MaxCheckpointSize)...)},
		{"control character", edit("receiver-1", "receiver\x01")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseAnchor(tc.text); !errors.Is(err, ErrBadAnchor) {
				t.Fatalf("ParseAnchor: %v, want ErrBadAnchor", err)
			}
		})
	}
}

// Ensure that anchors of the earlier formats are refused with a message
// that says which format it is and what to do, rather than as mere
// garbage: v1, whose checkpoints did not commit to the state, and v2,
// whose checkpoints did not commit to the tree root.
func TestParseAnchor_RefusesOldFormats(t *testing.T) {
	sc, _ := Sign(receiverKey, testCheckpoint())
	good, _ := sc.MarshalAnchor()
	noRoot := bytes.Replace(good, []byte("root 7ee0000000000000000000000000000000000000000000000000000000000000\n"), nil, 1)
	v2 := bytes.Replace(noRoot, []byte("checkpoint v3"), []byte("checkpoint v2"), 1)
	v1 := bytes.Replace(v2, []byte("checkpoint v2"), []byte("checkpoint v1"), 1)
	v1 = bytes.Replace(v1, []byte("state 57a7000000000000000000000000000000000000000000000000000000000000\n"), nil, 1)
	for _, tc := range []struct {
		name string
		text []byte
		want error
		says string
	}{
		{"v1", v1, ErrAnchorV1, "lost-anchor recovery admission"},
		{"v2", v2, ErrAnchorV2, "format v2 predates the tree root"},
		// A v2 body under the v3 line is no v2 anchor: a missing root line.
		{"v2 body, v3 line", noRoot, nil, `want "root" line`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAnchor(tc.text)
			if !errors.Is(err, ErrBadAnchor) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("ParseAnchor(%s) = %v, want ErrBadAnchor and %v", tc.name, err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("message does not say %q: %v", tc.says, err)
			}
		})
	}
}

// storeSuite checks the AnchorStore contract that every implementation
// shares: compare-and-swap, monotonicity, receiver binding, Supersede.
func storeSuite(t *testing.T, newStore func(t *testing.T) AnchorStore) {
	recs, _ := testChain(t, 10)
	at := func(seq uint64) SignedCheckpoint { return checkpointOf(t, receiverKey, testReceiver, recs, seq) }
	forked := func(seq uint64) SignedCheckpoint {
		sc, err := Sign(receiverKey, Checkpoint{Root: testRoot, Receiver: testReceiver, Seq: seq, Head: Hash{1}, EpochHighWater: 1 + seq/4})
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	ptr := func(sc SignedCheckpoint) *SignedCheckpoint { return &sc }
	other, err := Sign(receiverKey, Checkpoint{Root: testRoot, Receiver: "receiver-2", Seq: 9, Head: HashEntry(recs[8].v), EpochHighWater: 3})
	if err != nil {
		t.Fatal(err)
	}
	lowerEHW := at(9)
	lowerEHW.EpochHighWater = 0
	if lowerEHW, err = Sign(receiverKey, lowerEHW.Checkpoint); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		old  *SignedCheckpoint
		next SignedCheckpoint
		want error
	}{
		{"advance", ptr(at(5)), at(9), nil},
		{"same again", ptr(at(5)), at(5), nil},
		{"first anchor over an existing one", nil, at(9), ErrWriteConflict},
		{"stale old", ptr(at(4)), at(9), ErrWriteConflict},
		{"old from another fork", ptr(forked(5)), at(9), ErrWriteConflict},
		{"smaller seq", ptr(at(5)), at(4), ErrAnchorRegression},
		{"same seq, other head", ptr(at(5)), forked(5), ErrAnchorRegression},
		{"smaller epoch high-water", ptr(at(5)), lowerEHW, ErrAnchorRegression},
		{"another receiver", ptr(at(5)), other, ErrReceiverMismatch},
		{"invalid checkpoint", ptr(at(5)), SignedCheckpoint{}, ErrBadCheckpoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			if err := s.Store(nil, at(5)); err != nil {
				t.Fatal(err)
			}
			err := s.Store(tc.old, tc.next)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Store: %v, want %v", err, tc.want)
			}
			want := at(5)
			if err == nil {
				want = tc.next
			}
			if got, err := s.Load(); err != nil || got != want {
				t.Fatalf("Load after Store = seq %d, %v; want seq %d", got.Seq, err, want.Seq)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.Load(); !errors.Is(err, ErrAnchorMissing) {
			t.Fatalf("Load: %v, want ErrAnchorMissing", err)
		}
		if err := s.Store(ptr(at(5)), at(9)); !errors.Is(err, ErrWriteConflict) || !errors.Is(err, ErrAnchorMissing) {
			t.Fatalf("Store over a missing anchor: %v", err)
		}
		if err := s.Supersede(at(5), at(3)); !errors.Is(err, ErrWriteConflict) {
			t.Fatalf("Supersede over a missing anchor: %v", err)
		}
		if _, err := s.Load(); !errors.Is(err, ErrAnchorMissing) {
			t.Fatalf("Load after refused writes: %v, want ErrAnchorMissing", err)
		}
	})
	t.Run("supersede", func(t *testing.T) {
		s := newStore(t)
		if err := s.Store(nil, at(9)); err != nil {
			t.Fatal(err)
		}
		if err := s.Supersede(at(5), at(3)); !errors.Is(err, ErrWriteConflict) {
			t.Fatalf("Supersede of another anchor: %v", err)
		}
		if err := s.Supersede(at(9), other); !errors.Is(err, ErrReceiverMismatch) {
			t.Fatalf("Supersede to another receiver: %v", err)
		}
		if err := s.Supersede(at(9), at(3)); err != nil {
			t.Fatalf("Supersede: %v", err)
		}
		if got, err := s.Load(); err != nil || got != at(3) {
			t.Fatalf("Load after Supersede: seq %d, %v", got.Seq, err)
		}
	})
}

func TestMemAnchor(t *testing.T) {
	storeSuite(t, func(*testing.T) AnchorStore { return new(MemAnchor) })
}
