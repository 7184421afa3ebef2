package kvfence

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
	bolt "go.etcd.io/bbolt"
)

// Ensure that a database file cut short anywhere, emptied, or replaced by
// a file of another format is refused with an error, never a crash, and
// that a file cut only in the space bbolt has not used yet still opens.
func TestHostileFiles_Database(t *testing.T) {
	b := newCorruptBase(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "hostile.db")
	// Each attempt gets its own copy of the anchor: a writable open that
	// succeeds moves it.
	opts := func() *Options {
		anchor := &audit.MemAnchor{}
		if err := anchor.Store(nil, b.anchor); err != nil {
			t.Fatal(err)
		}
		return &Options{Key: testKey, Anchor: anchor, Now: b.clock.Now, NoSync: true, LockTimeout: -1}
	}
	// The pages bbolt uses end at its high-water mark; the file is grown
	// beyond it in advance.
	var hwm int64
	{
		c := &pageChecker{r: bytes.NewReader(b.data), size: int64(len(b.data))}
		if err := c.meta(); err != nil {
			t.Fatal(err)
		}
		hwm = int64(c.m.pgid) * c.pageSize
	}
	opened := 0
	for n := 0; n < len(b.data); n += 512 {
		if err := os.WriteFile(path, b.data[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := Open(path, opts())
		switch {
		case int64(n) >= hwm && err != nil:
			t.Errorf("cut to %d bytes, after every used page (%d): %v", n, hwm, err)
		case int64(n) < hwm && err == nil:
			t.Errorf("cut to %d bytes, inside the used pages (%d): opened", n, hwm)
		case err != nil && !errors.Is(err, ErrBadFormat):
			t.Errorf("cut to %d bytes: %v, want ErrBadFormat", n, err)
		}
		if err == nil {
			opened++
			if res, err := r.Submit(t.Context(), b.stale.name, b.stale.envelope); err != nil || res.Outcome != Denied {
				t.Errorf("cut to %d bytes: stale submit %+v, %v", n, res, err)
			}
			r.Close()
		}
	}
	if opened == 0 {
		t.Fatal("no cut after the used pages was tried")
	}

	rng := rand.New(rand.NewPCG(7, 7))
	random := make([]byte, len(b.data))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	zeroed := append([]byte(nil), b.data...)
	clear(zeroed[2*4096 : 6*4096])
	plainBolt := filepath.Join(dir, "plain.db")
	db, err := bolt.Open(plainBolt, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	plain, err := os.ReadFile(plainBolt)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"random bytes", random},
		{"zeroed pages", zeroed},
		{"sqlite", append([]byte("SQLite format 3\x00"), make([]byte, 8192)...)},
		{"text", []byte("kvfence checkpoint v1\nreceiver test-receiver\n")},
		{"one byte", []byte{0}},
		{"bbolt with the buckets but no receiver", plain},
		{"meta pages only", b.data[:2*4096]},
	} {
		if err := os.WriteFile(path, tc.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if r, err := Open(path, opts()); !errors.Is(err, ErrBadFormat) {
			if err == nil {
				r.Close()
			}
			t.Errorf("%s: Open = %v, want ErrBadFormat", tc.name, err)
		}
		if _, err := VerifyChain(path, VerifyOptions{Anchor: opts().Anchor, PublicKey: testKey.Public().(ed25519.PublicKey)}); !errors.Is(err, ErrBadFormat) {
			t.Errorf("%s: VerifyChain = %v, want ErrBadFormat", tc.name, err)
		}
	}
}

// Ensure that the database path as a symbolic link is followed to a
// receiver database (the path is the operator's), and that a dangling
// link, a link loop and a link to a directory are refused.
func TestHostileFiles_DatabaseLinks(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.r.Close()
	dir := t.TempDir()
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(f.path, link); err != nil {
		t.Fatal(err)
	}
	r, err := Open(link, f.opts())
	if err != nil {
		t.Fatalf("Open through a symbolic link: %v", err)
	}
	r.Close()
	for _, tc := range []struct {
		name, target string
		want         error
	}{
		{"dangling", filepath.Join(dir, "nowhere"), ErrNotInitialized},
		{"directory", dir, ErrBadFormat},
		{"loop", filepath.Join(dir, "loop.db"), nil},
	} {
		p := filepath.Join(dir, tc.name+".db")
		if tc.name == "loop" {
			p = tc.target
		}
		if err := os.Symlink(tc.target, p); err != nil {
			t.Fatal(err)
		}
		_, err := Open(p, f.opts())
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s link: Open = %v, want %v", tc.name, err, tc.want)
		}
	}
	f.reopen()
}

// Ensure that an anchor file cut short anywhere, or with a byte changed,
// either makes Open refuse the receiver with an integrity error (and is
// never replaced), or leaves the file's other, older slot as the anchor: a
// change in the newest slot is what a torn write leaves, and the receiver
// then opens as after a crash between a commit and its anchor write. No
// change ever yields a checkpoint that was not stored.
func TestHostileFiles_Anchor(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.activate("worker-a", "claim-1", f.patchRequest("act"))
	f.r.Close()
	good, err := os.ReadFile(f.anchor.Path)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := f.anchor.Load()
	if err != nil {
		t.Fatal(err)
	}
	// The older slot's anchor: what Load returns when the newest slot is
	// damaged.
	var prev audit.SignedCheckpoint
	for slot := range audit.AnchorSlots {
		data := append([]byte(nil), good...)
		data[slot*audit.AnchorSlotSize] ^= 0x01
		os.WriteFile(f.anchor.Path, data, 0o600)
		if sc, err := f.anchor.Load(); err == nil && sc != cur {
			prev = sc
		}
	}
	if prev.Seq == 0 || prev.Seq >= cur.Seq {
		t.Fatalf("no older anchor in the file (previous %d, current %d)", prev.Seq, cur.Seq)
	}
	opened := 0
	try := func(what string, data []byte) {
		t.Helper()
		if err := os.WriteFile(f.anchor.Path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		sc, lerr := f.anchor.Load()
		switch {
		case lerr == nil && sc == cur:
			return // the change damaged the older slot only
		case lerr == nil && sc != prev:
			t.Fatalf("%s: Load returned a checkpoint that was never stored: %+v", what, sc)
		case lerr == nil:
			// The torn-write case: the receiver opens read-only on the
			// older anchor, and a writer moves the anchor up again.
			o := f.opts()
			o.ReadOnly = true
			r, err := Open(f.path, o)
			if err != nil {
				t.Fatalf("%s: read-only Open on the older slot = %v", what, err)
			}
			r.Close()
			opened++
			return
		}
		for _, ro := range []bool{true, false} {
			o := f.opts()
			o.ReadOnly = ro
			r, err := Open(f.path, o)
			if err == nil {
				r.Close()
				t.Fatalf("%s: Open(read-only %v) accepted the anchor", what, ro)
			}
			if !IsIntegrityError(err) {
				t.Fatalf("%s: Open = %v, want an integrity error", what, err)
			}
		}
		if got, _ := os.ReadFile(f.anchor.Path); string(got) != string(data) {
			t.Fatalf("%s: the refused anchor was replaced", what)
		}
	}
	for n := 0; n < len(good); n += 97 {
		try("cut to "+strconv.Itoa(n)+" bytes", good[:n])
	}
	try("cut by one byte", good[:len(good)-1])
	// Every byte of each slot's header and checkpoint, and a sample of its
	// padding.
	flips := []byte{0x01, 0x20, 0x80}
	if testing.Short() || raceEnabled {
		flips = flips[1:2]
	}
	for slot := range audit.AnchorSlots {
		base := slot * audit.AnchorSlotSize
		for i := base; i < base+audit.AnchorSlotSize; i++ {
			if i-base >= 600 && (i-base)%251 != 0 {
				continue
			}
			for _, x := range flips {
				data := append([]byte(nil), good...)
				data[i] ^= x
				try("byte "+strconv.Itoa(i)+" ^"+strconv.Itoa(int(x)), data)
			}
		}
	}
	if opened == 0 {
		t.Fatal("no change fell back to the older slot; the test did not reach that case")
	}
	try("followed by a second copy", append(append([]byte(nil), good...), good...))
	if err := os.WriteFile(f.anchor.Path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	f.reopen()
}
