//go:build !windows

package audit

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

func TestFileAnchor(t *testing.T) {
	storeSuite(t, func(t *testing.T) AnchorStore { return FileAnchor{Path: filepath.Join(t.TempDir(), "anchor")} })
}

// Ensure that Store writes a 0600 file holding exactly the anchor text, and
// leaves no temporary file behind.
func TestFileAnchor_Store(t *testing.T) {
	dir := t.TempDir()
	fa := FileAnchor{Path: filepath.Join(dir, "anchor")}
	recs, _ := testChain(t, 3)
	sc := checkpointOf(t, receiverKey, testReceiver, recs, 3)
	if err := fa.Store(nil, sc); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(fa.Path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode())
	}
	data, _ := os.ReadFile(fa.Path)
	if want, _ := sc.MarshalAnchor(); string(data) != string(want) {
		t.Fatalf("file holds\n%s\nwant\n%s", data, want)
	}
	if names, _ := os.ReadDir(dir); len(names) != 1 {
		t.Fatalf("directory holds %d files, want only the anchor", len(names))
	}
	verifyChain(t, recs, fa)
}

// Ensure that Load refuses everything but one regular, well-formed anchor
// file with a precise error, and that neither Load nor Store changes what
// it refuses.
func TestFileAnchor_Refuses(t *testing.T) {
	recs, _ := testChain(t, 3)
	sc := checkpointOf(t, receiverKey, testReceiver, recs, 3)
	text, _ := sc.MarshalAnchor()
	for _, tc := range []struct {
		name  string
		setup func(path string) error
		want  error
	}{
		{"missing", func(string) error { return nil }, ErrAnchorMissing},
		{"symlink", func(p string) error {
			if err := os.WriteFile(p+".real", text, 0o600); err != nil {
				return err
			}
			return os.Symlink(p+".real", p)
		}, ErrAnchorNotRegular},
		{"dangling symlink", func(p string) error { return os.Symlink(p+".nowhere", p) }, ErrAnchorNotRegular},
		{"directory", func(p string) error { return os.Mkdir(p, 0o700) }, ErrAnchorNotRegular},
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o600) }, ErrAnchorNotRegular},
		{"group-writable", func(p string) error {
			if err := os.WriteFile(p, text, 0o600); err != nil {
				return err
			}
			return os.Chmod(p, 0o620)
		}, ErrAnchorPermissions},
		{"garbage", func(p string) error { return os.WriteFile(p, []byte("not an anchor\n"), 0o600) }, ErrBadAnchor},
		{"empty", func(p string) error { return os.WriteFile(p, nil, 0o600) }, ErrBadAnchor},
		{"oversize", func(p string) error { return os.WriteFile(p, make([]byte, 1<<20), 0o600) }, ErrBadAnchor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fa := FileAnchor{Path: filepath.Join(t.TempDir(), "anchor")}
			if err := tc.setup(fa.Path); err != nil {
				t.Fatal(err)
			}
			before, _ := os.Lstat(fa.Path)
			if _, err := fa.Load(); !errors.Is(err, tc.want) {
				t.Fatalf("Load: %v, want %v", err, tc.want)
			}
			if tc.want == ErrAnchorMissing {
				if _, err := os.Lstat(fa.Path); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("Load created the anchor: %v", err)
				}
				return
			}
			if err := fa.Store(nil, sc); !errors.Is(err, tc.want) {
				t.Fatalf("Store: %v, want %v", err, tc.want)
			}
			if after, _ := os.Lstat(fa.Path); !os.SameFile(before, after) || before.ModTime() != after.ModTime() {
				t.Fatal("Store replaced what it refused")
			}
		})
	}
	if _, err := (FileAnchor{}).Load(); err == nil {
		t.Fatal("Load with an empty path succeeded")
	}
}

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

// BenchmarkAnchorWrite measures one durable anchor write two ways: the
// atomic replace FileAnchor uses (read, compare, temporary file, fsync,
// rename, directory fsync), and appending the record to an open file with
// fsync, the alternative design.
func BenchmarkAnchorWrite(b *testing.B) {
	b.Run("replace", func(b *testing.B) {
		fa := FileAnchor{Path: filepath.Join(b.TempDir(), "anchor")}
		var old *SignedCheckpoint
		i := uint64(0)
		for b.Loop() {
			i++
			sc, err := Sign(receiverKey, Checkpoint{Receiver: testReceiver, Seq: i, Head: Hash{byte(i)}, At: int64(i)})
			if err != nil {
				b.Fatal(err)
			}
			if err := fa.Store(old, sc); err != nil {
				b.Fatal(err)
			}
			old = &sc
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
			sc, err := Sign(receiverKey, Checkpoint{Receiver: testReceiver, Seq: i, Head: Hash{byte(i)}, At: int64(i)})
			if err != nil {
				b.Fatal(err)
			}
			text, _ := sc.MarshalAnchor()
			if _, err := f.Write(text); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
