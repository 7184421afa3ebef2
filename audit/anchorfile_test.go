//go:build !windows

package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/kvfence/kvfence/internal/testbin"
)

func TestFileAnchor(t *testing.T) {
	storeSuite(t, func(t *testing.T) AnchorStore { return FileAnchor{Path: filepath.Join(t.TempDir(), "anchor")} })
}

// wantSlot builds the slot for text at gen from the specification, not
// from the code under test.
func wantSlot(gen uint64, text []byte) []byte {
	prefix := fmt.Sprintf("kvfence-anchor-slot v1 gen=%020d len=%04d", gen, len(text))
	sum := sha256.Sum256(append([]byte(prefix), text...))
	slot := fmt.Appendf(nil, "%s sha256=%x\n%s", prefix, sum, text)
	return append(slot, make([]byte, 4096-len(slot))...)
}

// storeAll stores scs one after another into a new anchor file and
// returns it.
func storeAll(t testing.TB, scs ...SignedCheckpoint) FileAnchor {
	t.Helper()
	fa := FileAnchor{Path: filepath.Join(t.TempDir(), "anchor")}
	var old *SignedCheckpoint
	for _, sc := range scs {
		if err := fa.Store(old, sc); err != nil {
			t.Fatal(err)
		}
		old = &sc
	}
	return fa
}

func readAnchor(t testing.TB, fa FileAnchor) []byte {
	t.Helper()
	data, err := os.ReadFile(fa.Path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeAnchor(t testing.TB, fa FileAnchor, data []byte) {
	t.Helper()
	if err := os.WriteFile(fa.Path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Ensure that Store writes a 0600 file of two slots exactly as specified,
// alternates between the slots in place without replacing the file, and
// leaves no other file behind.
func TestFileAnchor_Store(t *testing.T) {
	dir := t.TempDir()
	fa := FileAnchor{Path: filepath.Join(dir, "anchor")}
	recs, _ := testChain(t, 5)
	var old *SignedCheckpoint
	var first fs.FileInfo
	var want [2][]byte
	want[1] = make([]byte, 4096)
	for gen := uint64(1); gen <= 4; gen++ {
		sc := checkpointOf(t, receiverKey, testReceiver, recs, gen+1)
		if err := fa.Store(old, sc); err != nil {
			t.Fatal(err)
		}
		old = &sc
		text, _ := sc.MarshalAnchor()
		want[(gen-1)%2] = wantSlot(gen, text)
		if data := readAnchor(t, fa); !bytes.Equal(data, append(bytes.Clone(want[0]), want[1]...)) {
			t.Fatalf("generation %d: file holds\n%q\nwant slots\n%q\n%q", gen, data, want[0], want[1])
		}
		fi, err := os.Stat(fa.Path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != 0o600 {
			t.Fatalf("mode %v, want 0600", fi.Mode())
		}
		if first == nil {
			first = fi
		} else if !os.SameFile(first, fi) {
			t.Fatal("Store replaced the file")
		}
		if got, err := fa.Load(); err != nil || got != sc {
			t.Fatalf("generation %d: Load = %v, want seq %d", gen, err, sc.Seq)
		}
	}
	if names, _ := os.ReadDir(dir); len(names) != 1 {
		t.Fatalf("directory holds %d files, want only the anchor", len(names))
	}
	verifyChain(t, recs[:5], fa)
}

// Ensure that Load refuses everything but one regular, well-formed anchor
// file with a precise error, and that neither Load nor Store changes what
// it refuses.
func TestFileAnchor_Refuses(t *testing.T) {
	recs, _ := testChain(t, 3)
	sc := checkpointOf(t, receiverKey, testReceiver, recs, 3)
	text, _ := sc.MarshalAnchor()
	good := append(wantSlot(1, text), make([]byte, 4096)...)
	write := func(data []byte) func(string) error {
		return func(p string) error { return os.WriteFile(p, data, 0o600) }
	}
	for _, tc := range []struct {
		name  string
		setup func(path string) error
		want  error
	}{
		{"missing", func(string) error { return nil }, ErrAnchorMissing},
		{"symlink", func(p string) error {
			if err := os.WriteFile(p+".real", good, 0o600); err != nil {
				return err
			}
			return os.Symlink(p+".real", p)
		}, ErrAnchorNotRegular},
		{"dangling symlink", func(p string) error { return os.Symlink(p+".nowhere", p) }, ErrAnchorNotRegular},
		{"directory", func(p string) error { return os.Mkdir(p, 0o700) }, ErrAnchorNotRegular},
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o600) }, ErrAnchorNotRegular},
		{"group-writable", func(p string) error {
			if err := os.WriteFile(p, good, 0o600); err != nil {
				return err
			}
			return os.Chmod(p, 0o620)
		}, ErrAnchorPermissions},
		{"garbage", write([]byte("not an anchor\n")), ErrBadAnchor},
		{"empty", write(nil), ErrBadAnchor},
		{"text anchor", write(text), ErrBadAnchor},
		{"one slot", write(good[:4096]), ErrBadAnchor},
		{"one byte short", write(good[:8191]), ErrBadAnchor},
		{"one byte more", write(append(bytes.Clone(good), 0)), ErrBadAnchor},
		{"oversize", write(make([]byte, 1<<20)), ErrBadAnchor},
		{"all zero", write(make([]byte, 8192)), ErrBadAnchor},
		{"same generation twice", write(append(wantSlot(1, text), wantSlot(1, text)...)), ErrBadAnchor},
		{"same generation, other anchors", func(p string) error {
			other, _ := checkpointOf(t, receiverKey, testReceiver, recs, 2).MarshalAnchor()
			return os.WriteFile(p, append(wantSlot(7, text), wantSlot(7, other)...), 0o600)
		}, ErrBadAnchor},
		{"generation 0", write(append(wantSlot(0, text), make([]byte, 4096)...)), ErrBadAnchor},
		{"text anchor in the slot", func(p string) error {
			data := bytes.Clone(good)
			copy(data, text)
			return os.WriteFile(p, data, 0o600)
		}, ErrBadAnchor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fa := FileAnchor{Path: filepath.Join(t.TempDir(), "anchor")}
			if err := tc.setup(fa.Path); err != nil {
				t.Fatal(err)
			}
			before, _ := os.Lstat(fa.Path)
			var content []byte
			if before != nil && before.Mode().IsRegular() {
				content, _ = os.ReadFile(fa.Path)
			}
			if _, err := fa.Load(); !errors.Is(err, tc.want) {
				t.Fatalf("Load: %v, want %v", err, tc.want)
			}
			if tc.want == ErrAnchorMissing {
				if _, err := os.Lstat(fa.Path); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("Load created the anchor: %v", err)
				}
				return
			}
			next := checkpointOf(t, receiverKey, testReceiver, recs, 3)
			for _, old := range []*SignedCheckpoint{nil, &sc} {
				if err := fa.Store(old, next); !errors.Is(err, tc.want) {
					t.Fatalf("Store: %v, want %v", err, tc.want)
				}
			}
			after, _ := os.Lstat(fa.Path)
			var again []byte
			if after.Mode().IsRegular() {
				again, _ = os.ReadFile(fa.Path)
			}
			if !os.SameFile(before, after) || !bytes.Equal(content, again) {
				t.Fatal("Store changed what it refused")
			}
		})
	}
	if _, err := (FileAnchor{}).Load(); err == nil {
		t.Fatal("Load with an empty path succeeded")
	}
}

// Ensure that the slot checks refuse every spelling but the one written.
func TestParseSlot_Rejects(t *testing.T) {
	sc, _ := Sign(receiverKey, testCheckpoint())
	text, _ := sc.MarshalAnchor()
	good := wantSlot(5, text)
	if got, err := parseSlot(good); err != nil || got.gen != 5 || got.sc != sc {
		t.Fatalf("parseSlot(good) = %+v, %v", got, err)
	}
	// reslot rewrites the header as given, with a checksum that matches,
	// so that only the syntax is wrong.
	reslot := func(prefix string, payload []byte) []byte {
		sum := sha256.Sum256(append([]byte(prefix), payload...))
		s := fmt.Appendf(nil, "%s sha256=%x\n%s", prefix, sum, payload)
		return append(s, make([]byte, 4096-len(s))...)
	}
	n := len(text)
	for _, tc := range []struct {
		name string
		slot []byte
	}{
		{"other version", reslot(fmt.Sprintf("kvfence-anchor-slot v2 gen=%020d len=%04d", 5, n), text)},
		{"short gen", reslot(fmt.Sprintf("kvfence-anchor-slot v1 gen=%019d len=%04d", 5, n), text)},
		{"unpadded gen", reslot(fmt.Sprintf("kvfence-anchor-slot v1 gen=5 len=%04d", n), text)},
		{"signed gen", reslot(fmt.Sprintf("kvfence-anchor-slot v1 gen=+%019d len=%04d", 5, n), text)},
		{"gen overflow", reslot(fmt.Sprintf("kvfence-anchor-slot v1 gen=99999999999999999999 len=%04d", n), text)},
		{"gen 0", reslot(fmt.Sprintf("kvfence-anchor-slot v1 gen=%020d len=%04d", 0, n), text)},
		{"len too long", reslot(fmt.Sprintf("kvfence-anchor-slot v1 gen=%020d len=%04d", 5, n+1), append(bytes.Clone(text), 0))},
		{"len beyond the limit", reslot(fmt.Sprintf("kvfence-anchor-slot v1 gen=%020d len=%04d", 5, MaxCheckpointSize+1), make([]byte, MaxCheckpointSize+1))},
		{"five-digit len", reslot(fmt.Sprintf("kvfence-anchor-slot v1 gen=%020d len=%05d", 5, n), text)},
		{"two spaces", reslot(fmt.Sprintf("kvfence-anchor-slot v1 gen=%020d  len=%04d", 5, n), text)},
		{"non-canonical anchor", reslot(fmt.Sprintf("kvfence-anchor-slot v1 gen=%020d len=%04d", 5, n+1),
			bytes.Replace(text, []byte("seq 42"), []byte("seq 042"), 1))},
		{"upper-case checksum", bytes.Replace(good, []byte(fmt.Sprintf("%x", sha256.Sum256(append(good[:56:56], text...)))),
			[]byte(strings.ToUpper(fmt.Sprintf("%x", sha256.Sum256(append(good[:56:56], text...))))), 1)},
		{"CRLF", bytes.Replace(good, []byte("\nkvfence checkpoint"), []byte("\r\nkvfence checkpoint"), 1)[:4096]},
		{"padding not zero", func() []byte { s := bytes.Clone(good); s[4095] = ' '; return s }()},
		{"short", good[:4095]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := parseSlot(tc.slot); err == nil {
				t.Fatalf("accepted generation %d, seq %d", got.gen, got.sc.Seq)
			}
			if len(tc.slot) != 4096 {
				return
			}
			file := append(bytes.Clone(tc.slot), make([]byte, 4096)...)
			if _, _, _, err := parseAnchorFile(file); !errors.Is(err, ErrBadAnchor) {
				t.Fatalf("parseAnchorFile: %v, want ErrBadAnchor", err)
			}
		})
	}
}

// Ensure that every single-byte change of an anchor file either makes
// Load refuse it or makes Load return exactly an anchor that was stored:
// in a file of one generation, a change to its slot is refused and a
// change to the empty slot ignored; in a file of two, a change to the
// newer slot falls back to the older anchor and a change to the older slot
// leaves the newer one. No change yields a checkpoint that was not stored,
// and none goes unreported: Inspect names the changed slot and, in a file
// of two generations, the generation that slot was written at, even when
// the change is in the header's digits.
func TestFileAnchor_Mangling(t *testing.T) {
	recs, _ := testChain(t, 4)
	a := checkpointOf(t, receiverKey, testReceiver, recs, 3)
	b := checkpointOf(t, receiverKey, testReceiver, recs, 4)
	one := readAnchor(t, storeAll(t, a))
	two := readAnchor(t, storeAll(t, a, b)) // a in slot 0 at gen 1, b in slot 1 at gen 2
	for _, tc := range []struct {
		name string
		data []byte
		want [2]*SignedCheckpoint // what Load returns when slot 0 or 1 is changed; nil: refused
		gen  [2]uint64            // the generation Inspect names for a changed slot 0 or 1; 0: none
		cur  [2]uint64            // the current generation when slot 0 or 1 is changed
	}{
		{"one generation", one, [2]*SignedCheckpoint{nil, &a}, [2]uint64{0, 0}, [2]uint64{0, 1}},
		{"two generations", two, [2]*SignedCheckpoint{&b, &a}, [2]uint64{1, 2}, [2]uint64{2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(i int, m []byte, sc SignedCheckpoint, d *SlotDamage, err error) {
				t.Helper()
				slot := i / 4096
				want := tc.want[slot]
				switch {
				case want == nil && !errors.Is(err, ErrBadAnchor):
					t.Fatalf("byte %d = %#x: Load = seq %d, %v; want ErrBadAnchor", i, m[i], sc.Seq, err)
				case want == nil:
				case err != nil || sc != *want:
					t.Fatalf("byte %d = %#x: Load = seq %d, %v; want seq %d", i, m[i], sc.Seq, err, want.Seq)
				case d == nil:
					t.Fatalf("byte %d = %#x: the changed slot %d is not reported", i, m[i], slot)
				case d.Slot != slot || d.ClaimedGeneration != tc.gen[slot] || d.CurrentGeneration != tc.cur[slot]:
					t.Fatalf("byte %d = %#x: reported %+v; want slot %d, generation %d beside %d",
						i, m[i], d, slot, tc.gen[slot], tc.cur[slot])
				case d.Next() != (tc.gen[slot] == 2):
					t.Fatalf("byte %d = %#x: Next() = %v for %+v", i, m[i], d.Next(), d)
				}
			}
			// Every value of every header byte, every bit flip and the
			// inverted byte elsewhere (TestParseAnchor_Mangling tries
			// every value in the anchor), decoded as Load decodes.
			m := bytes.Clone(tc.data)
			for i := range m {
				orig := m[i]
				for d := 1; d < 256; d++ {
					full := i%4096 < 129 && !raceEnabled && !testing.Short()
					if !full && d&(d-1) != 0 && d != 0xff {
						continue
					}
					m[i] = orig ^ byte(d)
					_, cur, damage, err := parseAnchorFile(m)
					check(i, m, cur.sc, damage, err)
				}
				m[i] = orig
			}
			// One flip of every byte through the file itself.
			fa := FileAnchor{Path: filepath.Join(t.TempDir(), "anchor")}
			// A prime stride, so that the bytes tried do not line up with
			// the fields; the loop above has tried every byte through the
			// same decoder.
			stride := 1
			switch {
			case testing.Short():
				stride = 61
			case raceEnabled:
				stride = 7
			}
			for i := 0; i < len(m); i += stride {
				m[i] ^= 0x20
				writeAnchor(t, fa, m)
				rep, err := fa.Inspect()
				check(i, m, rep.Current, rep.Damage, err)
				if sc, lerr := fa.Load(); sc != rep.Current || (lerr == nil) != (err == nil) {
					t.Fatalf("byte %d: Load = seq %d, %v; Inspect = seq %d, %v", i, sc.Seq, lerr, rep.Current.Seq, err)
				}
				m[i] ^= 0x20
			}
		})
	}
}

// Ensure that a write torn at any point leaves Load returning the
// previous anchor, unless what reached the file is the whole new slot, and
// that the next Store succeeds and overwrites the damaged slot. A long
// receiver id makes the anchor longer than the first 512 bytes of a slot,
// so that a torn sector lands inside it.
func TestFileAnchor_TornWrite(t *testing.T) {
	recs, _ := testChain(t, 6)
	for _, receiver := range []string{testReceiver, strings.Repeat("r", 400)} {
		at := func(seq uint64) SignedCheckpoint { return checkpointOf(t, receiverKey, receiver, recs, seq) }
		a, b, c := at(3), at(4), at(5)
		text, _ := c.MarshalAnchor()
		for _, gens := range []int{1, 2} {
			stored := []SignedCheckpoint{a, b}[:gens]
			prev := stored[gens-1]
			target := gens % 2 // the slot the next write goes to
			whole := wantSlot(uint64(gens+1), text)
			for _, tc := range []struct {
				name     string
				from, to int
			}{
				{"first byte", 0, 1},
				{"first 64 bytes", 0, 64},
				{"header only", 0, 129},
				{"half the anchor", 0, 129 + len(text)/2},
				{"all but the last anchor byte", 0, 129 + len(text) - 1},
				{"first 512 bytes", 0, 512},
				{"last 3584 bytes", 512, 4096},
				{"all but the first byte", 1, 4096},
				{"checksum only", 64, 128},
			} {
				t.Run(fmt.Sprintf("receiver=%d/generations=%d/%s", len(receiver), gens, tc.name), func(t *testing.T) {
					fa := storeAll(t, stored...)
					data := readAnchor(t, fa)
					slot := data[target*4096 : (target+1)*4096]
					copy(slot[tc.from:], whole[tc.from:tc.to])
					want := prev
					if bytes.Equal(slot, whole) {
						want = c // everything that differs reached the file
					} else if len(text) > 512 && tc.to == 512 && tc.from == 0 {
						// The case the long receiver exists for happened.
						t.Log("first sector torn inside the anchor")
					}
					writeAnchor(t, fa, data)
					if got, err := fa.Load(); err != nil || got != want {
						t.Fatalf("after a torn write Load = seq %d, %v; want seq %d", got.Seq, err, want.Seq)
					}
					if want == c {
						return
					}
					if err := fa.Store(&prev, c); err != nil {
						t.Fatal(err)
					}
					if got, err := fa.Load(); err != nil || got != c {
						t.Fatalf("after the next Store Load = seq %d, %v; want seq %d", got.Seq, err, c.Seq)
					}
					if data := readAnchor(t, fa); !bytes.Equal(data[target*4096:(target+1)*4096], whole) {
						t.Fatalf("slot %d holds\n%q\nwant\n%q", target, data[target*4096:(target+1)*4096], whole)
					}
				})
			}
		}
	}
}

// Ensure that slots are ordered by generation, not seq: after Supersede
// moves the anchor back, the lower seq is the current anchor, and the next
// Store and Load build on it.
func TestFileAnchor_SupersedeWinsByGeneration(t *testing.T) {
	recs, _ := testChain(t, 10)
	at := func(seq uint64) SignedCheckpoint { return checkpointOf(t, receiverKey, testReceiver, recs, seq) }
	fa := storeAll(t, at(5), at(8))
	if err := fa.Store(ptrTo(at(8)), at(3)); !errors.Is(err, ErrAnchorRegression) {
		t.Fatalf("Store(seq 3 over 8) = %v, want ErrAnchorRegression", err)
	}
	if err := fa.Supersede(at(8), at(3)); err != nil {
		t.Fatal(err)
	}
	// Slot 0 now holds seq 3 at gen 3, and slot 1 holds it again at gen
	// 4: the superseded seq 8 is in neither, so damage to one slot cannot
	// bring it back.
	data := readAnchor(t, fa)
	t3, _ := at(3).MarshalAnchor()
	if !bytes.Equal(data, append(wantSlot(3, t3), wantSlot(4, t3)...)) {
		t.Fatalf("file after Supersede:\n%.300q", data)
	}
	for slot := range 2 {
		damaged := bytes.Clone(data)
		damaged[slot*AnchorSlotSize+200] ^= 1
		if err := os.WriteFile(fa.Path, damaged, 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := fa.Load(); err != nil || got != at(3) {
			t.Fatalf("slot %d damaged after Supersede: Load = seq %d, %v; want seq 3", slot, got.Seq, err)
		}
	}
	if err := os.WriteFile(fa.Path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := fa.Load(); err != nil || got != at(3) {
		t.Fatalf("Load = seq %d, %v; want seq 3", got.Seq, err)
	}
	if err := fa.Store(ptrTo(at(8)), at(9)); !errors.Is(err, ErrWriteConflict) {
		t.Fatalf("Store from the superseded anchor = %v, want ErrWriteConflict", err)
	}
	if err := fa.Store(ptrTo(at(3)), at(4)); err != nil {
		t.Fatal(err)
	}
	if got, err := fa.Load(); err != nil || got != at(4) {
		t.Fatalf("Load = seq %d, %v; want seq 4", got.Seq, err)
	}
}

func ptrTo(sc SignedCheckpoint) *SignedCheckpoint { return &sc }

// Ensure that concurrent writers from one old anchor produce exactly one
// winner; the others see ErrWriteConflict, never a lost update.
func TestFileAnchor_ConcurrentStore(t *testing.T) {
	recs, _ := testChain(t, 20)
	dir := t.TempDir()
	base := checkpointOf(t, receiverKey, testReceiver, recs, 4)
	if err := (FileAnchor{Path: filepath.Join(dir, "anchor")}).Store(nil, base); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		next := checkpointOf(t, receiverKey, testReceiver, recs, uint64(5+i%16))
		wg.Go(func() { errs[i] = FileAnchor{Path: filepath.Join(dir, "anchor")}.Store(&base, next) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrWriteConflict):
			t.Fatalf("Store: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d writers won, want 1", won)
	}
}

// Ensure that concurrent creators of a missing anchor produce exactly one
// winner, and that the file they leave is whole.
func TestFileAnchor_ConcurrentCreate(t *testing.T) {
	recs, _ := testChain(t, 8)
	fa := FileAnchor{Path: filepath.Join(t.TempDir(), "anchor")}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	scs := make([]SignedCheckpoint, len(errs))
	for i := range errs {
		scs[i] = checkpointOf(t, receiverKey, testReceiver, recs, uint64(1+i))
		wg.Go(func() { errs[i] = fa.Store(nil, scs[i]) })
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("writers %d and %d both created the anchor", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, ErrWriteConflict):
			t.Fatalf("Store: %v", err)
		}
	}
	if got, err := fa.Load(); won < 0 || err != nil || got != scs[won] {
		t.Fatalf("Load = seq %d, %v; winner %d", got.Seq, err, won)
	}
}

// TestHelperAnchorWriter is not a test: run by
// TestFileAnchor_ConcurrentProcesses and others in a child process, it
// moves the anchor forward by one seq at a time, from whatever it loads,
// KVFENCE_TEST_ANCHOR_TRIES times (100 if unset), and prints how many of
// its writes won.
func TestHelperAnchorWriter(t *testing.T) {
	path := os.Getenv("KVFENCE_TEST_ANCHOR_WRITER")
	if path == "" {
		return
	}
	tries := 100
	if s := os.Getenv("KVFENCE_TEST_ANCHOR_TRIES"); s != "" {
		var err error
		if tries, err = strconv.Atoi(s); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
	}
	n, err := anchorRace(FileAnchor{Path: path}, tries)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(n)
	os.Exit(0)
}

// anchorRace runs tries read-increment-store rounds on fa and returns the
// number of Stores that won; ErrWriteConflict is a lost race, not an error.
func anchorRace(fa FileAnchor, tries int) (won int, err error) {
	for range tries {
		cur, err := fa.Load()
		if err != nil {
			return won, err
		}
		next, err := Sign(receiverKey, Checkpoint{Root: testRoot, Receiver: testReceiver, Seq: cur.Seq + 1, Head: Hash{byte(cur.Seq + 1)}, At: t0})
		if err != nil {
			return won, err
		}
		switch err := fa.Store(&cur, next); {
		case err == nil:
			won++
		case !errors.Is(err, ErrWriteConflict):
			return won, err
		}
	}
	return won, nil
}

// Ensure that compare-and-swap holds across processes and goroutines: each
// winning Store moves the anchor by exactly one seq, so the final seq is
// the number of wins. A lost update would make it smaller.
func TestFileAnchor_ConcurrentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	fa := FileAnchor{Path: filepath.Join(t.TempDir(), "anchor")}
	base, err := Sign(receiverKey, Checkpoint{Root: testRoot, Receiver: testReceiver, Seq: 1, Head: Hash{1}, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	if err := fa.Store(nil, base); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wins := make([]int, 4)
	errs := make([]error, len(wins))
	for i := range wins {
		wg.Go(func() {
			if i%2 == 0 {
				wins[i], errs[i] = anchorRace(fa, 100)
				return
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAnchorWriter$")
			cmd.Env = testbin.ChildEnv("KVFENCE_TEST_ANCHOR_WRITER=" + fa.Path)
			out, err := cmd.Output()
			if err != nil {
				errs[i] = fmt.Errorf("%v: %s", err, out)
				return
			}
			line, _, _ := bufio.NewReader(bytes.NewReader(out)).ReadLine()
			wins[i], errs[i] = strconv.Atoi(string(line))
		})
	}
	wg.Wait()
	total := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
		total += wins[i]
	}
	got, err := fa.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != 1+uint64(total) {
		t.Fatalf("anchor at seq %d after %d winning writes from seq 1: updates were lost", got.Seq, total)
	}
	if wins[1] == 0 && wins[3] == 0 {
		t.Log("no child process won a write; the test did not exercise cross-process contention")
	}
}

// FuzzLoadAnchorFile writes arbitrary bytes as the anchor file. Load must
// refuse them with ErrBadAnchor or return the checkpoint of a slot that,
// written again at its generation, is byte for byte the slot in the file.
func FuzzLoadAnchorFile(f *testing.F) {
	recs, _ := testChain(f, 3)
	a := checkpointOf(f, receiverKey, testReceiver, recs, 2)
	b := checkpointOf(f, receiverKey, testReceiver, recs, 3)
	one := readAnchor(f, storeAll(f, a))
	two := readAnchor(f, storeAll(f, a, b))
	textA, _ := a.MarshalAnchor()
	for _, seed := range [][]byte{
		one, two, nil, textA, make([]byte, 8192), one[:4096],
		append(bytes.Clone(two[:4096]), two[:4096]...),                                    // one generation twice
		append(bytes.Clone(two[4096:]), two[:4096]...),                                    // slots swapped
		append(append(bytes.Clone(two[:4096]), two[4096:4608]...), make([]byte, 3584)...), // torn
		append(bytes.Clone(one), 0),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fa := FileAnchor{Path: filepath.Join(t.TempDir(), "anchor")}
		writeAnchor(t, fa, data)
		sc, err := fa.Load()
		if err != nil {
			if !errors.Is(err, ErrBadAnchor) {
				t.Fatalf("error %v does not wrap ErrBadAnchor", err)
			}
			return
		}
		i, cur, damage, err := parseAnchorFile(data)
		if err != nil || cur.sc != sc {
			t.Fatalf("Load and parseAnchorFile disagree: %v", err)
		}
		// The other slot is unreported only if it is valid, or empty
		// beside generation 1.
		other := data[(1-i)*4096 : (2-i)*4096]
		_, oerr := parseSlot(other)
		if quiet := oerr == nil || isZero(other) && cur.gen == 1; quiet != (damage == nil) {
			t.Fatalf("slot %d (%v) beside generation %d: damage %+v", 1-i, oerr, cur.gen, damage)
		}
		if damage != nil && (damage.Slot != 1-i || damage.CurrentGeneration != cur.gen) {
			t.Fatalf("damage %+v for slot %d beside generation %d", damage, 1-i, cur.gen)
		}
		again, err := appendSlot(nil, cur.gen, &sc)
		if err != nil || !bytes.Equal(again, data[i*4096:(i+1)*4096]) {
			t.Fatalf("accepted slot %d\n%q\nre-encodes to\n%q, %v", i, data[i*4096:(i+1)*4096], again, err)
		}
		if back, err := parseSlot(again); err != nil || back != cur {
			t.Fatalf("re-stored slot parses to %+v, %v", back, err)
		}
	})
}

// BenchmarkAnchorWrite measures one durable anchor write three ways: the
// in-place slot write FileAnchor uses (lock, read, compare, one slot
// written, fdatasync); the atomic replace it used before (temporary file,
// fsync, rename, directory fsync, without the lock and read); and
// appending the record to an open file with fsync.
func BenchmarkAnchorWrite(b *testing.B) {
	sign := func(b *testing.B, i uint64) SignedCheckpoint {
		sc, err := Sign(receiverKey, Checkpoint{Root: testRoot, Receiver: testReceiver, Seq: i, Head: Hash{byte(i)}, At: int64(i)})
		if err != nil {
			b.Fatal(err)
		}
		return sc
	}
	b.Run("slots", func(b *testing.B) {
		fa := FileAnchor{Path: filepath.Join(b.TempDir(), "anchor")}
		var old *SignedCheckpoint
		i := uint64(0)
		for b.Loop() {
			i++
			sc := sign(b, i)
			if err := fa.Store(old, sc); err != nil {
				b.Fatal(err)
			}
			old = &sc
		}
	})
	b.Run("replace", func(b *testing.B) {
		dir := b.TempDir()
		path := filepath.Join(dir, "anchor")
		i := uint64(0)
		for b.Loop() {
			i++
			text, _ := sign(b, i).MarshalAnchor()
			if err := replaceFile(dir, path, text); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append", func(b *testing.B) {
		f, err := os.OpenFile(filepath.Join(b.TempDir(), "anchors"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		i := uint64(0)
		for b.Loop() {
			i++
			text, _ := sign(b, i).MarshalAnchor()
			if _, err := f.Write(text); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAnchorStore measures FileAnchor.Store alone: the checkpoints
// are signed once, before the loop, since Store does not verify
// signatures, so the time is the lock, the read, the compare, the slot
// write and the fdatasync. cpu-ns/op is the process's user and system
// time, user-ns/op the user time alone: the wall time is mostly the wait
// for the disk, and the system time mostly the file system's.
func BenchmarkAnchorStore(b *testing.B) {
	signed, err := Sign(receiverKey, Checkpoint{Root: testRoot, Receiver: testReceiver, Seq: 1, Head: Hash{1}, At: t0})
	if err != nil {
		b.Fatal(err)
	}
	fa := FileAnchor{Path: filepath.Join(b.TempDir(), "anchor")}
	if err := fa.Store(nil, signed); err != nil {
		b.Fatal(err)
	}
	old := signed
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for b.Loop() {
		next := old
		next.Seq++
		next.Head = Hash{byte(next.Seq), byte(next.Seq >> 8)}
		if err := fa.Store(&old, next); err != nil {
			b.Fatal(err)
		}
		old = next
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	user := after.Utime.Nano() - before.Utime.Nano()
	sys := after.Stime.Nano() - before.Stime.Nano()
	b.ReportMetric(float64(user+sys)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(user)/float64(b.N), "user-ns/op")
}

// BenchmarkAnchorStoreAlternating is BenchmarkAnchorStore with two
// writers taking turns, as two processes sharing an anchor would: each
// write finds the file the other one wrote, so nothing it remembers
// matches and both slots are parsed. The writers name the file by two
// spellings of its path, which a process remembers apart.
func BenchmarkAnchorStoreAlternating(b *testing.B) {
	signed, err := Sign(receiverKey, Checkpoint{Root: testRoot, Receiver: testReceiver, Seq: 1, Head: Hash{1}, At: t0})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	fas := [2]FileAnchor{{Path: filepath.Join(dir, "anchor")}, {Path: dir + "/./anchor"}}
	if err := fas[0].Store(nil, signed); err != nil {
		b.Fatal(err)
	}
	old := signed
	for b.Loop() {
		next := old
		next.Seq++
		next.Head = Hash{byte(next.Seq), byte(next.Seq >> 8)}
		if err := fas[next.Seq%2].Store(&old, next); err != nil {
			b.Fatal(err)
		}
		old = next
	}
}

// replaceFile durably replaces path by a file holding data: temporary
// file, fsync, rename, directory fsync.
func replaceFile(dir, path string, data []byte) error {
	tmp, err := os.CreateTemp(dir, ".anchor-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// BenchmarkAnchorLoad measures a Load of an anchor file on disk, as every
// batch on a shared store (etcd) and every conflict makes: the shared lock,
// the read and the fdatasync of a file with nothing to write.
func BenchmarkAnchorLoad(b *testing.B) {
	dir, err := os.MkdirTemp(".", "bench-anchor-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	fa := FileAnchor{Path: filepath.Join(dir, "anchor")}
	sc := signedAt(b, 2)
	if err := fa.Store(nil, sc); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if got, err := fa.Load(); err != nil || got != sc {
			b.Fatal(got.Seq, err)
		}
	}
}
