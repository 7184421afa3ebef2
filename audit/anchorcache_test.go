//go:build !windows

package audit

import (
	"bytes"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/internal/testbin"
)

// signedAt is a checkpoint of testReceiver at seq, signed, as the anchor
// tests' child process makes them.
func signedAt(t testing.TB, seq uint64) SignedCheckpoint {
	t.Helper()
	sc, err := Sign(receiverKey, Checkpoint{Root: testRoot, Receiver: testReceiver, Seq: seq, Head: Hash{byte(seq)}, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// Ensure that a write compares against the file as it is, whoever wrote it
// last: after this process stored a and then b, another writer (another
// FileAnchor on the same file, another process, an operator putting back
// an old copy, damage to b's slot) makes a Store that names b fail with
// ErrWriteConflict and change nothing, and a Store that names the anchor
// now in the file succeed.
func TestFileAnchor_StoreSeesOtherWriters(t *testing.T) {
	a, b, d := signedAt(t, 2), signedAt(t, 3), signedAt(t, 9)
	for _, tc := range []struct {
		name string
		// other changes the file after a and b were stored; afterA is the
		// file as it was after a. It returns the anchor now current.
		other func(t *testing.T, fa FileAnchor, afterA []byte) SignedCheckpoint
		// damaged is set if the conflict must name a damaged slot.
		damaged bool
	}{
		{"another FileAnchor on the same file", func(t *testing.T, fa FileAnchor, _ []byte) SignedCheckpoint {
			c := signedAt(t, 4)
			other := FileAnchor{Path: filepath.Dir(fa.Path) + "/./" + filepath.Base(fa.Path)}
			if err := other.Store(&b, c); err != nil {
				t.Fatal(err)
			}
			return c
		}, false},
		{"another process", func(t *testing.T, fa FileAnchor, _ []byte) SignedCheckpoint {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAnchorWriter$")
			cmd.Env = testbin.ChildEnv("KVFENCE_TEST_ANCHOR_WRITER="+fa.Path, "KVFENCE_TEST_ANCHOR_TRIES=1")
			if out, err := cmd.Output(); err != nil || !bytes.HasPrefix(out, []byte("1\n")) {
				t.Fatalf("child writer: %v: %s", err, out)
			}
			return signedAt(t, b.Seq+1)
		}, false},
		{"an old copy put back", func(t *testing.T, fa FileAnchor, afterA []byte) SignedCheckpoint {
			writeAnchor(t, fa, afterA)
			return a
		}, false},
		{"the current slot damaged", func(t *testing.T, fa FileAnchor, _ []byte) SignedCheckpoint {
			writeAnchor(t, fa, flipped(readAnchor(t, fa), AnchorSlotSize+slotHeaderLen+40))
			return a
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fa := FileAnchor{Path: filepath.Join(t.TempDir(), "anchor")}
			if err := fa.Store(nil, a); err != nil {
				t.Fatal(err)
			}
			afterA := readAnchor(t, fa)
			if err := fa.Store(&a, b); err != nil {
				t.Fatal(err)
			}
			cur := tc.other(t, fa, afterA)
			before := readAnchor(t, fa)
			err := fa.Store(&b, d)
			if !errors.Is(err, ErrWriteConflict) {
				t.Fatalf("Store from b after another writer: %v, want ErrWriteConflict", err)
			}
			if tc.damaged != strings.Contains(err.Error(), "anchor slot 1 is damaged") {
				t.Fatalf("Store from b after another writer: %v; damage named: %v, want %v", err, !tc.damaged, tc.damaged)
			}
			if !bytes.Equal(readAnchor(t, fa), before) {
				t.Fatal("the refused Store changed the file")
			}
			if err := fa.Store(&cur, d); err != nil {
				t.Fatalf("Store from the current anchor: %v", err)
			}
			if got, err := fa.Load(); err != nil || got != d {
				t.Fatalf("Load = seq %d, %v; want seq %d", got.Seq, err, d.Seq)
			}
		})
	}
}

// checkRemembered fails unless every slot of fa's file that parses is
// remembered, and what is remembered of each slot is the file's bytes
// there with what parseSlot makes of them.
func checkRemembered(t *testing.T, fa FileAnchor, step string) {
	t.Helper()
	data := readAnchor(t, fa)
	m := slotMemoFor(fa.Path)
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range AnchorSlots {
		s := data[i*AnchorSlotSize : (i+1)*AnchorSlotSize]
		want, err := parseSlot(s)
		if err != nil {
			continue
		}
		if !m.ok[i] || !bytes.Equal(m.data[i][:], s) || m.slots[i] != want {
			t.Fatalf("%s: slot %d: remembered %v %+v; the file's slot parses to %+v", step, i, m.ok[i], m.slots[i], want)
		}
	}
}

// Ensure that after every kind of write, and a read, what a FileAnchor
// remembers is the file's slots and their parse, for ordinary checkpoints
// and for ones at the limits of every field.
func TestFileAnchor_RemembersWhatItParses(t *testing.T) {
	recs, _ := testChain(t, 6)
	at := func(seq uint64) SignedCheckpoint { return checkpointOf(t, receiverKey, testReceiver, recs, seq) }
	fa := storeAll(t, at(2))
	if _, err := fa.Inspect(); err != nil {
		t.Fatal(err)
	}
	checkRemembered(t, fa, "Inspect of a new file")
	steps := []struct {
		name string
		do   func() error
	}{
		{"Store", func() error { return fa.Store(ptrTo(at(2)), at(3)) }},
		{"Store again", func() error { return fa.Store(ptrTo(at(3)), at(5)) }},
		{"Store of the current anchor", func() error { return fa.Store(ptrTo(at(5)), at(5)) }},
		{"Supersede back", func() error { return fa.Supersede(at(5), at(4)) }},
		{"Store after Supersede", func() error { return fa.Store(ptrTo(at(4)), at(6)) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		checkRemembered(t, fa, s.name)
	}

	// Store does not verify signatures, so checkpoints at the limits need
	// none.
	long := strings.Repeat("é", MaxReceiverLen/2)
	first := SignedCheckpoint{Checkpoint: Checkpoint{Root: testRoot, Receiver: long, Seq: 1, At: math.MinInt64}}
	last := SignedCheckpoint{Checkpoint: Checkpoint{Root: testRoot, Receiver: long, Seq: math.MaxUint64, EpochHighWater: math.MaxUint64, At: math.MaxInt64,
		Head: Hash(bytes.Repeat([]byte{0xff}, HashSize)), State: Hash(bytes.Repeat([]byte{0xfe}, HashSize))},
		Key: Fingerprint(bytes.Repeat([]byte{0xfd}, len(Fingerprint{})))}
	copy(last.Signature[:], bytes.Repeat([]byte{0xfc}, len(last.Signature)))
	edge := storeAll(t, first)
	if err := edge.Store(&first, last); err != nil {
		t.Fatal(err)
	}
	checkRemembered(t, edge, "Store at the limits")
}

// Ensure that appendSlot writes a slot exactly as the format specifies,
// wherever it starts in the buffer, and that parseSlot returns from it the
// generation and checkpoint written: what a FileAnchor remembers after a
// write relies on it.
func TestAnchorSlot_RoundTrip(t *testing.T) {
	sc, err := Sign(receiverKey, testCheckpoint())
	if err != nil {
		t.Fatal(err)
	}
	long := sc
	long.Receiver = strings.Repeat("\u00e9\u4e16", MaxReceiverLen/5) + "xy"
	limits := sc
	limits.Seq, limits.EpochHighWater, limits.At = math.MaxUint64, math.MaxUint64, math.MaxInt64
	early := sc
	early.At, early.Head, early.State = math.MinInt64, Hash{}, Hash{}
	for _, c := range []SignedCheckpoint{sc, long, limits, early} {
		for _, gen := range []uint64{1, 2, 10, math.MaxUint64} {
			checkSlotRoundTrip(t, gen, c)
		}
	}
}

func checkSlotRoundTrip(t *testing.T, gen uint64, sc SignedCheckpoint) {
	t.Helper()
	text, err := sc.MarshalAnchor()
	if err != nil {
		t.Fatal(err)
	}
	for _, prefix := range [][]byte{nil, []byte("before the slot")} {
		b, err := appendSlot(bytes.Clone(prefix), gen, &sc)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b[:len(prefix)], prefix) || !bytes.Equal(b[len(prefix):], wantSlot(gen, text)) {
			t.Fatalf("generation %d, %d-byte prefix: slot\n%q\nwant\n%q", gen, len(prefix), b[len(prefix):], wantSlot(gen, text))
		}
		if got, err := parseSlot(b[len(prefix):]); err != nil || got != (anchorSlot{gen, sc}) {
			t.Fatalf("generation %d: the slot parses to %+v, %v", gen, got, err)
		}
	}
}

// FuzzAnchorSlotRoundTrip checks TestAnchorSlot_RoundTrip's property for
// arbitrary checkpoints: every one that appendSlot writes parses back to
// itself.
func FuzzAnchorSlotRoundTrip(f *testing.F) {
	f.Add(testReceiver, uint64(1), uint64(0), int64(0), []byte{1}, []byte{2}, uint64(1))
	f.Add(strings.Repeat("é", MaxReceiverLen/2), uint64(math.MaxUint64), uint64(math.MaxUint64), int64(math.MinInt64),
		bytes.Repeat([]byte{0xff}, 32), bytes.Repeat([]byte{0xff}, 64), uint64(math.MaxUint64))
	f.Add("a b\u0085c", uint64(42), uint64(7), int64(math.MaxInt64), []byte(nil), []byte(nil), uint64(2))
	f.Fuzz(func(t *testing.T, receiver string, seq, epoch uint64, at int64, head, sig []byte, gen uint64) {
		sc := SignedCheckpoint{Checkpoint: Checkpoint{Root: testRoot, Receiver: receiver, Seq: seq, EpochHighWater: epoch, At: at}}
		copy(sc.Head[:], head)
		copy(sc.State[:], sig)
		copy(sc.Key[:], head)
		copy(sc.Signature[:], sig)
		if checkCheckpoint(&sc.Checkpoint) != nil || gen == 0 {
			return
		}
		checkSlotRoundTrip(t, gen, sc)
	})
}

// Ensure that a read is never cut short by the size the file was last seen
// to have: whatever the size passed, readSlots reads what is there, up to
// one byte past the format's size.
func TestFileAnchor_ReadIgnoresStaleSize(t *testing.T) {
	recs, _ := testChain(t, 3)
	b := checkpointOf(t, receiverKey, testReceiver, recs, 3)
	good := readAnchor(t, storeAll(t, checkpointOf(t, receiverKey, testReceiver, recs, 2), b))
	for _, content := range [][]byte{good[:AnchorSlotSize], good[:AnchorFileSize-1], good, append(bytes.Clone(good), 1, 2)} {
		fa := FileAnchor{Path: filepath.Join(t.TempDir(), "anchor")}
		writeAnchor(t, fa, content)
		want := content[:min(len(content), AnchorFileSize+1)]
		for _, size := range []int64{-1, 0, 1, AnchorSlotSize, AnchorFileSize - 1, AnchorFileSize, AnchorFileSize + 1, 1 << 20} {
			file, _, err := fa.open(os.O_RDONLY)
			if err != nil {
				t.Fatal(err)
			}
			_, cur, _, err := fa.readSlots(file, new(anchorBuf), size, new(slotMemo))
			file.close()
			if len(content) != AnchorFileSize {
				// The error names how many bytes were read.
				if !errors.Is(err, ErrBadAnchor) || !strings.Contains(err.Error(), ": "+strconv.Itoa(len(want))+" bytes") {
					t.Fatalf("%d-byte file, size %d: %v", len(content), size, err)
				}
				continue
			}
			if err != nil || cur.sc != b {
				t.Fatalf("%d-byte file, size %d: read seq %d, %v", len(content), size, cur.sc.Seq, err)
			}
		}
	}
}
