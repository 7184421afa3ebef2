package boltfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	errNotInit = errors.New("not initialized")
	errExists  = errors.New("already initialized")
	errBusy    = errors.New("busy")
	errFormat  = errors.New("bad format")
	testErrors = Errors{Prefix: "test", NotInitialized: errNotInit, AlreadyInitialized: errExists, StorageBusy: errBusy, BadFormat: errFormat}
)

// Ensure that Create refuses an existing file and removes what it created
// when its transaction fails, and that Open never creates a file and maps
// each kind of bad path onto the caller's sentinel.
func TestCreateAndOpen(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	if err := Create(good, bolt.Options{Timeout: time.Second}, testErrors, func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err }); err != nil {
		t.Fatal(err)
	}
	if err := Create(good, bolt.Options{Timeout: time.Second}, testErrors, func(*bolt.Tx) error { return nil }); !errors.Is(err, errExists) {
		t.Fatalf("Create over an existing file = %v, want AlreadyInitialized", err)
	}
	failed := filepath.Join(dir, "failed.db")
	if err := Create(failed, bolt.Options{Timeout: time.Second}, testErrors, func(*bolt.Tx) error { return errors.New("boom") }); err == nil {
		t.Fatal("Create with a failing transaction succeeded")
	}
	if _, err := os.Stat(failed); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a failed Create left its file behind")
	}

	empty := filepath.Join(dir, "empty.db")
	os.WriteFile(empty, nil, 0o600)
	garbage := filepath.Join(dir, "garbage.db")
	os.WriteFile(garbage, make([]byte, 8192), 0o600)
	for _, tc := range []struct {
		name, path string
		want       error
	}{
		{"missing", filepath.Join(dir, "missing.db"), errNotInit},
		{"empty", empty, errFormat},
		{"directory", dir, errFormat},
		{"zeros", garbage, errFormat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if db, err := Open(tc.path, bolt.Options{Timeout: time.Second}, testErrors, nil); !errors.Is(err, tc.want) {
				if db != nil {
					db.Close()
				}
				t.Fatalf("Open = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("Open created a file")
	}

	db, err := Open(good, bolt.Options{Timeout: time.Second}, testErrors, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := Open(good, bolt.Options{Timeout: -1}, testErrors, nil); !errors.Is(err, errBusy) {
		t.Fatalf("Open of a locked file = %v, want StorageBusy", err)
	}
}
