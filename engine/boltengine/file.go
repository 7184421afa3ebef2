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
	// CheckPages, if set, checks the file's pages under its lock before
	// bbolt reads any of them, which bbolt's trust in its pages needs for
	// a file that may have been damaged or forged.
	CheckPages func(r io.ReaderAt, size int64) error
	// OpenFile, if set, opens the file in place of the checked open; for
	// tests of what bbolt does with a file nothing checked.
	OpenFile func(name string, flag int, perm os.FileMode) (*os.File, error)
	// FillPercent is the engine's per-bucket page fill (Options).
	FillPercent map[string]float64
}

func (fo *FileOptions) errors() boltfile.Errors {
	e := fo.Errors
	return boltfile.Errors{Prefix: e.Prefix, NotInitialized: e.NotInitialized, AlreadyInitialized: e.AlreadyInitialized,
		StorageBusy: e.StorageBusy, BadFormat: e.BadFormat}
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
	if openFile == nil && fo.CheckPages != nil {
		openFile = boltfile.CheckedOpenFile(timeout, fo.CheckPages, fo.Errors.BadFormat)
	}
	db, err := boltfile.Open(path, bolt.Options{Timeout: timeout, ReadOnly: fo.ReadOnly, NoSync: fo.NoSync, OpenFile: openFile},
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
	return boltfile.Create(path, timeout, fo.errors(), func(btx *bolt.Tx) error {
		return InTx(btx, &Options{FillPercent: fo.FillPercent}, fn)
	})
}
