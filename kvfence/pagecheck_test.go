package kvfence

import (
	"bytes"
	"errors"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/kvfence/kvfence/internal/testbin"
)

// boltFile is a receiver database as bytes, with the positions of the
// structures the tests below damage.
type boltFile struct {
	data     []byte
	pageSize int64
	m        boltMeta
	// audit is the root page of the audit bucket, a branch page.
	audit uint64
}

func newBoltFile(t *testing.T) *boltFile {
	t.Helper()
	b := newCorruptBase(t)
	c := &pageChecker{r: bytes.NewReader(b.data), size: int64(len(b.data))}
	if err := c.meta(); err != nil {
		t.Fatal(err)
	}
	f := &boltFile{data: b.data, pageSize: c.pageSize, m: c.m}
	root := f.page(c.m.root)
	for i := range int(ne.Uint16(root[10:])) {
		off := boltPageHeaderSize + i*boltElementSize
		pos, ksize := ne.Uint32(root[off+4:]), ne.Uint32(root[off+8:])
		key := root[off+int(pos) : off+int(pos+ksize)]
		if string(key) == "audit" {
			f.audit = ne.Uint64(root[off+int(pos+ksize):])
		}
	}
	if f.audit == 0 || ne.Uint16(f.page(f.audit)[8:]) != boltBranchPage {
		t.Fatal("the audit bucket has no branch page at its root; add history to newCorruptBase")
	}
	return f
}

// page returns page id of the file's bytes, for changing in place.
func (f *boltFile) page(id uint64) []byte {
	return f.data[int64(id)*f.pageSize : int64(id+1)*f.pageSize]
}

func (f *boltFile) check() error {
	return checkPages(bytes.NewReader(f.data), int64(len(f.data)))
}

// Ensure that the page check refuses each kind of damage it is there for,
// by name, and accepts the undamaged file.
func TestCheckPages_Refuses(t *testing.T) {
	if err := newBoltFile(t).check(); err != nil {
		t.Fatalf("undamaged database: %v", err)
	}
	for _, tc := range []struct {
		name   string
		damage func(f *boltFile)
		want   string
	}{
		{"a branch page that points at itself", func(f *boltFile) {
			p := f.page(f.audit)
			ne.PutUint16(p[10:], 1)
			ne.PutUint64(p[boltPageHeaderSize+8:], f.audit)
		}, "referenced twice"},
		{"two branch elements naming one page", func(f *boltFile) {
			p := f.page(f.audit)
			// The first element names the second's page, which the walk
			// (last child first) has already reached in its own range.
			ne.PutUint64(p[boltPageHeaderSize+8:], ne.Uint64(p[boltPageHeaderSize+boltElementSize+8:]))
		}, "referenced twice"},
		{"a page both in use and free", func(f *boltFile) {
			p := f.page(f.m.freelist)
			if ne.Uint16(p[10:]) == 0 {
				ne.PutUint16(p[10:], 1)
			}
			ne.PutUint64(p[boltPageHeaderSize:], f.audit)
		}, "both in use and free"},
		{"a freelist longer than its page", func(f *boltFile) {
			p := f.page(f.m.freelist)
			ne.PutUint16(p[10:], 0xFFFF)
			ne.PutUint64(p[boltPageHeaderSize:], 1<<40)
		}, "has room for"},
		{"a child past the high-water mark", func(f *boltFile) {
			ne.PutUint64(f.page(f.audit)[boltPageHeaderSize+8:], f.m.pgid+5)
		}, "outside pages"},
		{"a page that names another id", func(f *boltFile) { ne.PutUint64(f.page(f.audit)[0:], f.audit+1) }, "names itself"},
		{"a page of another type", func(f *boltFile) { ne.PutUint16(f.page(f.audit)[8:], boltMetaPage) }, "want a branch or leaf"},
		{"an element count past the page", func(f *boltFile) { ne.PutUint16(f.page(f.audit)[10:], 0xFFF0) }, "do not fit"},
		{"a key outside the page", func(f *boltFile) { ne.PutUint32(f.page(f.audit)[boltPageHeaderSize:], 1<<20) }, "outside the page"},
		{"keys out of order", func(f *boltFile) {
			p := f.page(f.audit)
			a, b := boltPageHeaderSize, boltPageHeaderSize+boltElementSize
			// Swap the first two elements' key positions (each relative
			// to its own element, hence the correction by one element).
			pa, pb := ne.Uint32(p[a:]), ne.Uint32(p[b:])
			ne.PutUint32(p[a:], pb+boltElementSize)
			ne.PutUint32(p[b:], pa-boltElementSize)
		}, "out of order"},
		{"no synced freelist", func(f *boltFile) { f.rewriteMeta(func(m []byte) { ne.PutUint64(m[32:], boltNoFreelist) }) }, "no synced freelist"},
		{"a high-water mark past the file", func(f *boltFile) {
			f.rewriteMeta(func(m []byte) { ne.PutUint64(m[40:], uint64(int64(len(f.data))/f.pageSize)+1) })
		}, "high-water mark"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newBoltFile(t)
			tc.damage(f)
			err := f.check()
			if err == nil || !errors.Is(err, errPages) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("check: %v, want an error saying %q", err, tc.want)
			}
			path := filepath.Join(t.TempDir(), "damaged.db")
			if err := os.WriteFile(path, f.data, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(path, &Options{ReadOnly: true}); !errors.Is(err, ErrBadFormat) {
				t.Fatalf("Open: %v, want ErrBadFormat", err)
			}
		})
	}
}

// rewriteMeta changes both meta pages with fn and fixes their checksums,
// as a file damaged in a way the checksum cannot see.
func (f *boltFile) rewriteMeta(fn func(meta []byte)) {
	for id := range uint64(2) {
		m := f.page(id)[boltPageHeaderSize : boltPageHeaderSize+boltMetaSize]
		fn(m)
		h := fnvSum(m[:56])
		ne.PutUint64(m[56:], h)
	}
}

// TestHelperUncheckedBolt is not a test: run as a child by
// TestCheckPages_CycleCrashesBbolt, it reads the database with bbolt
// alone, as the receiver did before the page check.
func TestHelperUncheckedBolt(t *testing.T) {
	path := os.Getenv("KVFENCE_UNCHECKED_DB")
	if path == "" {
		return
	}
	// A small stack limit makes the runaway recursion end in seconds.
	debug.SetMaxStack(8 << 20)
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		os.Stdout.WriteString("open: " + err.Error() + "\n")
		os.Exit(0)
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				os.Stdout.WriteString("recovered\n")
				os.Exit(0)
			}
		}()
		db.View(func(tx *bolt.Tx) error {
			tx.Bucket([]byte("audit")).Get([]byte{0, 0, 0, 0, 0, 0, 0, 1})
			return nil
		})
	}()
	os.Stdout.WriteString("survived\n")
	os.Exit(0)
}

// Ensure that the damage the page check exists for is real: bbolt alone,
// given a branch page that points at itself, recurses until the runtime
// aborts the process, which no recover stops; the receiver refuses the
// same file with ErrBadFormat and stays up.
func TestCheckPages_CycleCrashesBbolt(t *testing.T) {
	f := newBoltFile(t)
	p := f.page(f.audit)
	ne.PutUint16(p[10:], 1)
	ne.PutUint64(p[boltPageHeaderSize+8:], f.audit)
	path := filepath.Join(t.TempDir(), "cycle.db")
	if err := os.WriteFile(path, f.data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperUncheckedBolt$")
	cmd.Env = testbin.ChildEnv("KVFENCE_UNCHECKED_DB=" + path)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "fatal error") && !strings.Contains(string(out), "stack overflow") {
		t.Fatalf("bbolt alone on a self-referencing branch page: %v\n%.2000s", err, out)
	}
	t.Logf("bbolt alone: %v: %s", err, firstLine(out))
	if _, err := Open(path, &Options{ReadOnly: true}); !errors.Is(err, ErrBadFormat) {
		t.Fatalf("Open: %v, want ErrBadFormat", err)
	}
}

func fnvSum(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}
