package boltengine

import (
	"io"
	"os"
	"time"

	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/boltengine/internal/boltfile"
	bolt "go.etcd.io/bbolt"
)

// FileErrors are the caller's sentinel errors that OpenFile's and
// CreateFile's failures wrap, so that each caller reports them as its own.
type FileErrors struct {
	// Prefix starts the messages of other failures ("kvfence", "ledger").
	Prefix string
	// NotInitialized: the file does not exist (OpenFile never creates one).
	NotInitialized error
	// AlreadyInitialized: CreateFile found a file at the path.
	AlreadyInitialized error
	// StorageBusy: the file's lock was not obtained in time.
	StorageBusy error
	// BadFormat: not a bbolt file that can be read, or one whose pages
	// CheckPages refused.
	BadFormat error
}

// FileOptions configure OpenFile and CreateFile.
type FileOptions struct {
	// Errors are the sentinels that failures wrap.
	Errors FileErrors
	// Timeout bounds the wait for the file's lock; zero means no bound,
	// negative means do not wait.
	Timeout time.Duration
	// ReadOnly opens under a shared lock, for reading only.
	ReadOnly bool
	// NoSync skips fsync on commit; for benchmarks that say they are not
	// durable.
	NoSync bool
	// CheckPages checks the file's pages under its lock before bbolt
	// reads any of them (see CheckPages), which bbolt's trust in its
	// pages needs for a file that may have been damaged or forged.
	CheckPages bool
	// OpenFile, if set, opens the file in place of the checked open; for
	// tests of what bbolt does with a file nothing checked.
	OpenFile func(name string, flag int, perm os.FileMode) (*os.File, error)
	// FillPercent is the engine's per-bucket page fill (Options).
	FillPercent map[string]float64
	// NoFreelistSync has bbolt write no freelist at each commit and
	// instead find the free pages at each writable open by walking every
	// bucket's tree: one page write fewer per commit (of about eleven for
	// a receiver's write, with a few microseconds of CPU), against a
	// slower open of a large file (a checked open of 100,000 records takes
	// about twice as long, 29 ms against 15). With CheckPages the check accepts a file
	// without a synced freelist (CheckPagesUnsynced), having walked the
	// trees before bbolt. Either kind of file opens either way: a file with
	// a freelist drops it at its next commit, and a writable open without
	// this option writes the freelist of a file that has none (but a
	// checked open without it refuses that file, as CheckPages does).
	NoFreelistSync bool
}

func (fo *FileOptions) errors() boltfile.Errors {
	e := fo.Errors
	return boltfile.Errors{Prefix: e.Prefix, NotInitialized: e.NotInitialized, AlreadyInitialized: e.AlreadyInitialized,
		StorageBusy: e.StorageBusy, BadFormat: e.BadFormat}
}

// ErrDamagedPages is what CheckPages's errors wrap.
var ErrDamagedPages = boltfile.ErrPages

// CheckPagesUnsynced is CheckPages that also accepts a file without a
// synced freelist, as FileOptions.NoFreelistSync writes them.
func CheckPagesUnsynced(r io.ReaderAt, size int64) error { return boltfile.CheckPagesUnsynced(r, size) }

// CheckPages checks the page structure of the bbolt file r of size bytes
// as bbolt will read it, without bbolt, which trusts its pages: a damaged
// page can send bbolt into a recursion no recover stops. It walks every
// reachable page once and refuses a cycle, a page used twice or both used
// and free, a page of the wrong type, elements or keys outside their page
// or out of order, and a damaged meta page or freelist; the error wraps
// ErrDamagedPages.
func CheckPages(r io.ReaderAt, size int64) error { return boltfile.CheckPages(r, size) }

// FileLayout is where a bbolt file's structures are, for tools and tests
// that inspect or damage a file.
type FileLayout struct {
	// PageSize is the file's page size in bytes.
	PageSize int64
	// Root is the page of the root bucket.
	Root uint64
	// Freelist is the page of the freelist.
	Freelist uint64
	// HighWater is the number of pages in use: pages at or past it are
	// free space bbolt has not used yet.
	HighWater uint64
}

// Layout reads the meta page bbolt will use of the file r of size bytes;
// an error wraps ErrDamagedPages.
func Layout(r io.ReaderAt, size int64) (FileLayout, error) {
	ps, root, free, hw, err := boltfile.Meta(r, size)
	return FileLayout{PageSize: ps, Root: root, Freelist: free, HighWater: hw}, err
}

// OpenFile opens the existing bbolt file at path and returns the engine
// over it. It never creates a file: a missing one is
// Errors.NotInitialized. An empty file, a directory, a file bbolt cannot
// read (its panics on a damaged page included) or one CheckPages refuses
// is Errors.BadFormat; a lock not obtained within Timeout is
// Errors.StorageBusy.
func OpenFile(path string, fo FileOptions) (*Engine, error) {
	timeout := fo.Timeout
	if timeout < 0 {
		timeout = time.Nanosecond
	}
	openFile := fo.OpenFile
	if openFile == nil && fo.CheckPages {
		check := boltfile.CheckPages
		if fo.NoFreelistSync {
			check = boltfile.CheckPagesUnsynced
		}
		openFile = boltfile.CheckedOpenFile(timeout, check, fo.Errors.BadFormat)
	}
	db, err := boltfile.Open(path, bolt.Options{Timeout: timeout, ReadOnly: fo.ReadOnly, NoSync: fo.NoSync,
		NoFreelistSync: fo.NoFreelistSync, OpenFile: openFile},
		fo.errors(), boltfile.ReleaseFile)
	if err != nil {
		return nil, err
	}
	return New(db, &Options{FillPercent: fo.FillPercent}), nil
}

// CreateFile makes a new bbolt file at path with mode 0600 and runs fn in
// its first write transaction, through the seam. It refuses an existing
// file (Errors.AlreadyInitialized) and removes the file if anything fails.
func CreateFile(path string, fo FileOptions, fn func(tx engine.Tx) error) error {
	timeout := fo.Timeout
	if timeout < 0 {
		timeout = time.Nanosecond
	}
	return boltfile.Create(path, bolt.Options{Timeout: timeout, NoFreelistSync: fo.NoFreelistSync}, fo.errors(), func(btx *bolt.Tx) error {
		return InTx(btx, &Options{FillPercent: fo.FillPercent}, fn)
	})
}
