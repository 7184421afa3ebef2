package audit

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

func testCheckpoint() Checkpoint {
	return Checkpoint{Root: testRoot, Receiver: testReceiver, Seq: 42, Head: Hash{0xde, 0xad}, State: Hash{0x57, 0xa7}, EpochHighWater: 7, At: t0 + 123456789}
}

// testCheckpointAdmission is testCheckpoint after a recovery: it names the
// admission consumed.
func testCheckpointAdmission() Checkpoint {
	c := testCheckpoint()
	c.Admission = AdmissionRecord{SHA256: Hash{0xad, 0x31}, At: t0 + 3600e9}
	return c
}

// Ensure that a checkpoint verifies under its own key only.
func TestSign_Verify(t *testing.T) {
	sc, err := Sign(receiverKey, testCheckpoint())
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Verify(pubOf(receiverKey)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if err := sc.Verify(pubOf(otherKey)); !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), "not by") {
		t.Fatalf("Verify with another key: %v, want ErrBadSignature naming both keys", err)
	}
	// A forged fingerprint only moves the failure to the signature itself.
	forged := sc
	forged.Key = KeyFingerprint(pubOf(otherKey))
	if err := forged.Verify(pubOf(otherKey)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("Verify with forged fingerprint: %v", err)
	}
	changed := sc
	changed.EpochHighWater++
	if err := changed.Verify(pubOf(receiverKey)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("Verify after a change: %v", err)
	}
	if err := sc.Verify(pubOf(receiverKey)[:31]); !errors.Is(err, ErrBadKey) {
		t.Fatalf("Verify with a short key: %v", err)
	}
	if _, err := Sign(receiverKey[:32], testCheckpoint()); !errors.Is(err, ErrBadKey) {
		t.Fatalf("Sign with a seed: %v", err)
	}
}

// Ensure that the fingerprint is the one ssh-keygen -l prints.
func TestKeyFingerprint(t *testing.T) {
	sp, err := ssh.NewPublicKey(pubOf(receiverKey))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := KeyFingerprint(pubOf(receiverKey)).String(), ssh.FingerprintSHA256(sp); got != want {
		t.Fatalf("fingerprint %s, want %s", got, want)
	}
}

// Ensure that Sign refuses checkpoints the decoders would refuse.
func TestSign_Refuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Checkpoint)
	}{
		{"seq 0", func(c *Checkpoint) { c.Seq = 0 }},
		{"empty receiver", func(c *Checkpoint) { c.Receiver = "" }},
		{"newline in receiver", func(c *Checkpoint) { c.Receiver = "a\nseq 1" }},
		{"DEL in receiver", func(c *Checkpoint) { c.Receiver = "a\x7f" }},
		{"invalid UTF-8 receiver", func(c *Checkpoint) { c.Receiver = "\xc3" }},
		{"long receiver", func(c *Checkpoint) { c.Receiver = strings.Repeat("r", MaxReceiverLen+1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCheckpoint()
			tc.edit(&c)
			if _, err := Sign(receiverKey, c); !errors.Is(err, ErrBadCheckpoint) {
				t.Fatalf("Sign: %v, want ErrBadCheckpoint", err)
			}
		})
	}
	// The longest receiver, with the largest values and an admission
	// record, still fits.
	c := testCheckpointAdmission()
	c.Receiver = strings.Repeat("é", MaxReceiverLen/2)
	c.Seq, c.EpochHighWater, c.At, c.Admission.At = ^uint64(0), ^uint64(0), math.MinInt64, math.MinInt64
	sc, err := Sign(receiverKey, c)
	if err != nil {
		t.Fatalf("longest receiver: %v", err)
	}
	for _, marshal := range []func() ([]byte, error){sc.Marshal, sc.MarshalAnchor} {
		if b, err := marshal(); err != nil || len(b) > MaxCheckpointSize {
			t.Fatalf("longest receiver encodes to %d bytes: %v", len(b), err)
		}
	}
	text, _ := sc.MarshalAnchor()
	if got, err := ParseAnchor(text); err != nil || got != sc {
		t.Fatalf("longest anchor round trip: %v", err)
	}
}

// Ensure that every single-byte change of an encoded signed checkpoint is
// refused by the decoder or by the signature check.
func TestSignedCheckpoint_Mangling(t *testing.T) {
	for _, c := range []Checkpoint{testCheckpoint(), testCheckpointAdmission()} {
		sc, err := Sign(receiverKey, c)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := sc.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ParseSignedCheckpoint(raw); err != nil || got != sc {
			t.Fatalf("round trip: %+v, %v", got, err)
		}
		mangle(raw, func(i int, m []byte) {
			got, err := ParseSignedCheckpoint(m)
			if err == nil {
				err = got.Verify(pubOf(receiverKey))
			}
			if err == nil {
				t.Fatalf("admission %v: byte %d = %#x: accepted", !c.Admission.IsZero(), i, m[i])
			}
		})
	}
}

// Ensure that the signed checkpoint decoder refuses what is not exactly one
// canonical signed checkpoint.
func TestParseSignedCheckpoint_Rejects(t *testing.T) {
	sc, _ := Sign(receiverKey, testCheckpoint())
	raw, _ := sc.Marshal()
	body := appendCheckpoint(nil, &sc.Checkpoint)
	for _, tc := range []struct {
		name string
		raw  []byte
	}{
		{"trailing bytes", append(raw[:len(raw):len(raw)], 0)},
		{"truncated", raw[:len(raw)-1]},
		{"oversize", make([]byte, MaxCheckpointSize+1)},
		{"body with trailing byte", appendSigned(nil, keyCheckpoint, sc.Key, &sc.Signature, append(body, 0))},
		{"admission in place of a checkpoint", appendSigned(nil, keyAdmission, sc.Key, &sc.Signature, body)},
		{"extra key", append(append([]byte{0xa4}, raw[1:]...), "\x61x\x00"...)},
		{"short signature", func() []byte {
			b := appendHead(nil, majorMap, 3)
			b = appendBytes(append(b, "\x63key"...), sc.Key[:])
			b = appendBytes(append(b, "\x63sig"...), sc.Signature[:63])
			return appendBytes(append(b, keyCheckpoint...), body)
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseSignedCheckpoint(tc.raw); !errors.Is(err, ErrBadCheckpoint) {
				t.Fatalf("ParseSignedCheckpoint: %v, want ErrBadCheckpoint", err)
			}
		})
	}
}

// Ensure that CheckAnchor accepts a database at or ahead of its anchor and
// refuses every other state with the matching error.
func TestCheckAnchor(t *testing.T) {
	recs, head := testChain(t, 10)
	anchor := checkpointOf(t, receiverKey, testReceiver, recs, 8)
	hashAt := func(recs []record) func(uint64) (Hash, error) {
		return func(seq uint64) (Hash, error) {
			if seq == 0 || seq > uint64(len(recs)) {
				return Hash{}, errors.New("no such entry")
			}
			return HashEntry(recs[seq-1].v), nil
		}
	}
	forked, _ := testChain(t, 10)
	forked[7].v = append([]byte(nil), forked[7].v...)
	forked[7].v[len(forked[7].v)-1] ^= 1
	for _, tc := range []struct {
		name     string
		anchor   SignedCheckpoint
		pub      []byte
		receiver string
		head     Head
		recs     []record
		want     error
	}{
		{"db at anchor", anchor, pubOf(receiverKey), testReceiver, Head{8, HashEntry(recs[7].v)}, recs, nil},
		{"db ahead (crash window)", anchor, pubOf(receiverKey), testReceiver, head, recs, nil},
		{"rollback", anchor, pubOf(receiverKey), testReceiver, Head{7, HashEntry(recs[6].v)}, recs, ErrRollbackDetected},
		{"fork", anchor, pubOf(receiverKey), testReceiver, Head{10, HashEntry(forked[9].v)}, forked, ErrForkDetected},
		{"fork at head", anchor, pubOf(receiverKey), testReceiver, Head{8, HashEntry(forked[7].v)}, forked, ErrForkDetected},
		{"wrong key", anchor, pubOf(otherKey), testReceiver, head, recs, ErrBadSignature},
		{"signed by another key", checkpointOf(t, otherKey, testReceiver, recs, 8), pubOf(receiverKey), testReceiver, head, recs, ErrBadSignature},
		{"another receiver", checkpointOf(t, receiverKey, "receiver-2", recs, 8), pubOf(receiverKey), testReceiver, head, recs, ErrReceiverMismatch},
		{"unreadable entry", anchor, pubOf(receiverKey), testReceiver, Head{12, Hash{}}, recs[:7], errors.ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookup := hashAt(tc.recs)
			if tc.want == errors.ErrUnsupported {
				lookup = func(uint64) (Hash, error) { return Hash{}, errors.ErrUnsupported }
			}
			err := CheckAnchor(tc.anchor, tc.pub, tc.receiver, tc.head, lookup)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("CheckAnchor: %v, want %v", err, tc.want)
			}
		})
	}
	err := CheckAnchor(anchor, pubOf(receiverKey), testReceiver, Head{Seq: 3}, hashAt(recs))
	var rb *RollbackError
	if !errors.As(err, &rb) || rb.Head.Seq != 3 || rb.Anchor != anchor.Checkpoint {
		t.Fatalf("rollback: %v", err)
	}
	err = CheckAnchor(anchor, pubOf(receiverKey), testReceiver, Head{10, Hash{}}, hashAt(forked))
	var fk *ForkError
	if !errors.As(err, &fk) || fk.Hash != HashEntry(forked[7].v) || fk.Anchor != anchor.Checkpoint {
		t.Fatalf("fork: %v", err)
	}
	for _, s := range []string{"seq 8", "database has", "anchored"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("fork error %q lacks %q", err, s)
		}
	}
}

func BenchmarkSign(b *testing.B) {
	cp := testCheckpoint()
	for b.Loop() {
		if _, err := Sign(receiverKey, cp); err != nil {
			b.Fatal(err)
		}
	}
}

// Ensure that the consumed admission a checkpoint names is part of what is
// signed: it cannot be stripped, changed or half-spelled without the
// decoder or the signature refusing it, and a checkpoint without it keeps
// exactly the encoding it had before the field existed.
func TestCheckpoint_AdmissionRecord(t *testing.T) {
	sc, err := Sign(receiverKey, testCheckpointAdmission())
	if err != nil {
		t.Fatal(err)
	}
	rec := sc.Admission
	bare := sc
	bare.Admission = AdmissionRecord{}
	if err := bare.Verify(pubOf(receiverKey)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("the record stripped, the signature kept: %v", err)
	}
	for name, edit := range map[string]func(*AdmissionRecord){
		"later at":     func(r *AdmissionRecord) { r.At++ },
		"earlier at":   func(r *AdmissionRecord) { r.At-- },
		"other digest": func(r *AdmissionRecord) { r.SHA256[31] ^= 1 },
	} {
		edited := sc
		edit(&edited.Admission)
		if err := edited.Verify(pubOf(receiverKey)); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The body with the record's keys cut out, or spelled apart: refused by
	// the decoder, whatever the signature.
	body := appendCheckpoint(nil, &sc.Checkpoint)
	plain := appendCheckpoint(nil, &bare.Checkpoint)
	atKey := appendInt([]byte("\x6cadmission_at"), rec.At)
	shaKey := appendBytes([]byte("\x70admission_sha256"), rec.SHA256[:])
	zeroKey := appendBytes([]byte("\x70admission_sha256"), make([]byte, 32))
	shortKey := appendBytes([]byte("\x70admission_sha256"), rec.SHA256[:31])
	cut := func(b []byte, n byte, extra ...[]byte) []byte { // plain with one more key, map size n
		i := bytes.Index(plain, []byte("\x70epoch_high_water"))
		out := append([]byte{0xa0 | n}, plain[1:i]...)
		for _, e := range extra {
			out = append(out, e...)
		}
		return append(out, plain[i:]...)
	}
	if !bytes.Equal(cut(plain, 9, atKey, shaKey), body) {
		t.Fatalf("the test's spelling of the record is not the encoder's:\n%x\n%x", cut(plain, 9, atKey, shaKey), body)
	}
	for name, b := range map[string][]byte{
		"admission_at only":       cut(plain, 8, atKey),
		"admission_sha256 only":   cut(plain, 8, shaKey),
		"zero digest":             cut(plain, 9, atKey, zeroKey),
		"zero digest, no at":      cut(plain, 8, zeroKey),
		"short digest":            cut(plain, 9, atKey, shortKey),
		"keys in the wrong order": cut(plain, 9, shaKey, atKey),
	} {
		if _, err := parseCheckpoint(b); !errors.Is(err, ErrBadCheckpoint) {
			t.Errorf("%s: %v, want ErrBadCheckpoint", name, err)
		}
	}
	if _, err := Sign(receiverKey, Checkpoint{Root: testRoot, Receiver: testReceiver, Seq: 1, Admission: AdmissionRecord{At: 1}}); !errors.Is(err, ErrBadCheckpoint) {
		t.Fatalf("Sign with an admission time but no digest: %v", err)
	}
	// The anchor file says the same, in two lines that come and go together.
	text, err := sc.MarshalAnchor()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseAnchor(text); err != nil || got != sc {
		t.Fatalf("anchor round trip: %+v, %v", got, err)
	}
	lines := strings.SplitAfter(string(text), "\n")
	if !strings.HasPrefix(lines[7], "admission_sha256 ad31") || lines[8] != "admission_at 2026-01-01T01:00:00Z\n" {
		t.Fatalf("anchor lines 8 and 9: %q %q", lines[7], lines[8])
	}
	without := func(skip ...int) []byte {
		var b []byte
		for i, l := range lines {
			if !slices.Contains(skip, i) {
				b = append(b, l...)
			}
		}
		return b
	}
	stripped, err := ParseAnchor(without(7, 8))
	if err != nil {
		t.Fatalf("anchor without the record lines does not parse as the plain form: %v", err)
	}
	if err := stripped.Verify(pubOf(receiverKey)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("anchor with the record lines removed: %v", err)
	}
	for name, b := range map[string][]byte{"no admission_at line": without(8), "no admission_sha256 line": without(7)} {
		if _, err := ParseAnchor(b); !errors.Is(err, ErrBadAnchor) {
			t.Errorf("%s: %v, want ErrBadAnchor", name, err)
		}
	}
}

// Ensure that an admission record refuses the admission it names and every
// one signed no later, and nothing else.
func TestAdmissionRecord_Refuses(t *testing.T) {
	rec := AdmissionRecord{SHA256: Hash{1}, At: t0}
	for _, tc := range []struct {
		name   string
		rec    AdmissionRecord
		digest Hash
		at     int64
		want   error
	}{
		{"no record", AdmissionRecord{}, Hash{1}, t0, nil},
		{"the one named", rec, Hash{1}, t0, ErrAdmissionReplayed},
		{"the one named, whatever its time", rec, Hash{1}, t0 + 1, ErrAdmissionReplayed},
		{"another signed at the same time", rec, Hash{2}, t0, ErrAdmissionReplayed},
		{"another signed before", rec, Hash{2}, t0 - 1, ErrAdmissionReplayed},
		{"another signed after", rec, Hash{2}, t0 + 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.rec.Refuses(tc.digest, tc.at)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Refuses: %v, want %v", err, tc.want)
			}
		})
	}
}

// Ensure that an anchor store keeps the consumed admission: an ordinary
// write must carry it unchanged, and a supersession may only name a later
// one.
func TestAnchorStore_KeepsAdmission(t *testing.T) {
	at := func(seq uint64, rec AdmissionRecord) SignedCheckpoint {
		c := Checkpoint{Root: testRoot, Receiver: testReceiver, Seq: seq, Head: Hash{byte(seq)}, EpochHighWater: 1, At: t0, Admission: rec}
		sc, err := Sign(receiverKey, c)
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	r1 := AdmissionRecord{SHA256: Hash{1}, At: t0}
	r2 := AdmissionRecord{SHA256: Hash{2}, At: t0 + 1}
	for _, tc := range []struct {
		name      string
		cur, next SignedCheckpoint
		supersede bool
		want      error
	}{
		{"carried", at(5, r1), at(6, r1), false, nil},
		{"dropped", at(5, r1), at(6, AdmissionRecord{}), false, ErrAnchorRegression},
		{"replaced by a write", at(5, r1), at(6, r2), false, ErrAnchorRegression},
		{"added by a write", at(5, AdmissionRecord{}), at(6, r1), false, ErrAnchorRegression},
		{"none, none", at(5, AdmissionRecord{}), at(6, AdmissionRecord{}), false, nil},
		{"superseded by a later one", at(5, r1), at(3, r2), true, nil},
		{"superseded, first one", at(5, AdmissionRecord{}), at(3, r1), true, nil},
		{"superseded, dropped", at(5, r1), at(3, AdmissionRecord{}), true, ErrAnchorRegression},
		{"superseded by an earlier one", at(5, r2), at(3, r1), true, ErrAnchorRegression},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m MemAnchor
			if err := m.Store(nil, tc.cur); err != nil {
				t.Fatal(err)
			}
			var err error
			if tc.supersede {
				err = m.Supersede(tc.cur, tc.next)
			} else {
				err = m.Store(&tc.cur, tc.next)
				if cerr := tc.cur.CheckAdvance(tc.next.Checkpoint); !errors.Is(cerr, tc.want) || (tc.want == nil) != (cerr == nil) {
					t.Errorf("CheckAdvance: %v, want %v", cerr, tc.want)
				}
			}
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("store: %v, want %v", err, tc.want)
			}
		})
	}
}
