//go:build !windows

package audit

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// slotFlips are single-byte changes to a slot, each at a place that
// leaves a different amount of the slot readable. sig leaves the anchor
// text parseable with a signature that no longer verifies; the others
// leave the text intact.
var slotFlips = []struct {
	name string
	at   func(slot []byte) int
	text bool // the slot's checkpoint still verifies afterwards
}{
	{"signature", func(s []byte) int { return bytes.Index(s, []byte("\nsig ")) + 10 }, false},
	{"seq digit", func(s []byte) int { return bytes.Index(s, []byte("\nseq ")) + 5 }, false},
	{"checksum", func([]byte) int { return 70 }, true},
	{"padding", func([]byte) int { return 4000 }, true},
	{"generation digit", func([]byte) int { return 46 }, true},
	{"magic", func([]byte) int { return 3 }, true},
	{"line feed", func([]byte) int { return 128 }, true},
}

// flipped returns data with the byte at off changed: a digit to another
// digit, so that a header still parses, anything else by one bit.
func flipped(data []byte, off int) []byte {
	m := bytes.Clone(data)
	if c := m[off]; c >= '0' && c <= '8' {
		m[off]++
	} else if c == '9' {
		m[off] = '0'
	} else {
		m[off] ^= 0x01
	}
	return m
}

// Ensure that a damaged newest slot is judged as the package documents:
// a database that ends exactly at the older slot's seq is a suspected
// rollback, or a proven one when the slot's checkpoint still verifies; a
// database past it is the crash window and no error; damage to the older
// slot is never an error.
func TestSlotDamage_Check(t *testing.T) {
	recs, _ := testChain(t, 6)
	a := checkpointOf(t, receiverKey, testReceiver, recs, 4)
	b := checkpointOf(t, receiverKey, testReceiver, recs, 5)
	two := readAnchor(t, storeAll(t, a, b)) // a in slot 0 at gen 1, b in slot 1 at gen 2
	headAt := func(seq uint64) Head { return Head{Seq: seq, Hash: HashEntry(recs[seq-1].v)} }
	hashAt := func(seq uint64) (Hash, error) { return HashEntry(recs[seq-1].v), nil }
	for _, f := range slotFlips {
		t.Run("newest/"+f.name, func(t *testing.T) {
			m := flipped(two, 4096+f.at(two[4096:]))
			i, cur, d, err := parseAnchorFile(m)
			if err != nil || i != 0 || cur.sc != a {
				t.Fatalf("parseAnchorFile = slot %d seq %d, %v; want slot 0, seq 4", i, cur.sc.Seq, err)
			}
			if d == nil || d.Slot != 1 || !d.Next() || d.ClaimedGeneration != 2 || d.CurrentGeneration != 1 {
				t.Fatalf("damage = %+v; want slot 1 at generation 2, the one after 1", d)
			}
			if f.text != (d.Anchor != nil && *d.Anchor == b) {
				t.Fatalf("damage.Anchor = %+v; want the stored checkpoint: %v", d.Anchor, f.text)
			}
			// Restored to the previous write: the database ends at a's seq.
			err = d.Check(a.Checkpoint, pubOf(receiverKey), testReceiver, headAt(4), hashAt)
			var re *RollbackError
			var se *SuspectedRollbackError
			switch {
			case !errors.Is(err, ErrRollbackDetected):
				t.Fatalf("Check at seq 4 = %v; want ErrRollbackDetected", err)
			case f.text && !errors.As(err, &re):
				t.Fatalf("Check at seq 4 = %v; want a *RollbackError naming the damaged slot's checkpoint", err)
			case f.text && re.Anchor != b.Checkpoint:
				t.Fatalf("RollbackError names seq %d; want 5", re.Anchor.Seq)
			case !f.text && (!errors.As(err, &se) || se.Head != headAt(4) || se.Anchor != a.Checkpoint || se.Damage.Slot != 1):
				t.Fatalf("Check at seq 4 = %#v; want a *SuspectedRollbackError", err)
			case !strings.Contains(err.Error(), "anchor slot 1 is damaged"):
				t.Fatalf("Check at seq 4 = %v; the message does not name the damaged slot", err)
			}
			// The crash window, and later: the database holds the write.
			for _, seq := range []uint64{5, 6} {
				if err := d.Check(a.Checkpoint, pubOf(receiverKey), testReceiver, headAt(seq), hashAt); err != nil {
					t.Fatalf("Check at seq %d = %v; want nil", seq, err)
				}
			}
			// Another history at the damaged slot's seq.
			other := func(uint64) (Hash, error) { return Hash{0xee}, nil }
			err = d.Check(a.Checkpoint, pubOf(receiverKey), testReceiver, headAt(6), other)
			if f.text != errors.Is(err, ErrForkDetected) || !f.text && err != nil {
				t.Fatalf("Check over another history = %v; want a fork exactly when the slot's checkpoint verifies (%v)", err, f.text)
			}
			// The checkpoint is evidence only under the receiver's key.
			err = d.Check(a.Checkpoint, pubOf(otherKey), testReceiver, headAt(5), hashAt)
			if err != nil {
				t.Fatalf("Check under another key at seq 5 = %v; want nil", err)
			}
		})
		t.Run("older/"+f.name, func(t *testing.T) {
			m := flipped(two, f.at(two[:4096]))
			i, cur, d, err := parseAnchorFile(m)
			if err != nil || i != 1 || cur.sc != b {
				t.Fatalf("parseAnchorFile = slot %d seq %d, %v; want slot 1, seq 5", i, cur.sc.Seq, err)
			}
			if d == nil || d.Slot != 0 || d.Next() || d.ClaimedGeneration != 1 || d.CurrentGeneration != 2 {
				t.Fatalf("damage = %+v; want slot 0 at generation 1 beside 2", d)
			}
			if err := d.Check(b.Checkpoint, pubOf(receiverKey), testReceiver, headAt(5), hashAt); err != nil {
				t.Fatalf("Check = %v; damage to the older slot is no error", err)
			}
		})
	}
	var none *SlotDamage
	if err := none.Check(a.Checkpoint, pubOf(receiverKey), testReceiver, headAt(4), hashAt); err != nil {
		t.Fatalf("nil damage: %v", err)
	}
}

// Ensure that zero bytes in a slot that generation 2 or later shows was
// written are reported, and that the empty slot of a new file is not.
// (Erasing generation 2 leaves exactly a new file: that cannot be told.)
func TestFileAnchor_ErasedSlot(t *testing.T) {
	recs, _ := testChain(t, 6)
	a := checkpointOf(t, receiverKey, testReceiver, recs, 4)
	b := checkpointOf(t, receiverKey, testReceiver, recs, 5)
	if rep, err := storeAll(t, a).Inspect(); err != nil || rep.Damage != nil || rep.Generation != 1 || rep.Slot != 0 {
		t.Fatalf("new file: %+v, %v; want generation 1 in slot 0 and no damage", rep, err)
	}
	// Generation 3 in slot 0, 2 in slot 1: erasing slot 0 leaves slot 1
	// current at generation 2, beside which no slot can be unwritten.
	fa := storeAll(t, a, b, checkpointOf(t, receiverKey, testReceiver, recs, 6))
	data := readAnchor(t, fa)
	copy(data, make([]byte, 4096))
	writeAnchor(t, fa, data)
	rep, err := fa.Inspect()
	if err != nil || rep.Current != b || rep.Damage == nil || rep.Damage.Problem != SlotErased || rep.Damage.Slot != 0 ||
		rep.Damage.ClaimedGeneration != 0 || rep.Damage.Next() {
		t.Fatalf("erased newest slot: %+v, %v", rep, err)
	}
	if !strings.Contains(rep.Damage.String(), "all zero") {
		t.Fatalf("String() = %q", rep.Damage.String())
	}
}

// Ensure that a write that conflicts because the anchor it expected sits in
// a damaged slot says so, and that a write from the current anchor
// overwrites the damage.
func TestFileAnchor_ConflictNamesDamage(t *testing.T) {
	recs, _ := testChain(t, 6)
	at := func(seq uint64) SignedCheckpoint { return checkpointOf(t, receiverKey, testReceiver, recs, seq) }
	fa := storeAll(t, at(4), at(5))
	writeAnchor(t, fa, flipped(readAnchor(t, fa), 4096+200))
	err := fa.Store(ptrTo(at(5)), at(6))
	if !errors.Is(err, ErrWriteConflict) || !strings.Contains(err.Error(), "anchor slot 1 is damaged") {
		t.Fatalf("Store from the damaged anchor = %v; want ErrWriteConflict naming the damage", err)
	}
	if err := fa.Store(ptrTo(at(4)), at(6)); err != nil {
		t.Fatal(err)
	}
	if rep, err := fa.Inspect(); err != nil || rep.Current != at(6) || rep.Damage != nil || rep.Generation != 2 {
		t.Fatalf("after the next write: %+v, %v", rep, err)
	}
}

// Ensure that Verify reports a damaged slot whatever it concludes, refuses
// a database restored to the previous write, accepts the crash window,
// and calls an anchor file without a readable anchor anchor_damaged.
func TestVerify_AnchorDamage(t *testing.T) {
	recs, _ := testChain(t, 6)
	at := func(seq uint64) SignedCheckpoint { return checkpointOf(t, receiverKey, testReceiver, recs, seq) }
	verify := func(fa FileAnchor, n int) Report {
		t.Helper()
		r, err := Verify(VerifyOptions{Entries: entriesOf(recs[:n]), Anchor: fa, PublicKey: pubOf(receiverKey), Receiver: testReceiver})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, f := range slotFlips {
		t.Run(f.name, func(t *testing.T) {
			fa := storeAll(t, at(4), at(5))
			data := readAnchor(t, fa)
			writeAnchor(t, fa, flipped(data, 4096+f.at(data[4096:])))
			r := verify(fa, 4)
			if r.Problem != ProblemRollbackDetected || !errors.Is(r.Err(), ErrRollbackDetected) ||
				!strings.Contains(r.Detail, "anchor slot 1 is damaged") || r.AnchorDamage == nil || r.Anchor.Seq != 4 {
				t.Fatalf("restored to the previous write: %+v", r)
			}
			for _, n := range []int{5, 6} {
				r := verify(fa, n)
				if !r.OK() || r.AnchorDamage == nil || r.AnchorDamage.Slot != 1 || r.AnchorDamage.ClaimedGeneration != 2 {
					t.Fatalf("chain of %d entries: %+v; want ok with the damage reported", n, r)
				}
			}
		})
	}
	t.Run("fork at the damaged slot's seq", func(t *testing.T) {
		other, _ := testChain(t, 6)
		e := testEntry(5)
		e.Note = "another history"
		c := NewChain(Head{Seq: 4, Hash: HashEntry(other[3].v)})
		raw, _, err := c.Append(e)
		if err != nil {
			t.Fatal(err)
		}
		other[4].v = raw
		fa := storeAll(t, at(4), at(5))
		writeAnchor(t, fa, flipped(readAnchor(t, fa), 4096+4000))
		r, err := Verify(VerifyOptions{Entries: entriesOf(other[:5]), Anchor: fa, PublicKey: pubOf(receiverKey), Receiver: testReceiver})
		if err != nil || r.Problem != ProblemForkDetected || !strings.Contains(r.Detail, "anchor slot 1 is damaged") {
			t.Fatalf("Verify = %+v, %v; want fork_detected at the damaged slot's seq", r, err)
		}
	})
	t.Run("older slot", func(t *testing.T) {
		fa := storeAll(t, at(4), at(5))
		writeAnchor(t, fa, flipped(readAnchor(t, fa), 200))
		if r := verify(fa, 5); !r.OK() || r.AnchorDamage == nil || r.AnchorDamage.Slot != 0 || r.AnchorDamage.Next() {
			t.Fatalf("Verify = %+v; want ok with slot 0 reported", r)
		}
	})
	t.Run("no damage", func(t *testing.T) {
		if r := verify(storeAll(t, at(4), at(5)), 5); !r.OK() || r.AnchorDamage != nil {
			t.Fatalf("Verify = %+v", r)
		}
	})
	for _, tc := range []struct {
		name, want string
		data       func(text4, text5 []byte) []byte
	}{
		{"same generation twice", "both hold generation 2", func(t4, t5 []byte) []byte { return append(wantSlot(2, t4), wantSlot(2, t5)...) }},
		{"no valid slot", "no valid slot", func(t4, t5 []byte) []byte {
			return flipped(append(wantSlot(1, t4), make([]byte, 4096)...), 300)
		}},
		{"short", "8191 bytes", func(t4, t5 []byte) []byte { return append(wantSlot(1, t4), make([]byte, 4095)...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fa := storeAll(t, at(4))
			t4, _ := at(4).MarshalAnchor()
			t5, _ := at(5).MarshalAnchor()
			writeAnchor(t, fa, tc.data(t4, t5))
			r := verify(fa, 5)
			if r.Problem != ProblemAnchorDamaged || !errors.Is(r.Err(), ErrBadAnchor) || errors.Is(r.Err(), ErrBadSignature) ||
				!strings.Contains(r.Detail, "the file is damaged") || !strings.Contains(r.Detail, tc.want) || r.Entries != 5 {
				t.Fatalf("Verify = %+v; want anchor_damaged saying %q", r, tc.want)
			}
		})
	}
}

// Ensure that the damage is described in one line that names the slot,
// its generation and the current one.
func TestSlotDamage_String(t *testing.T) {
	for _, tc := range []struct {
		d    SlotDamage
		want string
	}{
		{SlotDamage{Slot: 1, Detail: "generation 8: checksum mismatch", ClaimedGeneration: 8, CurrentGeneration: 7},
			"anchor slot 1 is damaged: generation 8: checksum mismatch; it was written as generation 8, the write after the current slot's generation 7"},
		{SlotDamage{Slot: 0, Detail: "padding is not zero", ClaimedGeneration: 6, CurrentGeneration: 7},
			"anchor slot 0 is damaged: padding is not zero; it was written as generation 6, beside the current slot's generation 7"},
		{SlotDamage{Slot: 0, Detail: "x", CurrentGeneration: 7},
			"anchor slot 0 is damaged: x; its generation cannot be read; the current slot holds generation 7"},
	} {
		if got := tc.d.String(); got != tc.want {
			t.Errorf("String() =\n%s\nwant\n%s", got, tc.want)
		}
	}
	if got := fmt.Sprint(&SlotDamage{Slot: 1, Detail: "d", CurrentGeneration: 1}); !strings.HasPrefix(got, "anchor slot 1") {
		t.Errorf("fmt.Sprint = %q", got)
	}
}
