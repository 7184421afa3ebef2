package audit

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// archiveCase is an archive of the standard test chain's entries after
// from up to to, with everything needed to forge variants of it.
type archiveCase struct {
	recs             []record
	fromRaw, toRaw   []byte
	st               ArchiveStatement
	data             []byte
	frames           [][2]int // each entry's frame: start and end offsets in data
	statementAt, end int      // offsets of the statement frame and of its end
}

// buildArchive writes the archive of recs[from:to] (entries from+1 to to)
// signed with key; fromRaw is the base record at from (nil for the start).
func buildArchive(t testing.TB, key ed25519.PrivateKey, receiver string, recs []record, fromRaw []byte, to uint64) *archiveCase {
	t.Helper()
	if fromRaw == nil {
		fromRaw = mustMarshalBase(&Base{})
	}
	from, err := ParseBase(fromRaw)
	if err != nil {
		t.Fatal(err)
	}
	// Walked here rather than by AdvanceBase, which also asks the stored
	// chain after the base to record it: archives need not.
	w := newBaseWalker(&from, fromRaw)
	for k, v := range entriesOf(recs[from.Seq:to]) {
		if !w.step(k, v) {
			t.Fatal(w.err)
		}
	}
	toHead := w.head
	toRaw := mustMarshalBase(&Base{Seq: toHead.Seq, Hash: toHead.Hash, Scopes: w.fence.snapshot()})
	st := ArchiveStatement{Receiver: receiver, FromSeq: from.Seq, FromHash: from.Hash, FromFence: BaseDigest(fromRaw),
		ToSeq: to, ToHash: toHead.Hash, ToFence: BaseDigest(toRaw), At: t0}
	return writeCase(t, key, st, recs, fromRaw, toRaw)
}

func writeCase(t testing.TB, key ed25519.PrivateKey, st ArchiveStatement, recs []record, fromRaw, toRaw []byte) *archiveCase {
	t.Helper()
	sst, err := SignArchive(key, st)
	if err != nil {
		t.Fatal(err)
	}
	// Framed by hand, not by ArchiveWriter, whose checks would refuse
	// the forgeries that tests build with this.
	signed, err := sst.marshalSigned()
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(archiveMagic)
	for _, p := range append([][]byte{signed, fromRaw}, rawsOf(recs[st.FromSeq:st.ToSeq])...) {
		data = binary.BigEndian.AppendUint32(data, uint32(len(p)))
		data = append(data, p...)
	}
	c := &archiveCase{recs: recs, fromRaw: fromRaw, toRaw: toRaw, st: st, data: data}
	// Walk the frames: statement, base record, entries.
	off := len(archiveMagic)
	c.statementAt = off
	for i := 0; off < len(c.data); i++ {
		n := int(binary.BigEndian.Uint32(c.data[off:]))
		if i == 0 {
			c.end = off + 4 + n
		}
		if i >= 2 {
			c.frames = append(c.frames, [2]int{off, off + 4 + n})
		}
		off += 4 + n
	}
	return c
}

func readCase(data []byte) (ArchiveInfo, error) {
	return ReadArchive("test.kva", bytes.NewReader(data), pubOf(receiverKey), testReceiver, nil)
}

// Ensure that an archive written by ArchiveWriter reads back, entry for
// entry, and that a second archive continues the first.
func TestArchive_RoundTrip(t *testing.T) {
	recs, _, _, head := storedAfterArchive(t, 8, 5)
	a := buildArchive(t, receiverKey, testReceiver, recs, nil, 5)
	var buf bytes.Buffer
	sst, _ := SignArchive(receiverKey, a.st)
	aw, err := NewArchiveWriter(&buf, sst, a.fromRaw)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs[:5] {
		if err := aw.Add(r.v); err != nil {
			t.Fatal(err)
		}
	}
	if err := aw.Close(); err != nil || !bytes.Equal(buf.Bytes(), a.data) {
		t.Fatalf("ArchiveWriter wrote %d bytes (%v), want the %d framed by hand", buf.Len(), err, len(a.data))
	}
	var seen []uint64
	info, err := ReadArchive("a", bytes.NewReader(a.data), pubOf(receiverKey), testReceiver, func(e *Entry, h Hash) {
		if h != HashEntry(recs[e.Seq-1].v) {
			t.Errorf("entry %d: hash %x", e.Seq, h)
		}
		seen = append(seen, e.Seq)
	})
	if err != nil || info.Entries != 5 || len(seen) != 5 || info.Statement.ToSeq != 5 {
		t.Fatalf("ReadArchive = %+v, %v; saw %v", info, err, seen)
	}
	b := buildArchive(t, receiverKey, testReceiver, recs, a.toRaw, 9)
	info, err = readCase(b.data)
	if err != nil || info.Statement.FromFence != a.st.ToFence || info.Statement.ToHash != head.Hash {
		t.Fatalf("second archive: %+v, %v", info, err)
	}
}

// Ensure that every kind of forged archive is refused, each with the
// problem that names it.
func TestReadArchive_Forged(t *testing.T) {
	recs, _ := testChain(t, 8)
	good := buildArchive(t, receiverKey, testReceiver, recs, nil, 6)
	if _, err := readCase(good.data); err != nil {
		t.Fatalf("the unforged archive: %v", err)
	}
	edited := func(f func(d []byte) []byte) []byte { return f(bytes.Clone(good.data)) }
	resigned := func(key ed25519.PrivateKey, edit func(st *ArchiveStatement)) []byte {
		st := good.st
		edit(&st)
		return writeCase(t, key, st, recs, good.fromRaw, good.toRaw).data
	}
	// A statement whose signature was made over the checkpoint domain: a
	// signature for another kind of object must not verify here.
	otherDomain := func() []byte {
		body, err := good.st.marshal()
		if err != nil {
			t.Fatal(err)
		}
		sst := SignedArchiveStatement{ArchiveStatement: good.st, Key: KeyFingerprint(pubOf(receiverKey))}
		copy(sst.Signature[:], ed25519.Sign(receiverKey, append([]byte(checkpointPrefix), body...)))
		signed, _ := sst.marshalSigned()
		d := bytes.Clone(good.data[:good.statementAt])
		d = binary.BigEndian.AppendUint32(d, uint32(len(signed)))
		d = append(d, signed...)
		return append(d, good.data[good.end:]...)
	}
	noteAt := bytes.Index(good.data[good.frames[0][0]:], []byte("takeover")) + good.frames[0][0]
	for _, tc := range []struct {
		name    string
		data    []byte
		problem Problem
		want    error
		detail  string
	}{
		{"an entry altered", edited(func(d []byte) []byte { d[noteAt] ^= 0x20; return d }), ProblemBrokenLink, ErrBrokenLink, "entry 2 has prev"},
		{"signed by another key", resigned(otherKey, func(*ArchiveStatement) {}), ProblemBadSignature, ErrBadSignature, "signed by key"},
		{"signed in the checkpoint domain", otherDomain(), ProblemBadSignature, ErrBadSignature, "does not verify"},
		{"another receiver's", resigned(receiverKey, func(st *ArchiveStatement) { st.Receiver = "receiver-2" }), ProblemReceiverMismatch, ErrReceiverMismatch, "receiver-2"},
		{"truncated in an entry", good.data[:len(good.data)-10], ProblemBadArchive, ErrBadArchive, "truncated"},
		{"truncated after an entry", good.data[:good.frames[4][1]], ProblemBadArchive, ErrBadArchive, "ends before entry 6"},
		{"entries reordered", edited(func(d []byte) []byte {
			f2, f3 := good.frames[1], good.frames[2]
			out := append(bytes.Clone(d[:f2[0]]), d[f3[0]:f3[1]]...)
			out = append(out, d[f2[0]:f2[1]]...)
			return append(out, d[f3[1]:]...)
		}), ProblemSeqGap, ErrSeqGap, "holds entry seq 3"},
		{"bytes after the last entry", append(bytes.Clone(good.data), 0), ProblemBadArchive, ErrBadArchive, "bytes after entry 6"},
		{"not an archive", []byte("kvfence checkpoint v2\n"), ProblemBadArchive, ErrBadArchive, "not a kvfence archive"},
		{"statement names another end", resigned(receiverKey, func(st *ArchiveStatement) { st.ToHash[0] ^= 1 }), ProblemBrokenLink, ErrBrokenLink, "signed statement says"},
		{"statement names another fence state", resigned(receiverKey, func(st *ArchiveStatement) { st.ToFence[0] ^= 1 }), ProblemBaseMismatch, ErrBaseMismatch, "fence state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readCase(tc.data)
			var ae *ArchiveError
			if !errors.As(err, &ae) || ae.Problem != tc.problem || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.detail) {
				t.Fatalf("ReadArchive = %v, want %s wrapping %v and saying %q", err, tc.problem, tc.want, tc.detail)
			}
		})
	}
}

// Ensure that no single-bit change anywhere in an archive is accepted:
// every byte is signed, hashed into the chain, or checked against the key.
func TestReadArchive_EveryBitSigned(t *testing.T) {
	recs, _ := testChain(t, 3)
	a := buildArchive(t, receiverKey, testReceiver, recs, nil, 3)
	m := bytes.Clone(a.data)
	for i := range m {
		for bit := 0; bit < 8; bit++ {
			m[i] ^= 1 << bit
			if _, err := readCase(m); err == nil {
				t.Fatalf("byte %d bit %d flipped: accepted", i, bit)
			}
			m[i] ^= 1 << bit
		}
	}
}

// storedAfterArchive returns the standard chain of n entries archived up
// to base: the stored records after it, ending with the archive entry,
// and the base record.
func storedAfterArchive(t testing.TB, n, base uint64) (all, stored []record, baseRaw []byte, head Head) {
	t.Helper()
	recs, h := testChain(t, n)
	baseRaw, to, err := AdvanceBase(nil, entriesOf(recs), base)
	if err != nil {
		t.Fatal(err)
	}
	d := BaseDigest(baseRaw)
	c := NewChain(h)
	raw, _, err := c.Append(&Entry{At: t0, Kind: KindArchived, BaseSeq: base, BaseHash: to.Hash[:], BaseFence: d[:]})
	if err != nil {
		t.Fatal(err)
	}
	all = append(recs, record{SeqKey(n + 1), raw})
	return all, all[base:], baseRaw, c.Head()
}

func anchorAt(t testing.TB, recs []record, seq uint64) *MemAnchor {
	t.Helper()
	a := &MemAnchor{}
	if err := a.Store(nil, checkpointOf(t, receiverKey, testReceiver, recs, seq)); err != nil {
		t.Fatal(err)
	}
	return a
}

// Ensure that Verify checks a stored chain from its base: the base record
// must be the one the newest archive entry records, the stored chain must
// begin right after it, and an anchor must not name an archived entry.
func TestVerify_FromBase(t *testing.T) {
	all, stored, baseRaw, head := storedAfterArchive(t, 8, 5)
	otherBase := func() []byte {
		b, _ := ParseBase(baseRaw)
		b.Scopes[0].Epoch++
		return mustMarshalBase(&b)
	}
	noArchiveEntry := func() []byte {
		raw, _, _ := AdvanceBase(nil, entriesOf(all[:8]), 6)
		return raw
	}
	for _, tc := range []struct {
		name    string
		entries []record
		base    []byte
		anchor  uint64
		problem Problem
	}{
		{"from the base", stored, baseRaw, head.Seq, ProblemOK},
		{"anchor at the base", stored, baseRaw, 5, ProblemOK},
		{"anchor before the base", stored, baseRaw, 4, ProblemAnchorStale},
		{"archived entries put back", all, baseRaw, head.Seq, ProblemBaseMismatch},
		{"put back, base record removed", all, nil, head.Seq, ProblemBaseMismatch},
		{"base fence state edited", stored, otherBase(), head.Seq, ProblemBaseMismatch},
		{"a base no archive entry records", all[6:], noArchiveEntry(), head.Seq, ProblemBaseMismatch},
		{"base record not canonical", stored, append(bytes.Clone(baseRaw), 0), head.Seq, ProblemBaseMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Verify(VerifyOptions{Entries: entriesOf(tc.entries), Anchor: anchorAt(t, all, tc.anchor),
				PublicKey: pubOf(receiverKey), Receiver: testReceiver, BaseRecord: tc.base})
			if err != nil {
				t.Fatal(err)
			}
			if r.Problem != tc.problem {
				t.Fatalf("Verify = %s (%s), want %s", r.Problem, r.Detail, tc.problem)
			}
		})
	}
}

// Ensure that archive entries encode with the new fields in canonical
// order, as an independent core deterministic encoder does.
func TestEntry_ArchiveFieldsCanonical(t *testing.T) {
	e := &Entry{Seq: 9, Prev: make([]byte, 32), At: t0, Kind: KindArchived, Actor: "unix:uid:0", Note: "n",
		BaseSeq: 5, BaseHash: bytes.Repeat([]byte{1}, 32), BaseFence: bytes.Repeat([]byte{2}, 32)}
	raw, err := EncodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	indep, err := baseEnc.Marshal(e)
	if err != nil || !bytes.Equal(raw, indep) {
		t.Fatalf("EncodeEntry %x, core deterministic %x (%v)", raw, indep, err)
	}
	back, err := DecodeEntry(raw)
	if err != nil || back.BaseSeq != 5 || !bytes.Equal(back.BaseFence, e.BaseFence) {
		t.Fatalf("DecodeEntry = %+v, %v", back, err)
	}
}

func FuzzReadArchive(f *testing.F) {
	recs, _, _, _ := storedAfterArchive(f, 6, 3)
	a := buildArchive(f, receiverKey, testReceiver, recs, nil, 3)
	b := buildArchive(f, receiverKey, testReceiver, recs, a.toRaw, 7)
	for _, d := range [][]byte{a.data, b.data, a.data[:len(a.data)-5], append(bytes.Clone(a.data), 0), []byte(archiveMagic)} {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var raws [][]byte
		info, err := ReadArchive("fuzz", bytes.NewReader(data), pubOf(receiverKey), testReceiver, func(e *Entry, _ Hash) {
			raw, err := EncodeEntry(e)
			if err != nil {
				t.Fatalf("accepted entry %d does not encode: %v", e.Seq, err)
			}
			raws = append(raws, raw)
		})
		if err != nil {
			var ae *ArchiveError
			if !errors.As(err, &ae) || ae.Problem == "" {
				t.Fatalf("error %v is not an *ArchiveError with a problem", err)
			}
			return
		}
		// One archive, one spelling: writing what was read gives the input.
		fromRaw, err := MarshalBase(&info.From)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		aw, err := NewArchiveWriter(&buf, info.Statement, fromRaw)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range raws {
			if err := aw.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := aw.Close(); err != nil || !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("accepted %x, rewrites to %x (%v)", data, buf.Bytes(), err)
		}
	})
}

func FuzzParseBase(f *testing.F) {
	recs, _ := testChain(f, 6)
	raw, _, _ := AdvanceBase(nil, entriesOf(recs), 6)
	f.Add(raw)
	f.Add(mustMarshalBase(&Base{}))
	f.Add([]byte{0xa0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := ParseBase(raw)
		if err != nil {
			if !errors.Is(err, ErrBadArchive) {
				t.Fatalf("error %v does not wrap ErrBadArchive", err)
			}
			return
		}
		again, err := MarshalBase(&b)
		if err != nil || !bytes.Equal(again, raw) {
			t.Fatalf("accepted %x, re-encodes to %x (%v)", raw, again, err)
		}
	})
}

// Ensure that archives given for a database that was never archived are
// refused, saying so.
func TestVerify_ArchivesWithoutBase(t *testing.T) {
	recs, _ := testChain(t, 6)
	a := buildArchive(t, receiverKey, testReceiver, recs, nil, 3)
	r, err := Verify(VerifyOptions{Entries: entriesOf(recs), Anchor: anchorAt(t, recs, 6), PublicKey: pubOf(receiverKey),
		Receiver: testReceiver, Archives: []ArchiveSource{{Name: "a", Reader: bytes.NewReader(a.data)}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Problem != ProblemBaseMismatch || !strings.Contains(r.Detail, "never archived") {
		t.Fatalf("Verify = %s (%s), want base_mismatch saying the database was never archived", r.Problem, r.Detail)
	}
}

// Ensure that a base taken right after a recovery carries the recovery into
// every scope's state: a grant the recovery removed, used after the base,
// is a fence violation from the base alone, as it is from seq 1.
func TestArchive_BaseAfterRecovery(t *testing.T) {
	const scope = "s"
	c := NewChain(Head{})
	var recs []record
	add := func(e *Entry) {
		t.Helper()
		e.At = t0
		raw, _, err := c.Append(e)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, record{SeqKey(e.Seq), raw})
	}
	add(&Entry{Kind: KindScopeCreated, Scope: scope, Epoch: 1})
	add(&Entry{Kind: KindActivate, Scope: scope, Epoch: 1, Grant: "g1"})
	add(&Entry{Kind: KindRecovered, Epoch: 2})
	baseRaw, to, err := AdvanceBase(nil, entriesOf(recs), 3)
	if err != nil {
		t.Fatal(err)
	}
	d := BaseDigest(baseRaw)
	add(&Entry{Kind: KindArchived, BaseSeq: 3, BaseHash: to.Hash[:], BaseFence: d[:]})
	add(&Entry{Kind: KindSubmit, Scope: scope, Epoch: 1, Grant: "g1", Outcome: OutcomeApplied})
	r, err := Verify(VerifyOptions{Entries: entriesOf(recs[3:]), Anchor: anchorAt(t, recs, 5),
		PublicKey: pubOf(receiverKey), Receiver: testReceiver, BaseRecord: baseRaw})
	if err != nil {
		t.Fatal(err)
	}
	var fv *FenceViolationError
	if r.Problem != ProblemFenceViolation || !errors.As(r.Err(), &fv) || fv.Seq != 5 || !fv.Recovery || fv.Hold != 3 {
		t.Fatalf("Verify = %s (%v), want a fence violation at 5 superseded by the recovery at 3", r.Problem, r.Err())
	}
}

// Ensure that an archive that begins at the right seq but continues another
// history than the archive before it is refused, saying so.
func TestVerify_ArchivesOfAnotherHistory(t *testing.T) {
	all, stored, baseRaw, head := storedAfterArchive(t, 8, 5)
	a := buildArchive(t, receiverKey, testReceiver, all, nil, 3)
	b := buildArchive(t, receiverKey, testReceiver, all, a.toRaw, 5)
	// The same receiver's key and id over another first entry: another
	// history whose archive ends at seq 3 too.
	other := append([]record(nil), all[:3]...)
	c := NewChain(Head{})
	e := testEntry(1)
	e.Note = "another history"
	raw, _, err := c.Append(e)
	if err != nil {
		t.Fatal(err)
	}
	other[0] = record{SeqKey(1), raw}
	for i := uint64(2); i <= 3; i++ {
		raw, _, err := c.Append(testEntry(i))
		if err != nil {
			t.Fatal(err)
		}
		other[i-1] = record{SeqKey(i), raw}
	}
	x := buildArchive(t, receiverKey, testReceiver, other, nil, 3)
	for _, tc := range []struct {
		name     string
		archives []*archiveCase
		problem  Problem
		detail   string
	}{
		{"one history", []*archiveCase{a, b}, ProblemOK, ""},
		{"another history's first archive", []*archiveCase{x, b}, ProblemBaseMismatch, "of different histories"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var srcs []ArchiveSource
			for i, ac := range tc.archives {
				srcs = append(srcs, ArchiveSource{Name: fmt.Sprint(i), Reader: bytes.NewReader(ac.data)})
			}
			r, err := Verify(VerifyOptions{Entries: entriesOf(stored), Anchor: anchorAt(t, all, head.Seq), PublicKey: pubOf(receiverKey),
				Receiver: testReceiver, BaseRecord: baseRaw, Archives: srcs})
			if err != nil {
				t.Fatal(err)
			}
			if r.Problem != tc.problem || !strings.Contains(r.Detail, tc.detail) {
				t.Fatalf("Verify = %s (%s), want %s saying %q", r.Problem, r.Detail, tc.problem, tc.detail)
			}
		})
	}
}
