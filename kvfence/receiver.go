package kvfence

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/boltfile"
	"github.com/kvfence/kvfence/internal/defect"
	bolt "go.etcd.io/bbolt"
)

// DefaultReserve is the free space kept for administrative writes when
// Options.Reserve is zero. A hold writes a few pages; the reserve is large
// enough for many, and for the freelist of a large database.
const DefaultReserve = 16 << 20

// DefaultLockTimeout is how long Open waits for the database lock when
// Options.LockTimeout is zero.
const DefaultLockTimeout = time.Second

// Options configures Open. A nil *Options means the defaults.
type Options struct {
	// LockTimeout bounds the wait for the database's exclusive (or, when
	// ReadOnly, shared) lock. Zero means DefaultLockTimeout; a negative value
	// means do not wait at all. A lock not obtained in time is ErrStorageBusy.
	LockTimeout time.Duration
	// ReadOnly opens for observation only, under a shared lock that other
	// readers may also hold. Every state-changing call returns ErrReadOnly.
	ReadOnly bool
	// Now is the receiver's clock, used for validity windows and
	// timestamps. Nil means time.Now.
	Now func() time.Time
	// Rand is the source of grant ids. Nil means crypto/rand.Reader.
	Rand io.Reader
	// MaxEnvelopeSize bounds envelope bytes accepted by Submit. Zero means
	// DefaultMaxEnvelopeSize.
	MaxEnvelopeSize int
	// Anchor is where the receiver's signed head is kept, apart from the
	// database (an operator-configured file: audit.FileAnchor). A writable
	// receiver requires it, checks the database against it on Open
	// (ErrRollbackDetected, ErrForkDetected, ...), and moves it forward
	// after every commit, before the call returns. A read-only receiver
	// checks it when it is set.
	Anchor audit.AnchorStore
	// Key is the receiver's Ed25519 signing key, required for writing: it
	// signs every checkpoint. Its public half must be the one recorded at
	// Init (ErrKeyMismatch).
	Key ed25519.PrivateKey
	// Reserve is free space on the database's volume kept for
	// administrative writes: while less is free (or the process's file-size
	// limit leaves less room), Submit is refused with ErrStorageReserve
	// before anything is written, and holds and activations still commit.
	// Zero means DefaultReserve; a negative value turns the reserve off.
	// The check is made once per batch, before it runs, and again for each
	// call retried alone, so the reserve must exceed what one batch writes
	// (up to 1024 calls; about 1 KiB of pages per denial, and an applied
	// write's new value and receipt).
	Reserve int64
	// Observer, if set, is told about every committed write transaction
	// (its calls, decisions, duration and anchor write), for metrics.
	Observer Observer
	// NoSync skips fsync on commit. It is for benchmarks that label their
	// results as not durable; a receiver in service must never set it.
	NoSync bool
	// Warn receives what an operator must see but what does not stop the
	// receiver: a damaged anchor slot found by Open (see AnchorDamage).
	// Nil means the standard library's log.Print, so that no warning is
	// lost.
	Warn func(msg string)

	// anchorUnchecked opens without comparing the database with its anchor
	// and leaves the anchor alone. Inspect and VerifyChain (read-only) and
	// Recover use it: they handle a database whose history may be
	// questioned and check the anchor themselves. It is not a defect: such
	// a receiver never writes except through Recover's own transaction.
	anchorUnchecked bool
}

// ErrReadOnly means a state-changing call was made on a receiver opened with
// Options.ReadOnly.
var ErrReadOnly = errors.New("kvfence: receiver opened read-only")

// Receiver is an open receiver database. Submit and the observation methods
// are safe for concurrent use; concurrent writes are group-committed (see
// the package documentation). Administrative calls are on Admin.
type Receiver struct {
	db   *bolt.DB
	path string
	id   string
	opts Options
	// pub and recoveryPub are the keys recorded at Init.
	pub, recoveryPub ed25519.PublicKey
	defect           defect.Variant
	faults           faultHooks

	// queue holds write calls waiting to be group-committed.
	queue commitQueue
	// wmu is held by the leader of a batch while it runs the batch's write
	// transaction and anchor write. It guards head, the audit chain's newest
	// entry, which a write transaction reads at its start and which is
	// replaced only after its commit succeeded.
	wmu  sync.Mutex
	head audit.Head
	// state is the fence state's digest as of head, checked against the
	// records at Open, and stateSum its sum; guarded by wmu like head.
	state    audit.StateHash
	stateSum audit.Hash
	// anchor is the anchor as last read or written; guarded by wmu.
	anchor audit.SignedCheckpoint
	// anchorDamage is the damaged anchor slot Open found, or nil. It is
	// set before Open returns and never changed.
	anchorDamage *audit.SlotDamage
}

// faultHooks lets this package's tests make a write transaction fail at a
// named step, to show that the whole transaction then rolls back. Each hook
// is told what is about to be written, so that a test can fail one call of
// a batch and not the others.
type faultHooks struct {
	beforeReceipt func(scope, action string) error
	beforeAudit   func(e *audit.Entry) error
	// shareFault removes the retry of a failed batch's calls one by one,
	// so that every call of the batch gets its error; only the test that
	// shows fault isolation sets it, to show that it then goes red.
	shareFault bool
	// freeSpace, if set, replaces the measurement of the volume's free
	// space that the reserve for administrators is checked against.
	freeSpace func(path string) (int64, error)
}

// defectsAllowed says whether a defect.Variant may take effect. It is set
// only by the lab build (defect_lab.go, build tag kvfencelab) and by this
// package's tests; in every other build open refuses a defective variant and
// Submit runs checks 2-4 even if one were set, so that no program built
// without the tag can weaken a receiver, whatever reaches its internals.
var defectsAllowed atomic.Bool

// InitOptions configures Init.
type InitOptions struct {
	// ReceiverID names the receiver in its audit chain and checkpoints.
	ReceiverID string
	// Key is the receiver's Ed25519 signing key. Init records its public
	// half and signs the first checkpoint with it.
	Key ed25519.PrivateKey
	// Anchor receives the first checkpoint. It must hold no anchor yet.
	Anchor audit.AnchorStore
	// RecoveryKey, if set, is the public half of the separately held key
	// that alone may sign a recovery admission.
	RecoveryKey ed25519.PublicKey
	// Now is the clock for the init entry. Nil means time.Now.
	Now func() time.Time
	// MaxGrantTTL is the receiver-wide maximum grant lifetime: the
	// default maximum of new scopes and the largest one a scope may be
	// given (ScopeOptions.MaxGrantTTL). Zero means DefaultMaxGrantTTL.
	MaxGrantTTL time.Duration
}

// Init creates a new receiver database at path, with mode 0600. It refuses
// an existing file (ErrAlreadyInitialized). If it fails before its commit
// it leaves no file behind; if only the first anchor write fails, the file
// stays, and the next writable Open writes that anchor from the database's
// own init checkpoint.
func Init(path string, opts *InitOptions) (err error) {
	if opts == nil {
		opts = &InitOptions{}
	}
	if err := checkName("receiver id", opts.ReceiverID); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if len(opts.Key) != ed25519.PrivateKeySize {
		return fmt.Errorf("%w: a receiver signing key (Ed25519) is required", ErrInvalidArgument)
	}
	if opts.Anchor == nil {
		return fmt.Errorf("%w: an anchor store is required", ErrInvalidArgument)
	}
	receiverKey := opts.Key.Public().(ed25519.PublicKey)
	if opts.RecoveryKey != nil {
		if len(opts.RecoveryKey) != ed25519.PublicKeySize {
			return fmt.Errorf("%w: recovery key must be an Ed25519 public key", ErrInvalidArgument)
		}
		if opts.RecoveryKey.Equal(receiverKey) {
			return fmt.Errorf("%w: %w", ErrInvalidArgument, ErrRecoveryKeyIsReceiverKey)
		}
	}
	if _, err := opts.Anchor.Load(); !errors.Is(err, audit.ErrAnchorMissing) {
		if err == nil {
			return fmt.Errorf("%w: the anchor already holds a checkpoint; refusing to replace it", audit.ErrWriteConflict)
		}
		return fmt.Errorf("kvfence: init: anchor: %w", err)
	}
	if opts.MaxGrantTTL < 0 {
		return fmt.Errorf("%w: negative maximum grant lifetime", ErrInvalidArgument)
	}
	maxTTL := opts.MaxGrantTTL
	if maxTTL == 0 {
		maxTTL = DefaultMaxGrantTTL
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	var first audit.SignedCheckpoint
	err = boltfile.Create(path, DefaultLockTimeout, fileErrors, func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if err := meta.Put(metaFormat, []byte(formatVersion)); err != nil {
			return err
		}
		if err := meta.Put(metaReceiver, []byte(opts.ReceiverID)); err != nil {
			return err
		}
		if err := meta.Put(metaReceiverKey, receiverKey); err != nil {
			return err
		}
		if opts.RecoveryKey != nil {
			if err := meta.Put(metaRecoveryKey, opts.RecoveryKey); err != nil {
				return err
			}
		}
		if err := meta.Put(metaMaxGrantTTL, encodeMaxGrantTTL(maxTTL)); err != nil {
			return err
		}
		// The empty state's digest is stored too: Open always finds one.
		w := &wtx{tx: tx, chain: audit.NewChain(audit.Head{}), now: now(), stateDirty: true}
		if _, err := w.appendAudit(&audit.Entry{Kind: KindInit, Note: "receiver " + opts.ReceiverID + "; max grant ttl " + maxTTL.String()}); err != nil {
			return err
		}
		first, err = w.checkpoint(opts.ReceiverID, opts.Key)
		return err
	})
	if err != nil {
		return err
	}
	if err := opts.Anchor.Store(nil, first); err != nil {
		return fmt.Errorf("kvfence: init: writing the first anchor: %w", err)
	}
	return nil
}

// Open opens an existing receiver database. It never creates one: a missing
// file is ErrNotInitialized. A lock not obtained within opts.LockTimeout is
// ErrStorageBusy. A file that is not a receiver database of this format is
// ErrBadFormat.
func Open(path string, opts *Options) (*Receiver, error) {
	return open(path, opts, defect.Variant{})
}

// open opens the receiver as the given variant. Only the lab build and this
// package's tests may ask for a defective one (defectsAllowed).
func open(path string, opts *Options, v defect.Variant) (r *Receiver, err error) {
	if v != (defect.Variant{}) && !defectsAllowed.Load() {
		return nil, fmt.Errorf("%w: a defective receiver exists only in this package's tests and the lab build", ErrInvalidArgument)
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	skipAnchor := o.anchorUnchecked || v.SkipAnchor
	if o.LockTimeout == 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	if o.MaxEnvelopeSize <= 0 {
		o.MaxEnvelopeSize = DefaultMaxEnvelopeSize
	}
	if o.Reserve == 0 {
		o.Reserve = DefaultReserve
	}
	if o.Warn == nil {
		o.Warn = func(msg string) { log.Print(msg) }
	}
	timeout := o.LockTimeout
	if timeout < 0 {
		timeout = time.Nanosecond
	}
	// The pages are checked under the lock before bbolt reads them
	// (pagecheck.go).
	db, err := boltfile.Open(path, bolt.Options{Timeout: timeout, ReadOnly: o.ReadOnly, NoSync: o.NoSync,
		OpenFile: checkedOpenFile(timeout)}, fileErrors, releaseFile)
	if err != nil {
		return nil, err
	}
	r = &Receiver{db: db, path: path, opts: o, defect: v}
	defer func() {
		if err != nil {
			db.Close()
		}
	}()
	if err := r.load(); err != nil {
		return nil, err
	}
	if !o.ReadOnly {
		if o.Key == nil || (o.Anchor == nil && !skipAnchor) {
			return nil, ErrNoAnchor
		}
		if len(o.Key) != ed25519.PrivateKeySize || !r.pub.Equal(o.Key.Public()) {
			return nil, fmt.Errorf("%w: %s", ErrKeyMismatch, path)
		}
	}
	if skipAnchor {
		// Neither checked nor written: the defective variant, or a caller
		// that handles the anchor itself (anchorUnchecked). A writer
		// then keeps the digest of the state as found.
		r.opts.Anchor = nil
		if !o.ReadOnly {
			if r.state, err = r.computeState(); err != nil {
				return nil, err
			}
			r.stateSum = r.state.Sum()
		}
	} else if r.opts.Anchor != nil {
		if err := r.checkAnchor(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// fileErrors are this package's sentinels for boltfile's failures.
var fileErrors = boltfile.Errors{Prefix: "kvfence", NotInitialized: ErrNotInitialized, AlreadyInitialized: ErrAlreadyInitialized,
	StorageBusy: ErrStorageBusy, BadFormat: ErrBadFormat}

// openBolt opens the bbolt file with the receiver's page check and maps its
// failures onto this package's errors.
func openBolt(path string, bo *bolt.Options) (*bolt.DB, error) {
	return boltfile.Open(path, *bo, fileErrors, releaseFile)
}

// load checks the layout and reads the receiver id and the chain head.
func (r *Receiver) load() error {
	return r.view(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if tx.Bucket(name) == nil {
				return fmt.Errorf("%w: %s: missing bucket %q", ErrBadFormat, r.path, name)
			}
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(metaFormat); string(v) == "1" {
			return fmt.Errorf("%w: %s: format version 1 predates the state digest that checkpoints now commit to; "+
				"initialise a new receiver", ErrBadFormat, r.path)
		} else if string(v) != formatVersion {
			return fmt.Errorf("%w: %s: format version %q, want %q", ErrBadFormat, r.path, v, formatVersion)
		}
		id := meta.Get(metaReceiver)
		if err := checkName("receiver id", string(id)); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadFormat, r.path, err)
		}
		r.id = string(id)
		key := meta.Get(metaReceiverKey)
		if len(key) != ed25519.PublicKeySize {
			return fmt.Errorf("%w: %s: receiver key is %d bytes", ErrBadFormat, r.path, len(key))
		}
		r.pub = append(ed25519.PublicKey(nil), key...)
		if rk := meta.Get(metaRecoveryKey); rk != nil {
			if len(rk) != ed25519.PublicKeySize {
				return fmt.Errorf("%w: %s: recovery key is %d bytes", ErrBadFormat, r.path, len(rk))
			}
			r.recoveryPub = append(ed25519.PublicKey(nil), rk...)
		}
		head, err := readHead(tx)
		if err != nil {
			return err
		}
		r.head = head
		return nil
	})
}

// readHead returns the newest audit entry's position.
func readHead(tx *bolt.Tx) (audit.Head, error) {
	k, v := tx.Bucket(bucketAudit).Cursor().Last()
	if k == nil {
		return audit.Head{}, fmt.Errorf("%w: empty audit chain", ErrBadFormat)
	}
	e, err := audit.DecodeEntry(v)
	if err != nil {
		return audit.Head{}, fmt.Errorf("%w: newest audit entry: %v", ErrBadFormat, err)
	}
	if string(k) != string(audit.SeqKey(e.Seq)) {
		return audit.Head{}, fmt.Errorf("%w: newest audit entry stored under the wrong key", ErrBadFormat)
	}
	return audit.Head{Seq: e.Seq, Hash: audit.HashEntry(v)}, nil
}

// ID returns the receiver id given at Init.
func (r *Receiver) ID() string { return r.id }

// PublicKey returns the receiver's public key recorded at Init.
func (r *Receiver) PublicKey() ed25519.PublicKey { return r.pub }

// RecoveryKey returns the recovery public key recorded at Init, or nil.
func (r *Receiver) RecoveryKey() ed25519.PublicKey { return r.recoveryPub }

// Path returns the database file's path.
func (r *Receiver) Path() string { return r.path }

// Close releases the database and its lock.
func (r *Receiver) Close() error { return r.db.Close() }

// view runs fn in a read-only transaction, turning a bbolt panic on a
// corrupt page into an error.
func (r *Receiver) view(fn func(tx *bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: bbolt: %v", ErrBadFormat, r.path, p)
		}
	}()
	return r.db.View(fn)
}

// wtx is one write transaction with the audit chain it extends. Every call
// of a batch runs in the same wtx; now is the clock as the current call
// read it.
type wtx struct {
	tx     *bolt.Tx
	chain  *audit.Chain
	now    time.Time
	faults *faultHooks
	// state is the fence state's digest, kept current by every put to a
	// state bucket; stateDirty says a record changed in this transaction;
	// stateSum is state's sum as of the last checkpoint.
	state      audit.StateHash
	stateDirty bool
	stateSum   audit.Hash
}

// appendAudit fills in e's time, links it into the chain and stores it. It
// returns the entry's seq.
func (w *wtx) appendAudit(e *audit.Entry) (uint64, error) {
	if w.faults != nil && w.faults.beforeAudit != nil {
		if err := w.faults.beforeAudit(e); err != nil {
			return 0, err
		}
	}
	e.At = w.now.UnixNano()
	e.Note = boundNote(e.Note)
	raw, _, err := w.chain.Append(e)
	if err != nil {
		return 0, err
	}
	// Entries are never rewritten. A cached head that fell behind (a commit
	// reported as failed that reached the disk anyway) must stop writes, not
	// overwrite the entry it missed.
	b := w.tx.Bucket(bucketAudit)
	// Entries are only ever appended in key order, so pages may be filled
	// before they split instead of bbolt's half: the chain, every denial
	// included, takes about half the pages.
	b.FillPercent = auditFillPercent
	if b.Get(audit.SeqKey(e.Seq)) != nil {
		return 0, fmt.Errorf("%w: audit entry %d already exists; reopen the receiver", ErrBadFormat, e.Seq)
	}
	if err := b.Put(audit.SeqKey(e.Seq), raw); err != nil {
		return 0, err
	}
	return e.Seq, nil
}

// auditFillPercent is how full the audit bucket's pages are when they
// split; bbolt's default is half.
const auditFillPercent = 0.95

// maxNoteLen bounds an audit entry's free-text note.
const maxNoteLen = 1024

// boundNote keeps notes valid UTF-8 (a CBOR text string must be) and short,
// since they may quote decoder errors about hostile input.
func boundNote(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > maxNoteLen {
		s = strings.ToValidUTF8(s[:maxNoteLen], "") + "..."
	}
	return s
}
