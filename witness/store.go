package witness

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/internal/dirsync"
)

// Errors of the store and the server.
var (
	// ErrExists means Create found a file at the store's path.
	ErrExists = errors.New("witness database already exists")

	// ErrNotWitnessDB means a file is not a witness database of this format.
	ErrNotWitnessDB = errors.New("not a kvfence witness database")

	// ErrUnknownLog means the witness trusts no key for the origin.
	ErrUnknownLog = errors.New("unknown log origin")

	// ErrAlreadyTrusted means Trust was given an origin the witness already
	// trusts with another key; a log's key never changes under one origin.
	ErrAlreadyTrusted = errors.New("origin already trusted with another key")

	// ErrNoCheckpoint means the witness never cosigned a checkpoint of the log.
	ErrNoCheckpoint = errors.New("no cosigned checkpoint for this log")

	// ErrConflict means the old size of a request is not the size of the
	// witness's latest cosigned checkpoint; see ConflictError.
	ErrConflict = errors.New("old size is not the witness's latest size")

	// ErrBadProof means the checkpoint is not consistent with the witness's
	// latest one: a proof that does not verify, a proof from size zero, or
	// another root at the same size.
	ErrBadProof = errors.New("checkpoint is not consistent with the latest cosigned one")

	// ErrForbidden means the checkpoint carries no valid signature of the
	// key the witness trusts for its origin.
	ErrForbidden = errors.New("checkpoint is not signed by the trusted key")

	// ErrBadRequest means a request did not parse, or its old size is above
	// the checkpoint's size.
	ErrBadRequest = errors.New("malformed witness request")

	// ErrLocked means another process holds the witness database open
	// (bbolt allows one writer process): kvfence witness serve must be
	// stopped before kvfence witness trust can change the database.
	ErrLocked = errors.New("witness database is in use by another process (stop kvfence witness serve first)")
)

// ConflictError is ErrConflict with the witness's latest size.
type ConflictError struct {
	// Size is the size of the latest checkpoint the witness cosigned for
	// the origin (zero if none).
	Size uint64
}

// Error says the witness's size.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("%v: the witness's latest size is %d", ErrConflict, e.Size)
}

// Is makes errors.Is(err, ErrConflict) hold.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

const (
	storeFormat = "kvfence/witness/v1"
)

var (
	bucketMeta = []byte("meta")
	bucketLogs = []byte("logs")
	keyFormat  = []byte("format")
	keyID      = []byte("id")
	keyPub     = []byte("pub")
)

// LogState is what the witness holds about one log.
type LogState struct {
	// Origin is the log's origin line.
	Origin string `json:"origin"`
	// VerifierKey is the note verifier key of the log's Ed25519 key.
	VerifierKey string `json:"vkey"`
	// Cosigned is whether the witness has cosigned a checkpoint of the log.
	Cosigned bool `json:"cosigned"`
	// Size is the size of the latest cosigned checkpoint (0 if none).
	Size uint64 `json:"size"`
	// Root is the root of the latest cosigned checkpoint.
	Root tlog.Hash `json:"root"`
	// Note is the latest cosigned checkpoint as the log signed it.
	Note []byte `json:"note,omitempty"`
	// UpdatedAt is when the witness stored it.
	UpdatedAt time.Time `json:"updated_at"`
	// RecoveryKey is the Ed25519 public key of the receiver's recovery
	// key (TrustRecovery), or empty: without it the witness accepts no
	// recovery of the log.
	RecoveryKey ed25519.PublicKey `json:"recovery_key,omitempty"`
	// Recoveries are the recoveries the witness accepted for the log,
	// oldest first: each time it stored a checkpoint that does not extend
	// the one before, on the strength of the recovery key's admission.
	Recoveries []Recovery `json:"recoveries,omitempty"`
}

// Store is a witness's database: its name and public key, and per trusted
// log the log's key and the latest checkpoint it cosigned. It is one
// bbolt file; every change is one transaction, fsynced when it commits.
type Store struct {
	db  *bolt.DB
	id  string
	pub ed25519.PublicKey
}

// StoreOptions configures OpenStore.
type StoreOptions struct {
	// LockTimeout is how long to wait for another process's lock on the
	// file; zero waits one second.
	LockTimeout time.Duration
	// ReadOnly opens the store without the right to change it.
	ReadOnly bool
}

// Create makes a new witness database at path for the witness named id
// with public key pub. It refuses a path where any file exists.
func Create(path, id string, pub ed25519.PublicKey) error {
	if err := checkpoint.CheckName(id); err != nil {
		return fmt.Errorf("witness id: %w", err)
	}
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("witness public key is %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %s", ErrExists, path)
	}
	if err != nil {
		return err
	}
	f.Close()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		os.Remove(path)
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucket(bucketLogs); err != nil {
			return err
		}
		for k, v := range map[string][]byte{string(keyFormat): []byte(storeFormat), string(keyID): []byte(id), string(keyPub): pub} {
			if err := meta.Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = dirsync.Sync(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// OpenStore opens an existing witness database; it never creates one.
func OpenStore(path string, opts StoreOptions) (*Store, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrNotWitnessDB, path)
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = time.Second
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout, ReadOnly: opts.ReadOnly})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s: no lock within %v", ErrLocked, path, opts.LockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &Store{db: db}
	err = db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil || tx.Bucket(bucketLogs) == nil || string(meta.Get(keyFormat)) != storeFormat {
			return fmt.Errorf("%w: %s", ErrNotWitnessDB, path)
		}
		s.id = string(meta.Get(keyID))
		s.pub = ed25519.PublicKey(append([]byte(nil), meta.Get(keyPub)...))
		if checkpoint.CheckName(s.id) != nil || len(s.pub) != ed25519.PublicKeySize {
			return fmt.Errorf("%w: %s has a bad id or key", ErrNotWitnessDB, path)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// ID returns the witness's name, the key name of its cosignatures.
func (s *Store) ID() string { return s.id }

// PublicKey returns the witness's public key.
func (s *Store) PublicKey() ed25519.PublicKey { return s.pub }

// Trust makes the witness accept checkpoints of origin signed by the
// Ed25519 key whose note verifier key is vkey. Trusting an origin again
// with the same key changes nothing; with another key it is
// ErrAlreadyTrusted. A key of small order, under which anyone can sign,
// is refused (checkpoint.ErrWeakKey).
func (s *Store) Trust(origin, vkey string) error {
	if err := checkpoint.CheckOrigin(origin); err != nil {
		return err
	}
	v, err := checkpoint.ParseVerifierKey(vkey)
	if err != nil {
		return err
	}
	if v.Name() != origin {
		return fmt.Errorf("%w: verifier key is named %q, not the origin %q", checkpoint.ErrMalformed, v.Name(), origin)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		logs := tx.Bucket(bucketLogs)
		if cur := logs.Get([]byte(origin)); cur != nil {
			st, err := decodeState(cur)
			if err != nil {
				return err
			}
			if st.VerifierKey != vkey {
				return fmt.Errorf("%w: %s", ErrAlreadyTrusted, origin)
			}
			return nil
		}
		return putState(logs, LogState{Origin: origin, VerifierKey: vkey})
	})
}

// Log returns what the witness holds about origin, or ErrUnknownLog.
func (s *Store) Log(origin string) (LogState, error) {
	var st LogState
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		st, err = getState(tx, origin)
		return err
	})
	return st, err
}

// Logs returns every trusted log, sorted by origin.
func (s *Store) Logs() ([]LogState, error) {
	var out []LogState
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLogs).ForEach(func(k, v []byte) error {
			st, err := decodeState(v)
			if err != nil {
				return err
			}
			out = append(out, st)
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Origin < out[j].Origin })
	return out, err
}

func getState(tx *bolt.Tx, origin string) (LogState, error) {
	v := tx.Bucket(bucketLogs).Get([]byte(origin))
	if v == nil {
		return LogState{}, fmt.Errorf("%w: %q", ErrUnknownLog, origin)
	}
	return decodeState(v)
}

func decodeState(v []byte) (LogState, error) {
	var st LogState
	if err := json.Unmarshal(v, &st); err != nil {
		return LogState{}, fmt.Errorf("%w: log record: %v", ErrNotWitnessDB, err)
	}
	return st, nil
}

func putState(logs *bolt.Bucket, st LogState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return logs.Put([]byte(st.Origin), b)
}
