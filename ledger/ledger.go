package ledger

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/boltengine"
	"github.com/kvfence/kvfence/internal/chain"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/ident"
	"github.com/kvfence/kvfence/witness"
)

// Ledger is an open ledger file. Its methods are safe for concurrent use;
// writes take turns, each in one transaction of its store.
type Ledger struct {
	eng  engine.Engine
	path string
	opts Options
	id   string
	pub  ed25519.PublicKey

	wmu    sync.Mutex // serialises writes, so head and anchor follow commits
	head   audit.Head
	anchor audit.SignedCheckpoint
	// cosignedSeq is the size of the newest checkpoint K witnesses
	// cosigned in this process, 0 for none.
	cosignedSeq atomic.Uint64
	// shared says the store is not a file this process locks (etcd):
	// other processes may write it, and it may be put back under this one.
	shared bool
	// witnesses is the quorum of Options.Witnesses, nil without any or
	// when the anchor is not checked.
	witnesses *witness.Quorum
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
func Init(path string, opts *InitOptions) error {
	opts, now, err := prepareInit(opts)
	if err != nil {
		return err
	}
	var first audit.SignedCheckpoint
	err = boltengine.CreateFile(path, boltengine.FileOptions{Errors: fileErrors, Timeout: DefaultLockTimeout}, func(tx engine.Tx) (err error) {
		first, err = initStore(tx, opts, now)
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

// InitEngine lays out a new ledger in e, an empty store, and writes its
// first checkpoint to opts.Anchor; e stays open for the caller. A store
// that already holds a ledger is ErrAlreadyInitialized.
func InitEngine(e engine.Engine, opts *InitOptions) error {
	opts, now, err := prepareInit(opts)
	if err != nil {
		return err
	}
	var first audit.SignedCheckpoint
	err = e.Update(context.Background(), func(tx engine.Tx) (err error) {
		if ok, err := tx.HasBucket(bucketMeta); err != nil {
			return err
		} else if ok {
			return fmt.Errorf("%w: the store already holds a ledger", ErrAlreadyInitialized)
		}
		first, err = initStore(tx, opts, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("ledger: init: %w", err)
	}
	if err := opts.Anchor.Store(nil, first); err != nil {
		return fmt.Errorf("ledger: init: writing the first anchor: %w", err)
	}
	return nil
}

// prepareInit checks Init's options and that the anchor is empty.
func prepareInit(opts *InitOptions) (*InitOptions, func() time.Time, error) {
	if opts == nil {
		opts = &InitOptions{}
	}
	if err := ident.Check("ledger id", opts.LedgerID); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if len(opts.Key) != ed25519.PrivateKeySize {
		return nil, nil, fmt.Errorf("%w: a ledger signing key (Ed25519) is required", ErrInvalidArgument)
	}
	if opts.Anchor == nil {
		return nil, nil, fmt.Errorf("%w: an anchor store is required", ErrInvalidArgument)
	}
	if _, err := opts.Anchor.Load(); !errors.Is(err, audit.ErrAnchorMissing) {
		if err == nil {
			return nil, nil, fmt.Errorf("%w: the anchor already holds a checkpoint; refusing to replace it", audit.ErrWriteConflict)
		}
		return nil, nil, fmt.Errorf("ledger: init: anchor: %w", err)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return opts, now, nil
}

// initStore lays out an empty store in its first transaction.
func initStore(tx engine.Tx, opts *InitOptions, now func() time.Time) (audit.SignedCheckpoint, error) {
	var none audit.SignedCheckpoint
	for _, name := range allBuckets {
		if err := tx.CreateBucket(name); err != nil {
			return none, err
		}
	}
	for k, v := range map[string][]byte{string(metaFormat): []byte(formatVersion), string(metaLedger): []byte(opts.LedgerID),
		string(metaKey): opts.Key.Public().(ed25519.PublicKey)} {
		if err := tx.Put(bucketMeta, []byte(k), v); err != nil {
			return none, err
		}
	}
	w := &wtx{tx: tx, chain: ledgerChain.NewWriter(tx, audit.Head{}), now: now()}
	if _, err := w.appendAudit(&audit.Entry{Kind: KindInit, Note: "ledger " + opts.LedgerID}); err != nil {
		return none, err
	}
	return w.checkpoint(opts.LedgerID, opts.Key)
}

// Open opens an existing ledger. It never creates one. A writable ledger
// needs opts.Anchor and opts.Key, and is checked against its anchor before
// anything is read or written: a ledger file older than its anchor is
// audit.ErrRollbackDetected, one that disagrees with it audit.ErrForkDetected.
func Open(path string, opts *Options) (*Ledger, error) { return open(path, opts, defect.Variant{}) }

// OpenEngine opens the ledger kept in e, which InitEngine laid out, with the
// same checks as Open. The ledger owns e from then on, even if OpenEngine
// fails. LockTimeout does not apply.
func OpenEngine(e engine.Engine, opts *Options) (*Ledger, error) {
	return openWith(e, "engine store", true, opts, defect.Variant{})
}

// open opens the ledger as the given variant. Only the lab build and this
// package's tests may ask for a defective one (defectsAllowed).
func open(path string, opts *Options, v defect.Variant) (l *Ledger, err error) {
	if v != (defect.Variant{}) && !defectsAllowed.Load() {
		return nil, fmt.Errorf("%w: a defective ledger exists only in this package's tests and the lab build", ErrInvalidArgument)
	}
	timeout, ro := DefaultLockTimeout, false
	if opts != nil {
		if opts.LockTimeout != 0 {
			timeout = opts.LockTimeout
		}
		ro = opts.ReadOnly
	}
	e, err := boltengine.OpenFile(path, boltengine.FileOptions{Errors: fileErrors, Timeout: timeout, ReadOnly: ro})
	if err != nil {
		return nil, err
	}
	return openWith(e, path, false, opts, v)
}

// openWith opens the ledger in e; path names it in messages, and shared
// says that other processes may write e. e is closed if it fails.
func openWith(e engine.Engine, path string, shared bool, opts *Options, v defect.Variant) (l *Ledger, err error) {
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
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
	l = &Ledger{eng: e, path: path, opts: o, shared: shared}
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
	if o.Anchor == nil && !v.SkipAnchor && (len(o.Witnesses) > 0 || o.WitnessQuorum != 0) {
		// The witnesses are asked where the anchor is checked; a caller
		// that gave them must not get a ledger that asked none.
		return nil, fmt.Errorf("%w: witnesses without an anchor store: the witnesses are asked when the anchor is checked", ErrInvalidArgument)
	}
	if v.SkipAnchor {
		// The defective variant neither checks nor writes the anchor: the
		// ledger as it was before it was anchored.
		l.opts.Anchor = nil
		return l, nil
	}
	if l.opts.Anchor != nil {
		// The witnesses are asked only where the anchor is checked: a
		// verification, which opens without it, asks them itself.
		if l.witnesses, err = newQuorum(l.id, l.pub, o.Witnesses, o.WitnessQuorum, o.WitnessFaults); err != nil {
			return nil, err
		}
		if err := l.checkAnchor(); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// fileErrors are this package's sentinels for boltfile's failures.
var fileErrors = boltengine.FileErrors{Prefix: "ledger", NotInitialized: ErrNotInitialized, AlreadyInitialized: ErrAlreadyInitialized,
	StorageBusy: ErrStorageBusy, BadFormat: ErrBadFormat}

// ledgerChain is where the ledger keeps its audit chain.
var ledgerChain = chain.Layout{Audit: bucketAudit, Checkpoints: bucketCheckpoints, Tree: bucketTree}

// load checks the layout and reads the ledger id, key and chain head.
func (l *Ledger) load() error {
	return l.view(func(tx engine.Tx) error {
		if ok, err := tx.HasBucket(bucketMeta); err != nil {
			return err
		} else if ok {
			// The format is read first, so that an older file is named
			// as such rather than as one missing the newer buckets.
			v, err := tx.Get(bucketMeta, metaFormat)
			if err != nil {
				return err
			}
			if string(v) == formatVersion1 {
				return fmt.Errorf("%w: %s: format %q predates the Merkle tree over the audit entries whose root every checkpoint "+
					"now signs; initialise a new ledger (export what you need with observe first)", ErrBadFormat, l.path, v)
			}
		}
		for _, name := range allBuckets {
			ok, err := tx.HasBucket(name)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: %s: missing bucket %q", ErrBadFormat, l.path, name)
			}
		}
		var meta [3][]byte
		for i, k := range [][]byte{metaFormat, metaLedger, metaKey} {
			v, err := tx.Get(bucketMeta, k)
			if err != nil {
				return err
			}
			meta[i] = v
		}
		if string(meta[0]) != formatVersion {
			return fmt.Errorf("%w: %s: format %q, want %q", ErrBadFormat, l.path, meta[0], formatVersion)
		}
		l.id = string(meta[1])
		if err := ident.Check("ledger id", l.id); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadFormat, l.path, err)
		}
		if len(meta[2]) != ed25519.PublicKeySize {
			return fmt.Errorf("%w: %s: bad ledger key", ErrBadFormat, l.path)
		}
		l.pub = append(ed25519.PublicKey(nil), meta[2]...)
		head, mismatch, err := ledgerChain.LoadHead(tx)
		if err == nil && mismatch != nil {
			err = mismatch
		}
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
		err = l.view(func(tx engine.Tx) error {
			a, err = ledgerChain.InitCheckpoint(tx, l.pub, l.id, l.head)
			return err
		})
		if err == nil {
			err = l.opts.Anchor.Store(nil, a)
		}
	}
	if err != nil {
		return fmt.Errorf("ledger: %s: anchor: %w", l.path, err)
	}
	err = l.view(func(tx engine.Tx) error {
		// The head is read again, after the anchor: another process on a
		// shared store (etcd) may have committed and moved the anchor
		// since load read it.
		head, mismatch, err := ledgerChain.LoadHead(tx)
		if err == nil && mismatch != nil {
			err = mismatch
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadFormat, l.path, err)
		}
		l.head = head
		if err := audit.CheckAnchor(a, l.pub, l.id, l.head, func(seq uint64) (audit.Hash, error) {
			return ledgerChain.HashAt(tx, seq)
		}); err != nil {
			return err
		}
		if err := checkTree(tx, a.Checkpoint); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrBadFormat, l.path, err)
		}
		if a.Seq != head.Seq {
			// Past the anchor, only the store's own signed checkpoint
			// says the entries are this ledger's (a commit whose anchor
			// write was lost); the anchor is moved over them below.
			return l.checkStoreHead(tx, head)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ledger: %s: %w", l.path, err)
	}
	l.anchor = a
	if l.witnesses != nil {
		// Before the refresh below, which would ask them to cosign: a
		// file behind a witness must not show it a checkpoint.
		if _, err := l.checkWitnesses(l.witnesses, l.pub, witnessTimeout(l.opts.WitnessTimeout)); err != nil {
			return err
		}
	}
	if l.opts.ReadOnly || a.Seq == l.head.Seq {
		return nil
	}
	// The anchor moves up to the store's own newest checkpoint, not a new
	// signature of the head: one size, one signed body (witnesses that
	// cosigned it would refuse another account of it for ever).
	return l.anchorStoreHead()
}

// checkTree checks the stored tree against every entry, then its roots
// against the anchor a and against the store's own newest checkpoint: a
// tree edited apart from the entries, or one whose root is not the one
// the ledger signed, is refused (audit.ErrTreeMismatch). The ledger never
// archives, so every leaf's entry is there to check.
func checkTree(tx engine.Tx, a audit.Checkpoint) error {
	if err := ledgerChain.CheckTree(tx); err != nil {
		return err
	}
	if err := ledgerChain.CheckRoot(tx, a, "the anchor"); err != nil {
		return err
	}
	latest, err := ledgerChain.LatestCheckpoint(tx)
	if err != nil {
		return err
	}
	return ledgerChain.CheckRoot(tx, latest.Checkpoint, "the store's newest checkpoint")
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
func (l *Ledger) Close() error { return l.eng.Close() }

// view runs fn in a read transaction, turning a bbolt panic on a corrupt
// page into an error. fn may run more than once.
func (l *Ledger) view(fn func(tx engine.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: bbolt: %v", ErrBadFormat, l.path, p)
		}
	}()
	return l.eng.View(context.Background(), fn)
}

// update runs fn in one write transaction with a signed checkpoint, then
// moves the anchor and, with witnesses, has K of them cosign the anchored
// checkpoint; the call is acknowledged only once both cover it.
// fn may run more than once; each run starts from the head the store holds.
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
	anchor, err := l.currentAnchor()
	if err != nil {
		return err
	}
	err = l.eng.Update(context.Background(), func(tx engine.Tx) error {
		head, err := ledgerChain.ReadHead(tx)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadFormat, l.path, err)
		}
		if anchor != nil {
			// A store put back under a running ledger ends before the
			// anchor, or forks from it: nothing is written on it.
			if err := anchor.CheckHead(head, func(seq uint64) (audit.Hash, error) { return ledgerChain.HashAt(tx, seq) }); err != nil {
				return fmt.Errorf("ledger: %s: %w", l.path, err)
			}
			if head.Seq != anchor.Seq {
				if err := l.checkStoreHead(tx, head); err != nil {
					return err
				}
			}
		}
		w = &wtx{tx: tx, chain: ledgerChain.NewWriter(tx, head), now: l.opts.Now()}
		if err := fn(w); err != nil {
			return err
		}
		if sc, err = w.checkpoint(l.id, l.opts.Key); err != nil {
			return err
		}
		if anchor != nil {
			return anchor.CheckAdvance(sc.Checkpoint)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if anchor != nil && anchor.Seq > l.anchor.Seq {
		// Another process moved the anchor, and this commit extends it.
		l.anchor = *anchor
	}
	l.head = w.chain.Head()
	if l.opts.Anchor == nil {
		return nil
	}
	return l.acknowledge(sc)
}

// acknowledge moves the anchor to sc, a checkpoint of this chain that the
// store holds, and with witnesses has K of them cosign the anchored
// checkpoint; either failing is ErrNotAcknowledged. The caller holds wmu.
func (l *Ledger) acknowledge(sc audit.SignedCheckpoint) error {
	err := chain.Advance(l.opts.Anchor, &l.anchor, sc, l.inChain)
	if err == nil && l.witnesses != nil {
		// The anchor left covers this commit (another process's newer
		// checkpoint on a shared store, or sc): that one is cosigned.
		err = l.cosign(l.anchor)
		for range maxCosignRetries {
			if err == nil || !l.shared {
				break
			}
			// Another process's round may have moved the witnesses
			// during this one (a 409 above this checkpoint, or a second
			// 409): if its newer checkpoint, in this chain, is now the
			// anchor, it covers this commit, and K cosignatures of it
			// acknowledge it; if not, a witness that moved twice is
			// asked again from the size it told. A witness ahead of
			// every anchor is still refused, and a witness down is not
			// asked again.
			a, lerr := chain.CurrentAnchor(l.opts.Anchor, l.anchor, l.pub, l.id)
			if lerr != nil {
				break
			}
			if a.Seq > l.anchor.Seq && l.inChain(a) == nil {
				l.anchor = a
			} else if !movedTwice(err) {
				break
			}
			err = l.cosign(l.anchor)
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotAcknowledged, l.path, err)
	}
	return nil
}

// movedTwice reports whether err is a witness's 409 that the round's one
// retry did not settle, and no divergence: the witness moved on beside
// the round, as another writer's round moves it.
func movedTwice(err error) bool {
	var c *witness.ConflictError
	var d *witness.DivergenceError
	return errors.As(err, &c) && !errors.As(err, &d)
}

// maxCosignRetries bounds the rounds acknowledge asks again on a shared
// store (each for a newer anchor another process wrote, or a witness that
// moved twice), and the questions checkWitnesses asks again there.
const maxCosignRetries = 8

// inChain checks that got, an anchor read back, is signed with the
// ledger's key and at a seq of the chain the store holds.
func (l *Ledger) inChain(got audit.SignedCheckpoint) error {
	if err := got.Verify(l.pub); err != nil {
		return err
	}
	return l.view(func(tx engine.Tx) error {
		h, err := ledgerChain.HashAt(tx, got.Seq)
		if err == nil && h != got.Head {
			err = fmt.Errorf("%w: the anchor's seq %d has another hash", audit.ErrForkDetected, got.Seq)
		}
		return err
	})
}

// anchorStoreHead moves the anchor, behind the head after a lost anchor
// write, to the store's own newest checkpoint, which Open has checked, and
// has the witnesses cosign it. With witnesses the head is not signed again
// as update would: a witness keeps one body per tree size, and the store's
// checkpoint may be one it already cosigned (an anchor file restored alone
// from a backup, the ledger file current); another body at that size would
// be a fork to it, and the ledger would never open again.
func (l *Ledger) anchorStoreHead() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	anchor, err := l.currentAnchor()
	if err != nil {
		return err
	}
	if anchor == nil {
		anchor = &l.anchor
	}
	var sc audit.SignedCheckpoint
	err = l.view(func(tx engine.Tx) error {
		head, err := ledgerChain.ReadHead(tx)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadFormat, l.path, err)
		}
		// Read again: on a shared store another process may have
		// committed since Open's check; its head must still extend the
		// anchor and be covered by the ledger's own checkpoint.
		if err := anchor.CheckHead(head, func(seq uint64) (audit.Hash, error) { return ledgerChain.HashAt(tx, seq) }); err != nil {
			return fmt.Errorf("ledger: %s: %w", l.path, err)
		}
		if err := l.checkStoreHead(tx, head); err != nil {
			return err
		}
		if sc, err = ledgerChain.LatestCheckpoint(tx); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadFormat, l.path, err)
		}
		if err := checkTree(tx, sc.Checkpoint); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrBadFormat, l.path, err)
		}
		l.head = head
		if anchor.Seq == head.Seq {
			// Another process of a shared store anchored it meanwhile.
			return nil
		}
		return anchor.CheckAdvance(sc.Checkpoint)
	})
	if err != nil {
		return err
	}
	if anchor.Seq > l.anchor.Seq {
		l.anchor = *anchor
	}
	if l.anchor.Seq == sc.Seq {
		if l.witnesses == nil {
			return nil
		}
		if err := l.cosign(l.anchor); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrNotAcknowledged, l.path, err)
		}
		return nil
	}
	return l.acknowledge(sc)
}

// checkStoreHead checks that the store's own newest checkpoint, which
// every commit signs and stores with its entries, is signed with the
// ledger's key and covers head. Entries past the anchor without one were
// not written by this ledger: someone who can write the store but does
// not hold the key appended them (a forged reconcile, or a containment
// record sealed by a forged entry), and nothing may be decided on them or
// signed over them.
func (l *Ledger) checkStoreHead(tx engine.Tx, head audit.Head) error {
	sc, err := ledgerChain.LatestCheckpoint(tx)
	if err == nil {
		err = sc.Verify(l.pub)
	}
	if err == nil && (sc.Receiver != l.id || sc.Seq != head.Seq || sc.Head != head.Hash) {
		err = fmt.Errorf("it covers seq %d, the head is seq %d", sc.Seq, head.Seq)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: the entries up to seq %d are not covered by a checkpoint signed with the ledger's key: %v",
			ErrContainmentTampered, l.path, head.Seq, err)
	}
	return nil
}

// checkedView is view for the reads that a containment's decisions rest
// on: the store must still hold the chain this process last anchored, and
// any entries past it must be covered by a checkpoint signed with the
// ledger's key, or the records they seal are not the ledger's.
func (l *Ledger) checkedView(fn func(tx engine.Tx) error) error {
	l.wmu.Lock()
	anchor := l.anchor
	l.wmu.Unlock()
	return l.view(func(tx engine.Tx) error {
		head, err := ledgerChain.LastHead(tx)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadFormat, l.path, err)
		}
		if anchor.Seq != 0 {
			if err := anchor.CheckHead(head, func(seq uint64) (audit.Hash, error) { return ledgerChain.HashAt(tx, seq) }); err != nil {
				return fmt.Errorf("ledger: %s: %w", l.path, err)
			}
		}
		if head.Seq != anchor.Seq {
			if err := l.checkStoreHead(tx, head); err != nil {
				return err
			}
		}
		return fn(tx)
	})
}

// currentAnchor reads the anchor before a write on a shared store, or
// returns nil on a file that this process alone writes. The anchor this
// process last wrote can be far behind the one that covers other
// processes' commits, and a store put back between the two would pass a
// check against it: the ledger would hand out a claim that a later one
// superseded.
func (l *Ledger) currentAnchor() (*audit.SignedCheckpoint, error) {
	if !l.shared || l.opts.Anchor == nil {
		return nil, nil
	}
	a, err := chain.CurrentAnchor(l.opts.Anchor, l.anchor, l.pub, l.id)
	if err != nil {
		return nil, fmt.Errorf("ledger: %s: anchor: %w", l.path, err)
	}
	return &a, nil
}

// wtx is one run of a write transaction with the audit chain it extends.
type wtx struct {
	tx    engine.Tx
	chain chain.Writer
	now   time.Time
}

func (w *wtx) appendAudit(e *audit.Entry) (uint64, error) {
	e.At = w.now.UnixNano()
	seq, err := w.chain.Append(e)
	if errors.Is(err, chain.ErrBadChain) {
		return 0, fmt.Errorf("%w: %v; reopen the ledger", ErrBadFormat, err)
	}
	return seq, err
}

// checkpoint signs the head as of this transaction. The checkpoint's epoch
// high-water is the number of claims ever made, which only grows.
//
// Its State is the zero hash: the ledger's records are not yet covered by a
// state digest as the receiver's are (SECURITY.md, promise 9).
func (w *wtx) checkpoint(id string, key ed25519.PrivateKey) (audit.SignedCheckpoint, error) {
	n, err := claimCount(w.tx)
	if err != nil {
		return audit.SignedCheckpoint{}, err
	}
	return w.chain.Checkpoint(key, audit.Checkpoint{Receiver: id, EpochHighWater: n, At: w.now.UnixNano()})
}
