package boltfile

import (
	"io"
	"os"
	"time"

	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/boltengine"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// ErrLockTimeout is bbolt's error for a lock not obtained in time, for an
// OpenFile function that takes the lock itself.
var ErrLockTimeout = bolterrors.ErrTimeout

// FileOptions are the bbolt options a caller of OpenEngine may set, in
// types of its own so that the caller does not import bbolt.
type FileOptions struct {
	// Timeout bounds the wait for the file's lock; negative means no wait.
	Timeout time.Duration
	// ReadOnly opens under a shared lock, for reading only.
	ReadOnly bool
	// NoSync skips fsync on commit (benchmarks only).
	NoSync bool
	// OpenFile, if set, opens the file in place of os.OpenFile.
	OpenFile func(name string, flag int, perm os.FileMode) (*os.File, error)
	// CheckPages, if set and OpenFile is not, checks the file's pages
	// under its lock before bbolt reads them (CheckedOpenFile); a file it
	// refuses is the caller's BadFormat.
	CheckPages func(r io.ReaderAt, size int64) error
	// FillPercent is the engine's per-bucket page fill.
	FillPercent map[string]float64
}

// OpenEngine opens the existing file at path as Open does and returns the
// bbolt engine over it.
func OpenEngine(path string, fo FileOptions, e Errors, release func(*os.File)) (*boltengine.Engine, error) {
	if fo.OpenFile == nil && fo.CheckPages != nil {
		timeout := fo.Timeout
		if timeout < 0 {
			timeout = time.Nanosecond
		}
		fo.OpenFile, release = CheckedOpenFile(timeout, fo.CheckPages, e.BadFormat), ReleaseFile
	}
	db, err := Open(path, bolt.Options{Timeout: fo.Timeout, ReadOnly: fo.ReadOnly, NoSync: fo.NoSync, OpenFile: fo.OpenFile}, e, release)
	if err != nil {
		return nil, err
	}
	return boltengine.New(db, &boltengine.Options{FillPercent: fo.FillPercent}), nil
}

// CreateEngine makes a new file at path as Create does and runs fn in its
// first write transaction, through the engine seam.
func CreateEngine(path string, timeout time.Duration, e Errors, fill map[string]float64, fn func(tx engine.Tx) error) error {
	return Create(path, timeout, e, func(btx *bolt.Tx) error {
		return boltengine.InTx(btx, &boltengine.Options{FillPercent: fill}, fn)
	})
}
