package ledger

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/boltfile"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/ident"
	bolt "go.etcd.io/bbolt"
)

// Ledger is an open ledger file. Its methods are safe for concurrent use;
// writes take turns, each in one bbolt transaction.
type Ledger struct {
	db   *bolt.DB
	path string
	opts Options
	id   string
	pub  ed25519.PublicKey

	wmu    sync.Mutex // serialises writes, so head and anchor follow commits
	head   audit.Head
	anchor audit.SignedCheckpoint
}

// defectsAllowed says whether a defect.Variant may take effect. It is set
// only by the lab build (defect_lab.go, build tag kvfencelab) and by this
// package's tests; every other build refuses to open a defective ledger.
var defectsAllowed atomic.Bool

// Init creates a new ledger file at path, mode 0600, and writes its first
// checkpoint to opts.Anchor. It refuses an existing file. If it fails
// before its commit it leaves no file behind; if only the first anchor
// write fails, the file stays, and the next writable Open writes that
// anchor from the file's own init checkpoint.
func Init(path string, opts *InitOptions) (err error) {
	if opts == nil {
		opts = &InitOptions{}
	}
	if err := ident.Check("ledger id", opts.LedgerID); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if len(opts.Key) != ed25519.PrivateKeySize {
		return fmt.Errorf("%w: a ledger signing key (Ed25519) is required", ErrInvalidArgument)
	}
	if opts.Anchor == nil {
		return fmt.Errorf("%w: an anchor store is required", ErrInvalidArgument)
	}
	if _, err := opts.Anchor.Load(); !errors.Is(err, audit.ErrAnchorMissing) {
		if err == nil {
			return fmt.Errorf("%w: the anchor already holds a checkpoint; refusing to replace it", audit.ErrWriteConflict)
		}
		return fmt.Errorf("ledger: init: anchor: %w", err)
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
		for k, v := range map[string][]byte{string(metaFormat): []byte(formatVersion), string(metaLedger): []byte(opts.LedgerID),
			string(metaKey): opts.Key.Public().(ed25519.PublicKey)} {
			if err := meta.Put([]byte(k), v); err != nil {
				return err
			}
		}
		w := &wtx{tx: tx, chain: audit.NewChain(audit.Head{}), now: now()}
		if _, err := w.appendAudit(&audit.Entry{Kind: KindInit, Note: "ledger " + opts.LedgerID}); err != nil {
			return err
		}
		var err error
		first, err = w.checkpoint(opts.LedgerID, opts.Key)
		return err
	})
	if err != nil {
		return err
	}
	if err := opts.Anchor.Store(nil, first); err != nil {
		return fmt.Errorf("ledger: init: writing the first anchor: %w", err)
	}
	return nil
}

// Open opens an existing ledger. It never creates one. A writable ledger
// needs opts.Anchor and opts.Key, and is checked against its anchor before
// anything is read or written: a ledger file older than its anchor is
// audit.ErrRollbackDetected, one that disagrees with it audit.ErrForkDetected.
func Open(path string, opts *Options) (*Ledger, error) { return open(path, opts, defect.Variant{}) }

// open opens the ledger as the given variant. Only the lab build and this
// package's tests may ask for a defective one (defectsAllowed).
func open(path string, opts *Options, v defect.Variant) (l *Ledger, err error) {
	if v != (defect.Variant{}) && !defectsAllowed.Load() {
		return nil, fmt.Errorf("%w: a defective ledger exists only in this package's tests and the lab build", ErrInvalidArgument)
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	db, err := boltfile.Open(path, bolt.Options{Timeout: o.LockTimeout, ReadOnly: o.ReadOnly}, fileErrors, nil)
	if err != nil {
		return nil, err
	}
	l = &Ledger{db: db, path: path, opts: o}
	defer func() {
		if err != nil {
			db.Close()
		}
	}()
	if err := l.load(); err != nil {
		return nil, err
	}
	if !o.ReadOnly {
		if o.Key == nil || (o.Anchor == nil && !v.SkipAnchor) {
			return nil, ErrNoAnchor
		}
		if len(o.Key) != ed25519.PrivateKeySize || !l.pub.Equal(o.Key.Public()) {
			return nil, fmt.Errorf("%w: %s", ErrKeyMismatch, path)
		}
	}
	if v.SkipAnchor {
		// The defective variant neither checks nor writes the anchor: the
		// ledger as it was before it was anchored.
		l.opts.Anchor = nil
		return l, nil
	}
	if l.opts.Anchor != nil {
		if err := l.checkAnchor(); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// fileErrors are this package's sentinels for boltfile's failures.
var fileErrors = boltfile.Errors{Prefix: "ledger", NotInitialized: ErrNotInitialized, AlreadyInitialized: ErrAlreadyInitialized,
	StorageBusy: ErrStorageBusy, BadFormat: ErrBadFormat}

// load checks the layout and reads the ledger id, key and chain head.
func (l *Ledger) load() error {
	return l.view(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if tx.Bucket(name) == nil {
				return fmt.Errorf("%w: %s: missing bucket %q", ErrBadFormat, l.path, name)
			}
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(metaFormat); string(v) != formatVersion {
			return fmt.Errorf("%w: %s: format %q, want %q", ErrBadFormat, l.path, v, formatVersion)
		}
		l.id = string(meta.Get(metaLedger))
		if err := ident.Check("ledger id", l.id); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadFormat, l.path, err)
		}
		key := meta.Get(metaKey)
		if len(key) != ed25519.PublicKeySize {
			return fmt.Errorf("%w: %s: bad ledger key", ErrBadFormat, l.path)
		}
		l.pub = append(ed25519.PublicKey(nil), key...)
		head, err := boltfile.Head(tx.Bucket(bucketAudit))
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadFormat, l.path, err)
		}
		l.head = head
		return nil
	})
}

// checkAnchor compares the file with its anchor, and moves the anchor up
// over a crash window between a commit and its anchor write.
func (l *Ledger) checkAnchor() error {
	a, err := l.opts.Anchor.Load()
	if errors.Is(err, audit.ErrAnchorMissing) && !l.opts.ReadOnly {
		// Init died between its commit and its first anchor write.
		err = l.view(func(tx *bolt.Tx) error {
			a, err = boltfile.InitCheckpoint(tx.Bucket(bucketCheckpoints), checkpointLatest, l.pub, l.id, l.head)
			return err
		})
		if err == nil {
			err = l.opts.Anchor.Store(nil, a)
		}
	}
	if err != nil {
		return fmt.Errorf("ledger: %s: anchor: %w", l.path, err)
	}
	err = l.view(func(tx *bolt.Tx) error {
		return audit.CheckAnchor(a, l.pub, l.id, l.head, func(seq uint64) (audit.Hash, error) {
			return boltfile.HashAt(tx.Bucket(bucketAudit), seq)
		})
	})
	if err != nil {
		return fmt.Errorf("ledger: %s: %w", l.path, err)
	}
	l.anchor = a
	if l.opts.ReadOnly || a.Seq == l.head.Seq {
		return nil
	}
	return l.update(func(w *wtx) error { return nil })
}

// ID returns the ledger id given at init.
func (l *Ledger) ID() string { return l.id }

// Path returns the ledger file's path.
func (l *Ledger) Path() string { return l.path }

// Head returns the newest audit entry's position.
func (l *Ledger) Head() audit.Head {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.head
}

// Close closes the file and releases its lock.
func (l *Ledger) Close() error { return l.db.Close() }

func (l *Ledger) view(fn func(tx *bolt.Tx) error) error {
	return boltfile.View(l.db, l.path, ErrBadFormat, fn)
}

// update runs fn in one write transaction with a signed checkpoint, then
// moves the anchor; the call is acknowledged only once the anchor covers it.
func (l *Ledger) update(fn func(w *wtx) error) (err error) {
	if l.opts.ReadOnly {
		return ErrReadOnly
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	var w *wtx
	var sc audit.SignedCheckpoint
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: bbolt: %v", ErrBadFormat, l.path, p)
		}
	}()
	err = l.db.Update(func(tx *bolt.Tx) error {
		w = &wtx{tx: tx, chain: audit.NewChain(l.head), now: l.opts.Now()}
		if err := fn(w); err != nil {
			return err
		}
		var err error
		sc, err = w.checkpoint(l.id, l.opts.Key)
		return err
	})
	if err != nil {
		return err
	}
	l.head = w.chain.Head()
	if l.opts.Anchor == nil {
		return nil
	}
	if err := l.opts.Anchor.Store(&l.anchor, sc); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotAcknowledged, l.path, err)
	}
	l.anchor = sc
	return nil
}

// wtx is one write transaction with the audit chain it extends.
type wtx struct {
	tx    *bolt.Tx
	chain *audit.Chain
	now   time.Time
}

func (w *wtx) appendAudit(e *audit.Entry) (uint64, error) {
	e.At = w.now.UnixNano()
	raw, _, err := w.chain.Append(e)
	if err != nil {
		return 0, err
	}
	b := w.tx.Bucket(bucketAudit)
	if b.Get(audit.SeqKey(e.Seq)) != nil {
		return 0, fmt.Errorf("%w: audit entry %d already exists; reopen the ledger", ErrBadFormat, e.Seq)
	}
	return e.Seq, b.Put(audit.SeqKey(e.Seq), raw)
}

// checkpoint signs the head as of this transaction. The checkpoint's epoch
// high-water is the number of claims ever made, which only grows.
//
// Its State is the zero hash: the ledger's records are not yet covered by a
// state digest as the receiver's are (SECURITY.md, promise 9).
func (w *wtx) checkpoint(id string, key ed25519.PrivateKey) (audit.SignedCheckpoint, error) {
	head := w.chain.Head()
	sc, err := audit.Sign(key, audit.Checkpoint{Receiver: id, Seq: head.Seq, Head: head.Hash,
		EpochHighWater: claimCount(w.tx), At: w.now.UnixNano()})
	if err != nil {
		return sc, err
	}
	raw, err := sc.Marshal()
	if err != nil {
		return sc, err
	}
	return sc, w.tx.Bucket(bucketCheckpoints).Put(checkpointLatest, raw)
}
