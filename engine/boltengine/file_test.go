package boltengine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/engine"
)

var (
	errNotInit = errors.New("not initialized")
	errExists  = errors.New("already initialized")
	errBusy    = errors.New("busy")
	errFormat  = errors.New("bad format")
	testErrs   = FileErrors{Prefix: "test", NotInitialized: errNotInit, AlreadyInitialized: errExists,
		StorageBusy: errBusy, BadFormat: errFormat}
	bRecords = []byte("records")
	// ne is the byte order bbolt writes, the machine's.
	ne = binary.NativeEndian
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// layoutOf returns the layout of the file at path, after checking its
// pages with check.
func layoutOf(t *testing.T, path string, check func(f *os.File, size int64) error) FileLayout {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := check(f, fi.Size()); err != nil {
		t.Fatal(err)
	}
	l, err := Layout(f, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// writeRecords puts records from to to-1 and deletes every third one
// below from, so that the file has free pages.
func writeRecords(e *Engine, from, to int) error {
	return e.Update(context.Background(), func(tx engine.Tx) error {
		for i := from; i < to; i++ {
			if err := tx.Put(bRecords, keyN(i), fmt.Appendf(nil, "value-%d-%0200d", i, i)); err != nil {
				return err
			}
		}
		for i := 0; i < from; i += 3 {
			if err := tx.Delete(bRecords, keyN(i)); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkRecords reads back what writeRecords wrote up to n.
func checkRecords(e *Engine, n int) error {
	return e.View(context.Background(), func(tx engine.Tx) error {
		for i := range n {
			v, err := tx.Get(bRecords, keyN(i))
			if err != nil {
				return err
			}
			deleted := i%3 == 0 && i < n-100
			if deleted != (v == nil) || !deleted && string(v) != string(fmt.Appendf(nil, "value-%d-%0200d", i, i)) {
				return fmt.Errorf("record %d = %.20q, deleted %v", i, v, deleted)
			}
		}
		return nil
	})
}

// Ensure that a file written with NoFreelistSync has no freelist page,
// that only the unsynced page check and a checked open with the option
// accept it, that it opens without the option (which writes its
// freelist, after which the strict check accepts it) and that a file with
// a freelist opens with the option and drops it: no data is lost either
// way.
func TestNoFreelistSyncBothWays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.db")
	unsynced := FileOptions{Errors: testErrs, Timeout: time.Second, CheckPages: true, NoFreelistSync: true}
	synced := FileOptions{Errors: testErrs, Timeout: time.Second, CheckPages: true}
	if err := CreateFile(path, unsynced, func(tx engine.Tx) error { return tx.CreateBucket(bRecords) }); err != nil {
		t.Fatal(err)
	}
	n := 0
	// write opens path with fo, writes 100 more records and checks them.
	write := func(fo FileOptions) {
		t.Helper()
		e, err := OpenFile(path, fo)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if err := writeRecords(e, n, n+100); err != nil {
			t.Fatal(err)
		}
		n += 100
		if err := checkRecords(e, n); err != nil {
			t.Fatal(err)
		}
	}
	noFreelist := func(f *os.File, size int64) error { return CheckPagesUnsynced(f, size) }
	strict := func(f *os.File, size int64) error { return CheckPages(f, size) }
	wantUnsynced := func(when string) {
		t.Helper()
		if l := layoutOf(t, path, noFreelist); l.Freelist != ^uint64(0) {
			t.Fatalf("%s: the meta page names freelist page %d, want none", when, l.Freelist)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fi, _ := f.Stat()
		if err := CheckPages(f, fi.Size()); !errors.Is(err, ErrDamagedPages) {
			t.Fatalf("%s: CheckPages of a file without a freelist = %v, want ErrDamagedPages", when, err)
		}
		if _, err := OpenFile(path, FileOptions{Errors: testErrs, Timeout: time.Second, CheckPages: true, ReadOnly: true}); !errors.Is(err, errFormat) {
			t.Fatalf("%s: a checked open without NoFreelistSync = %v, want BadFormat", when, err)
		}
	}
	wantSynced := func(when string) {
		t.Helper()
		if l := layoutOf(t, path, strict); l.Freelist == ^uint64(0) {
			t.Fatalf("%s: the meta page names no freelist", when)
		}
	}
	wantUnsynced("after CreateFile")
	write(unsynced)
	write(unsynced)
	wantUnsynced("after writes")
	refuseDamaged(t, path, unsynced)
	// A read-only open with the option neither needs nor writes one.
	ro := unsynced
	ro.ReadOnly = true
	e, err := OpenFile(path, ro)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkRecords(e, n); err != nil {
		t.Fatal(err)
	}
	e.Close()
	wantUnsynced("after a read-only open")

	// Without the option (and without the check, which refuses the file),
	// bbolt writes the freelist at open.
	plain := synced
	plain.CheckPages = false
	write(plain)
	wantSynced("after an open without NoFreelistSync")
	write(synced)
	wantSynced("after a checked open without NoFreelistSync")
	// And with the option again, the freelist is dropped at the first
	// commit.
	write(unsynced)
	wantUnsynced("after an open with NoFreelistSync")
}

// refuseDamaged checks that the unsynced page check and a checked open
// with fo refuse a copy of the file at path whose root page names another
// page id, or whose root page is a branch page pointing at itself.
func refuseDamaged(t *testing.T, path string, fo FileOptions) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Layout(bytesReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		damage func(p []byte)
	}{
		{"names another id", func(p []byte) { ne.PutUint64(p[0:], l.Root+1) }},
		{"points at itself", func(p []byte) {
			ne.PutUint16(p[8:], 0x01) // a branch page
			ne.PutUint16(p[10:], 1)
			ne.PutUint32(p[16:], 16) // its one key follows its element
			ne.PutUint32(p[20:], 1)
			ne.PutUint64(p[24:], l.Root)
		}},
	} {
		d := bytes.Clone(data)
		tc.damage(d[int64(l.Root)*l.PageSize : int64(l.Root+1)*l.PageSize])
		if err := CheckPagesUnsynced(bytesReader(d), int64(len(d))); !errors.Is(err, ErrDamagedPages) {
			t.Fatalf("%s: CheckPagesUnsynced = %v, want ErrDamagedPages", tc.name, err)
		}
		damaged := filepath.Join(t.TempDir(), "damaged.db")
		if err := os.WriteFile(damaged, d, 0o600); err != nil {
			t.Fatal(err)
		}
		if e, err := OpenFile(damaged, fo); !errors.Is(err, errFormat) {
			if e != nil {
				e.Close()
			}
			t.Fatalf("%s: OpenFile = %v, want BadFormat", tc.name, err)
		}
	}
}

// BenchmarkOpenFile measures a checked writable open of a file of 100,000
// records of 256 bytes, with a synced freelist and without one (which
// bbolt then rebuilds by walking the trees).
func BenchmarkOpenFile(b *testing.B) {
	for _, nfs := range []bool{false, true} {
		b.Run(fmt.Sprintf("NoFreelistSync=%v", nfs), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "o.db")
			fo := FileOptions{Errors: testErrs, Timeout: time.Second, CheckPages: true, NoFreelistSync: nfs}
			if err := CreateFile(path, fo, func(tx engine.Tx) error { return tx.CreateBucket(bRecords) }); err != nil {
				b.Fatal(err)
			}
			e, err := OpenFile(path, fo)
			if err != nil {
				b.Fatal(err)
			}
			val := make([]byte, 256)
			for i := 0; i < 100_000; i += 10_000 {
				err := e.Update(context.Background(), func(tx engine.Tx) error {
					for j := i; j < i+10_000; j++ {
						if err := tx.Put(bRecords, keyN(j), val); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			e.Close()
			for b.Loop() {
				e, err := OpenFile(path, fo)
				if err != nil {
					b.Fatal(err)
				}
				e.Close()
			}
		})
	}
}
