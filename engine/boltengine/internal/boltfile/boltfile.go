// Package boltfile creates and opens the bbolt files of the receiver and the
// ledger with the rules both share: create only with O_EXCL, never create on
// open, refuse what is not a regular non-empty file, map bbolt's failures
// onto the caller's sentinel errors, turn a panic on a corrupt page into an
// error, and take the file's lock to check its pages before bbolt reads
// them. Package boltengine's OpenFile and CreateFile reach it.
package boltfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Errors are the caller's sentinels that this package's errors wrap.
type Errors struct {
	Prefix             string // "kvfence" or "ledger", for other errors
	NotInitialized     error  // the file does not exist
	AlreadyInitialized error  // Create found a file
	StorageBusy        error  // the lock was not obtained in time
	BadFormat          error  // not a bbolt file this package can read
}

// Create makes a new file at path with mode 0600 and runs fn in its first
// write transaction. It refuses an existing file, and removes the file if
// anything fails. bbolt opens it with bo (its Timeout and NoFreelistSync
// matter here; its OpenFile is not used).
func Create(path string, bo bolt.Options, e Errors, fn func(tx *bolt.Tx) error) (err error) {
	// O_EXCL makes "refuse an existing file" atomic; bbolt then lays out an
	// empty file itself.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s", e.AlreadyInitialized, path)
		}
		return fmt.Errorf("%s: init: %w", e.Prefix, err)
	}
	f.Close()
	defer func() {
		if err != nil {
			os.Remove(path)
		}
	}()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: bo.Timeout, NoFreelistSync: bo.NoFreelistSync})
	if err != nil {
		return fmt.Errorf("%s: init: %w", e.Prefix, err)
	}
	defer func() {
		if cerr := db.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("%s: init: %w", e.Prefix, cerr)
		}
	}()
	if err := db.Update(fn); err != nil {
		return fmt.Errorf("%s: init: %w", e.Prefix, err)
	}
	return nil
}

// Open opens the existing file at path. It never creates one: a missing
// file is e.NotInitialized, and so is a file that vanishes between the
// check and the open. An empty file (an init interrupted before its first
// commit), a directory or a file bbolt cannot read is e.BadFormat; a lock
// not obtained within bo.Timeout is e.StorageBusy.
//
// bo.OpenFile, if set, opens the file in place of os.OpenFile; release, if
// set, unlocks and closes a file that bbolt opened and then panicked on.
func Open(path string, bo bolt.Options, e Errors, release func(*os.File)) (db *bolt.DB, err error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s", e.NotInitialized, path)
	case err != nil:
		return nil, fmt.Errorf("%s: open: %w", e.Prefix, err)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%w: %s is not a regular file", e.BadFormat, path)
	case fi.Size() == 0:
		// bbolt would lay out a fresh database in an empty file.
		return nil, fmt.Errorf("%w: %s is empty", e.BadFormat, path)
	}
	if bo.Timeout < 0 {
		bo.Timeout = time.Nanosecond
	}
	// Never create: the file was there a moment ago, and if it is gone now
	// that is NotInitialized, not a fresh empty file. A caller's OpenFile
	// (the receiver's checks the pages under the lock) must not create
	// either. bbolt does not close the file when it panics inside Open;
	// keep it to release here, or its lock would stay held until the
	// process exits.
	openFile := bo.OpenFile
	if openFile == nil {
		openFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
			return os.OpenFile(name, flag&^os.O_CREATE, perm)
		}
	}
	var file *os.File
	bo.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := openFile(name, flag, perm)
		file = f
		return f, err
	}
	// A corrupt page can make bbolt touch unmapped memory; with
	// SetPanicOnFault that is a panic recovered below, not a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if file != nil && release != nil {
				release(file)
			} else if file != nil {
				file.Close()
			}
			db, err = nil, fmt.Errorf("%w: %s: bbolt: %v", e.BadFormat, path, p)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bo)
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, e.BadFormat):
		return nil, err
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s", e.StorageBusy, path)
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s", e.NotInitialized, path)
	case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrVersionMismatch),
		errors.Is(err, bolterrors.ErrChecksum):
		return nil, fmt.Errorf("%w: %s: %v", e.BadFormat, path, err)
	default:
		return nil, fmt.Errorf("%s: open %s: %w", e.Prefix, path, err)
	}
}

// View runs fn in a read transaction of db, turning a bbolt panic on a
// corrupt page into an error that wraps badFormat.
func View(db *bolt.DB, path string, badFormat error, fn func(tx *bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: bbolt: %v", badFormat, path, p)
		}
	}()
	return db.View(fn)
}
