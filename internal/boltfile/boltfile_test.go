package boltfile

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
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
	if err := Create(good, time.Second, testErrors, func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err }); err != nil {
		t.Fatal(err)
	}
	if err := Create(good, time.Second, testErrors, func(*bolt.Tx) error { return nil }); !errors.Is(err, errExists) {
		t.Fatalf("Create over an existing file = %v, want AlreadyInitialized", err)
	}
	failed := filepath.Join(dir, "failed.db")
	if err := Create(failed, time.Second, testErrors, func(*bolt.Tx) error { return errors.New("boom") }); err == nil {
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

// Ensure that InitCheckpoint returns only the init checkpoint of a chain
// whose only entry is the head, signed by the right key for the right id.
func TestInitCheckpoint(t *testing.T) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	other := ed25519.NewKeyFromSeed(append(make([]byte, ed25519.SeedSize-1), 1))
	pub := key.Public().(ed25519.PublicKey)
	chain := audit.NewChain(audit.Head{})
	if _, _, err := chain.Append(&audit.Entry{Kind: "init", At: 1}); err != nil {
		t.Fatal(err)
	}
	head := chain.Head()
	sign := func(k ed25519.PrivateKey, id string, seq uint64) []byte {
		sc, err := audit.Sign(k, audit.Checkpoint{Receiver: id, Seq: seq, Head: head.Hash, At: 1})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := sc.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	path := filepath.Join(t.TempDir(), "c.db")
	for _, tc := range []struct {
		name   string
		stored []byte
		head   audit.Head
		ok     bool
	}{
		{"the init checkpoint", sign(key, "r", 1), head, true},
		{"a chain with history", sign(key, "r", 1), audit.Head{Seq: 2, Hash: head.Hash}, false},
		{"another key", sign(other, "r", 1), head, false},
		{"another id", sign(key, "s", 1), head, false},
		{"another head", sign(key, "r", 1), audit.Head{Seq: 1, Hash: audit.Hash{1}}, false},
		{"nothing stored", nil, head, false},
		{"garbage stored", []byte("garbage"), head, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(path)
			err := Create(path, time.Second, testErrors, func(tx *bolt.Tx) error {
				b, err := tx.CreateBucket([]byte("checkpoints"))
				if err != nil || tc.stored == nil {
					return err
				}
				return b.Put([]byte("latest"), tc.stored)
			})
			if err != nil {
				t.Fatal(err)
			}
			db, err := Open(path, bolt.Options{Timeout: time.Second}, testErrors, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.View(func(tx *bolt.Tx) error {
				sc, err := InitCheckpoint(tx.Bucket([]byte("checkpoints")), []byte("latest"), pub, "r", tc.head)
				switch {
				case tc.ok && (err != nil || sc.Seq != 1 || sc.Head != head.Hash):
					t.Fatalf("InitCheckpoint = %+v, %v; want the init checkpoint", sc, err)
				case !tc.ok && !errors.Is(err, audit.ErrAnchorMissing):
					t.Fatalf("InitCheckpoint = %v, want ErrAnchorMissing", err)
				}
				return nil
			})
		})
	}
}
