package kvfence

import (
	"context"
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
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/boltengine"
	"github.com/kvfence/kvfence/internal/chain"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/witness"
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
	// Witnesses, if any, are the witnesses that cosign the receiver's
	// checkpoints (docs/design.md §7.10), and WitnessQuorum is K, how many
	// of them make a write acknowledged. A write is then acknowledged only
	// once its anchor is written and K witnesses cosigned the checkpoint
	// that covers it; fewer is ErrNotAcknowledged, as a failed anchor
	// write is. Open (with the anchor checked) asks every witness for its
	// latest cosigned checkpoint of this receiver and refuses a database
	// behind any of them (ErrRollbackDetected) or beside one
	// (ErrForkDetected), and fewer than N-K+1 answers (ErrWitnessAnswers):
	// only that many are sure to include one of the K that cosigned the
	// last acknowledged write. Open refuses a quorum that
	// witness.NewQuorum refuses (ErrInvalidArgument).
	Witnesses []witness.Member
	// WitnessQuorum is K, 1 <= K <= len(Witnesses).
	WitnessQuorum int
	// WitnessFaults is F, how many witnesses may have lost, rolled back
	// or forged their store at once: Open then needs N-K+1+F answers
	// (witness.QuorumOptions.Faults), 0 <= F <= K-1. Zero trusts every
	// witness's store: one rolled back beside K-1 down lets a restored
	// database open.
	WitnessFaults int
	// WitnessTimeout bounds a cosign round and Open's question to the
	// witnesses: zero means DefaultWitnessTimeout.
	WitnessTimeout time.Duration
	// Key is the receiver's Ed25519 signing key, required for writing: it
	// signs every checkpoint. Its public half must be the one recorded at
	// Init (ErrKeyMismatch). A read-only receiver uses it only to sign
	// checkpoint notes (SignedCheckpoint, ReceiptProof).
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
	// MaxRecords bounds the state records (control, grant, target,
	// receipt, hold and app records together) whose fingerprints a writable receiver
	// keeps, so that no record changed in the store under it is decided
	// on (knownrecords.go). Zero means DefaultMaxRecords. Open refuses a
	// store that holds more with ErrRecordLimit; at the bound, a call that
	// would create a record (an applied write's receipt, an activation's
	// grant, a new scope or target) fails with ErrRecordLimit and writes
	// nothing, while holds and denials, which only rewrite records, still
	// commit. The tables take about 24 bytes a slot, at most four slots
	// for every three records.
	MaxRecords int
	// Warn receives what an operator must see but what does not stop the
	// receiver: a damaged anchor slot found by Open (see AnchorDamage).
	// Nil means the standard library's log.Print, so that no warning is
	// lost.
	Warn func(msg string)
	// AnchorClusterID is the operator's statement of the cluster ID of an
	// anchor kept on a cluster (ClusterAnchor), 0 for none. A receiver
	// initialised with such an anchor records its cluster and needs
	// none; one that records no anchor cluster (initialised before the
	// record existed) opens on an anchor on a cluster only if this names
	// it (ErrAnchorClusterUnrecorded otherwise). Given with a record, it
	// must agree with it.
	AnchorClusterID uint64
	// Effects are the embedder's effects by name, which targets of kind
	// func name (Admin.CreateTargetSpec). Each declares the app buckets
	// it may use; a write to a func target whose effect is not here is
	// denied, never applied without it. Open refuses an effect whose
	// name or buckets are invalid, or that has no Apply.
	Effects map[string]Effect
	// Dispatchers make the writes of remote targets, by kind
	// (docs/design.md §4.2). A receiver whose targets use a kind without
	// a dispatcher still opens, and denies every submit to them
	// (precondition_failed); one whose store holds a dispatch still in
	// flight of such a kind refuses to open (ErrNoDispatcher).
	Dispatchers map[TargetKind]Dispatcher
	// DispatchTimeout bounds a remote write, from its decision to its
	// outcome: zero means DefaultDispatchTimeout; at most
	// MaxDispatchTimeout.
	DispatchTimeout time.Duration

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
	// treeChecked says this open checked the stored Merkle tree against
	// the entries (the anchored replay): only then does the receiver sign
	// a checkpoint note over it, since the tree's records are not covered
	// by the anchored checkpoint yet, and a tree edited in the file would
	// otherwise be signed as it stands.
	treeChecked bool
	// witnesses is the quorum of Options.Witnesses, nil without any.
	witnesses *witness.Quorum
	// cosigned is the newest note K witnesses cosigned, nil for none.
	cosigned atomic.Pointer[cosignedNote]
	eng      engine.Engine
	// path is the database file's path, or a name of the store for a
	// receiver opened on an engine, in messages; file says which.
	path string
	file bool
	id   string
	opts Options
	// pub and recoveryPub are the keys recorded at Init.
	pub, recoveryPub ed25519.PublicKey
	defect           defect.Variant
	faults           faultHooks

	// queue holds write calls waiting to be group-committed; a batch holds
	// at most batchCalls calls and batchBytes of input (batchLimits).
	queue                  commitQueue
	batchCalls, batchBytes int
	// maxReads bounds the reads of one request of a batch's read-ahead
	// (the engine's Limits().MaxOps; 0: no bound), and committedSeq is the
	// chain's length after this process's last commit (0 before it), from
	// which the leader sizes the next batch's read of the tree's frontier
	// (batchCallsNow).
	maxReads     int
	committedSeq atomic.Uint64
	// wmu is held by the leader of a batch while it runs the batch's write
	// transaction. It guards head, the audit chain's newest entry, which a
	// write transaction reads at its start and which is replaced only after
	// its commit succeeded.
	wmu sync.Mutex
	// terms keeps the digest terms of the records it writes most often.
	terms termCache
	// amu is held by a leader while it writes the anchor for its commits.
	// A leader takes it before it lets go of wmu, so anchor writes happen
	// in commit order (groupcommit.go).
	amu  sync.Mutex
	head audit.Head
	// headMismatch is set when Open found a head key that disagrees with
	// the newest entry (chain.ErrHeadMismatch): the state check refuses
	// such a store, and a writer that skips that check (Recover) starts
	// from the newest entry.
	headMismatch error
	// state is the fence state's digest as of head, checked against the
	// records at Open, and stateSum its sum; guarded by wmu like head.
	state    audit.StateHash
	stateSum audit.Hash
	// carried is the consumed admission that the newest checkpoint found
	// by the last state check names, which every later checkpoint carries
	// (newWtx); guarded by wmu like head.
	carried audit.AdmissionRecord
	// known holds the fingerprints of the state records as of head, for
	// a writable receiver; recs is the write transaction's view of it.
	// Both are guarded by wmu like head.
	known *knownRecords
	recs  txRecords
	// resyncFrom is, during a resync, the head this process last
	// committed or verified, which the store's chain must still hold;
	// guarded by wmu.
	resyncFrom *audit.Head
	// hw is the epoch high-water as of head, verified by checkState or
	// written by this process; guarded by wmu like head.
	hw uint64
	// anchor is the anchor as last read or written; guarded by anchorMu,
	// since the anchor write of one batch runs beside the transaction of
	// the next.
	anchorMu sync.Mutex
	anchor   audit.SignedCheckpoint
	// unsureSeq, guarded by anchorMu, is the seq of the checkpoint whose
	// anchor write last failed, until a write succeeds: a failure can come
	// after the checkpoint reached the anchor (a failed fdatasync), and
	// anchor then holds a checkpoint that may not be durable. Zero when the
	// last write succeeded.
	unsureSeq uint64
	// anchorSince, guarded by anchorMu, is when the anchor write in
	// progress started; zero when none is.
	anchorSince time.Time
	// anchorDamage is the damaged anchor slot Open found, or nil. It is
	// set before Open returns and never changed.
	anchorDamage *audit.SlotDamage
	// closed is set by Close, for Readiness.
	closed atomic.Bool
	// gate is the in-process record of holds that dispatches check before
	// they start (dispatch_gate.go).
	gate dispatchGate
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
	// freeSpace, if set, replaces the store's measurement of the volume's
	// free space that the reserve for administrators is checked against.
	freeSpace func(path string) (int64, error)
	// beforeGate, if set, runs after a dispatching decision committed and
	// before its write checks the hold gate, so that a test can commit a
	// hold in between.
	beforeGate func(scope string)
	// skipHoldWait and skipFence remove a hold's wait for the remote
	// writes decided before it, and the fencing write at a write's
	// deadline: only the tests that show those controls are decisive set
	// them, to show that they then go red.
	skipHoldWait, skipFence bool
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
// own init checkpoint, but only to the anchor Init was given (by its
// audit.Locator location, which Init records), never to another store that
// merely holds no anchor either.
func Init(path string, opts *InitOptions) error {
	p, err := prepareInit(opts)
	if err != nil {
		return err
	}
	var first audit.SignedCheckpoint
	err = boltengine.CreateFile(path, boltengine.FileOptions{Errors: fileErrors, Timeout: DefaultLockTimeout, FillPercent: fillPercent}, func(tx engine.Tx) (err error) {
		first, err = p.initStore(tx)
		return err
	})
	if err != nil {
		return err
	}
	return p.firstAnchor(first)
}

// InitEngine lays out a new receiver on e, an empty store (a fresh etcd
// prefix), and writes the first anchor; e stays open for the caller. A
// store that already holds a receiver is ErrAlreadyInitialized. A store
// that holds a half-made receiver (an Init whose outcome was unknown) is
// refused too, as ErrAlreadyInitialized: Open then tells whether it is
// whole. If only the first anchor write fails, the next writable
// OpenEngine writes that anchor from the store's own init checkpoint.
func InitEngine(e engine.Engine, opts *InitOptions) error {
	p, err := prepareInit(opts)
	if err != nil {
		return err
	}
	if err := CheckApart(e, opts.Anchor); err != nil {
		return err
	}
	var first audit.SignedCheckpoint
	err = e.Update(context.Background(), func(tx engine.Tx) (err error) {
		if ok, err := tx.HasBucket(bucketMeta); err != nil {
			return err
		} else if ok {
			return fmt.Errorf("%w: the store already holds a receiver", ErrAlreadyInitialized)
		}
		first, err = p.initStore(tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("kvfence: init: %w", engineErr(err))
	}
	return p.firstAnchor(first)
}

// initPlan is a checked InitOptions.
type initPlan struct {
	opts        *InitOptions
	receiverKey ed25519.PublicKey
	maxTTL      time.Duration
	now         func() time.Time
	// anchorCluster is metaAnchorCluster's value.
	anchorCluster []byte
}

// prepareInit checks Init's options and that the anchor is empty.
func prepareInit(opts *InitOptions) (*initPlan, error) {
	if opts == nil {
		opts = &InitOptions{}
	}
	if err := checkName("receiver id", opts.ReceiverID); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if len(opts.Key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: a receiver signing key (Ed25519) is required", ErrInvalidArgument)
	}
	if opts.Anchor == nil {
		return nil, fmt.Errorf("%w: an anchor store is required", ErrInvalidArgument)
	}
	p := &initPlan{opts: opts, receiverKey: opts.Key.Public().(ed25519.PublicKey), maxTTL: opts.MaxGrantTTL, now: opts.Now}
	if opts.RecoveryKey != nil {
		if len(opts.RecoveryKey) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: recovery key must be an Ed25519 public key", ErrInvalidArgument)
		}
		if opts.RecoveryKey.Equal(p.receiverKey) {
			return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, ErrRecoveryKeyIsReceiverKey)
		}
	}
	// Asked before the store's transaction, which may run more than once,
	// and recorded in it: a receiver made from now on always says which
	// cluster its anchor is on. The anchor is held to that cluster from
	// here on, its first read included.
	rec, err := anchorClusterRecord(opts.Anchor)
	if err != nil {
		return nil, err
	}
	p.anchorCluster = rec
	if _, err := opts.Anchor.Load(); !errors.Is(err, audit.ErrAnchorMissing) {
		if err == nil {
			return nil, fmt.Errorf("%w: the anchor already holds a checkpoint; refusing to replace it", audit.ErrWriteConflict)
		}
		return nil, fmt.Errorf("kvfence: init: anchor: %w", err)
	}
	if opts.MaxGrantTTL < 0 {
		return nil, fmt.Errorf("%w: negative maximum grant lifetime", ErrInvalidArgument)
	}
	if p.maxTTL == 0 {
		p.maxTTL = DefaultMaxGrantTTL
	}
	if p.now == nil {
		p.now = time.Now
	}
	return p, nil
}

// firstAnchor writes the init checkpoint to the anchor.
func (p *initPlan) firstAnchor(first audit.SignedCheckpoint) error {
	if err := p.opts.Anchor.Store(nil, first); err != nil {
		return fmt.Errorf("kvfence: init: writing the first anchor: %w", err)
	}
	return nil
}

// initStore lays out an empty store in its first transaction: buckets,
// meta records, the init entry and the first checkpoint.
func (p *initPlan) initStore(tx engine.Tx) (audit.SignedCheckpoint, error) {
	opts, receiverKey, maxTTL := p.opts, p.receiverKey, p.maxTTL
	var none audit.SignedCheckpoint
	for _, name := range allBuckets {
		if err := tx.CreateBucket(name); err != nil {
			return none, err
		}
	}
	meta := map[string][]byte{string(metaFormat): []byte(formatVersion), string(metaReceiver): []byte(opts.ReceiverID),
		string(metaReceiverKey): receiverKey, string(metaMaxGrantTTL): encodeMaxGrantTTL(maxTTL),
		string(metaAnchorCluster): p.anchorCluster}
	if opts.RecoveryKey != nil {
		meta[string(metaRecoveryKey)] = opts.RecoveryKey
	}
	if l, ok := opts.Anchor.(audit.Locator); ok {
		meta[string(metaAnchorLocation)] = []byte(l.Location())
	}
	for k, v := range meta {
		if err := tx.Put(bucketMeta, []byte(k), v); err != nil {
			return none, err
		}
	}
	// The empty state's digest is stored too: Open always finds one.
	w := &wtx{tx: tx, chain: auditChain.NewWriter(tx, audit.Head{}), now: p.now(), stateDirty: true}
	if _, err := w.appendAudit(&audit.Entry{Kind: KindInit, Note: "receiver " + opts.ReceiverID + "; max grant ttl " + maxTTL.String()}); err != nil {
		return none, err
	}
	return w.checkpoint(opts.ReceiverID, opts.Key)
}

// Open opens an existing receiver database. It never creates one: a missing
// file is ErrNotInitialized. A lock not obtained within opts.LockTimeout is
// ErrStorageBusy. A file that is not a receiver database of this format is
// ErrBadFormat.
func Open(path string, opts *Options) (*Receiver, error) {
	return open(path, opts, defect.Variant{})
}

// OpenEngine opens the receiver kept in e, which InitEngine laid out, with
// the same checks as Open: the layout, the key, the anchor and the state
// digest. The receiver owns e from then on, even if OpenEngine fails: Close
// (or the failure) closes it. LockTimeout, NoSync and Reserve are about a
// file and do not apply; ReadOnly refuses every write.
func OpenEngine(e engine.Engine, opts *Options) (*Receiver, error) {
	return openWith(e, "engine store", false, opts, defect.Variant{})
}

// open opens the receiver file as the given variant. Only the lab build and
// this package's tests may ask for a defective one (defectsAllowed).
func open(path string, opts *Options, v defect.Variant) (r *Receiver, err error) {
	if v != (defect.Variant{}) && !defectsAllowed.Load() {
		return nil, fmt.Errorf("%w: a defective receiver exists only in this package's tests and the lab build", ErrInvalidArgument)
	}
	timeout := DefaultLockTimeout
	var ro, noSync bool
	if opts != nil {
		if opts.LockTimeout != 0 {
			timeout = opts.LockTimeout
		}
		ro, noSync = opts.ReadOnly, opts.NoSync
	}
	if timeout < 0 {
		timeout = time.Nanosecond
	}
	// The pages are checked under the lock before bbolt reads them
	// (boltengine.CheckPages).
	e, err := boltengine.OpenFile(path, boltengine.FileOptions{Errors: fileErrors, Timeout: timeout, ReadOnly: ro, NoSync: noSync,
		CheckPages: true, FillPercent: fillPercent})
	if err != nil {
		return nil, err
	}
	return openWith(e, path, true, opts, v)
}

// openWith opens the receiver in e; path names it in messages, and file
// says it is a database file (for the reserve's measurement). e is closed
// if it fails.
func openWith(e engine.Engine, path string, file bool, opts *Options, v defect.Variant) (r *Receiver, err error) {
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
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
	if o.MaxRecords <= 0 {
		o.MaxRecords = DefaultMaxRecords
	}
	if err := checkEffects(o.Effects); err != nil {
		return nil, err
	}
	if err := checkDispatchOptions(&o); err != nil {
		return nil, err
	}
	// The caller's map and slices may change after Open; the receiver
	// keeps its own.
	o.Effects = cloneEffects(o.Effects)
	r = &Receiver{eng: e, path: path, file: file, opts: o, defect: v}
	r.batchCalls, r.batchBytes = batchLimits(e.Limits())
	r.maxReads = e.Limits().MaxOps
	if err := r.load(); err != nil {
		return nil, err
	}
	if len(o.Witnesses) > 0 && o.Anchor == nil && !skipAnchor {
		// They are asked where the anchor is checked; without it they
		// would be dropped in silence, and nothing given is ignored.
		return nil, fmt.Errorf("%w: witnesses without an anchor store: the witnesses are asked where the database is checked against its anchor", ErrInvalidArgument)
	}
	if !skipAnchor && r.opts.Anchor != nil {
		// The witnesses are asked only where the anchor is checked: a
		// verification or a recovery, which opens without it, asks them
		// itself.
		if r.witnesses, err = r.newQuorum(o.Witnesses, o.WitnessQuorum, o.WitnessFaults); err != nil {
			return nil, err
		}
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
			if r.known, err = newKnownRecords(o.MaxRecords); err != nil {
				return nil, err
			}
			if r.state, err = r.computeState(r.known); err != nil {
				return nil, err
			}
			r.stateSum = r.state.Sum()
			if err := r.view(func(tx engine.Tx) (err error) {
				r.hw, err = epochHighWater(tx)
				return err
			}); err != nil {
				return nil, err
			}
		}
	} else if r.opts.Anchor != nil {
		if err := r.checkAnchorCluster(r.opts.Anchor, o.AnchorClusterID); err != nil {
			return nil, err
		}
		if err := r.checkAnchor(); err != nil {
			return nil, err
		}
	}
	if !o.ReadOnly && !o.anchorUnchecked && v == (defect.Variant{}) {
		// Before the receiver serves: a dispatch a process left in flight
		// is settled or fenced off (dispatch_open.go).
		if err := r.resolveDispatches(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// fileErrors are this package's sentinels for the bbolt file's failures.
var fileErrors = boltengine.FileErrors{Prefix: "kvfence", NotInitialized: ErrNotInitialized, AlreadyInitialized: ErrAlreadyInitialized,
	StorageBusy: ErrStorageBusy, BadFormat: ErrBadFormat}

// auditChain is where the receiver keeps its audit chain.
var auditChain = chain.Layout{Audit: bucketAudit, Checkpoints: bucketCheckpoints, Tree: bucketTree}

// fillPercent fills the audit bucket's pages before they split instead of
// bbolt's half: entries are only ever appended in key order, and the
// chain, every denial included, then takes about half the pages.
var fillPercent = map[string]float64{string(bucketAudit): auditFillPercent}

// load checks the layout and reads the receiver id and the chain head.
func (r *Receiver) load() error {
	return r.view(func(tx engine.Tx) error {
		for _, name := range allBuckets {
			if string(name) == string(bucketTree) {
				// Checked after the format, so that a database of
				// format "2" is told what it is.
				continue
			}
			ok, err := tx.HasBucket(name)
			if err != nil {
				return err
			}
			if !ok && !r.file && string(name) == string(bucketMeta) {
				return fmt.Errorf("%w: %s holds no receiver", ErrNotInitialized, r.path)
			}
			if !ok {
				return fmt.Errorf("%w: %s: missing bucket %q", ErrBadFormat, r.path, name)
			}
		}
		var meta [4][]byte
		for i, k := range [][]byte{metaFormat, metaReceiver, metaReceiverKey, metaRecoveryKey} {
			v, err := tx.Get(bucketMeta, k)
			if err != nil {
				return err
			}
			meta[i] = v
		}
		v, id, key, rk := meta[0], meta[1], meta[2], meta[3]
		if string(v) == "1" {
			return fmt.Errorf("%w: %s: format version 1 predates the state digest that checkpoints now commit to; "+
				"initialise a new receiver", ErrBadFormat, r.path)
		} else if string(v) == "2" {
			return fmt.Errorf("%w: %s: format version 2 predates the Merkle tree over the audit entries that checkpoints, "+
				"witnesses and receipt proofs now need; initialise a new receiver (export what you need with observe first)", ErrBadFormat, r.path)
		} else if string(v) == "3" {
			return fmt.Errorf("%w: %s: format version 3 predates checkpoints that sign the root of the tree over the audit "+
				"entries, which open and verify-chain now compare with the stored tree; initialise a new receiver "+
				"(export what you need with observe first)", ErrBadFormat, r.path)
		} else if string(v) == "4" {
			return fmt.Errorf("%w: %s: format version 4 predates the state digest of format 5, whose terms are expanded "+
				"with BLAKE3 instead of SHAKE128: its stored digest and the state its checkpoints sign cannot be checked; "+
				"initialise a new receiver (export what you need with observe first)", ErrBadFormat, r.path)
		} else if string(v) != formatVersion {
			return fmt.Errorf("%w: %s: format version %q, want %q", ErrBadFormat, r.path, v, formatVersion)
		}
		if ok, err := tx.HasBucket(bucketTree); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w: %s: missing bucket %q", ErrBadFormat, r.path, bucketTree)
		}
		if err := checkName("receiver id", string(id)); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadFormat, r.path, err)
		}
		r.id = string(id)
		if len(key) != ed25519.PublicKeySize {
			return fmt.Errorf("%w: %s: receiver key is %d bytes", ErrBadFormat, r.path, len(key))
		}
		r.pub = append(ed25519.PublicKey(nil), key...)
		r.recoveryPub = nil
		if rk != nil {
			if len(rk) != ed25519.PublicKeySize {
				return fmt.Errorf("%w: %s: recovery key is %d bytes", ErrBadFormat, r.path, len(rk))
			}
			r.recoveryPub = append(ed25519.PublicKey(nil), rk...)
		}
		head, mismatch, err := auditChain.LoadHead(tx)
		if err != nil {
			return chainErr(r.path, err)
		}
		r.head, r.headMismatch = head, mismatch
		return nil
	})
}

// chainErr maps the chain's format errors onto ErrBadFormat.
func chainErr(path string, err error) error {
	if errors.Is(err, chain.ErrBadChain) {
		return fmt.Errorf("%w: %s: %v", ErrBadFormat, path, err)
	}
	return err
}

// ID returns the receiver id given at Init.
func (r *Receiver) ID() string { return r.id }

// PublicKey returns the receiver's public key recorded at Init.
func (r *Receiver) PublicKey() ed25519.PublicKey { return r.pub }

// RecoveryKey returns the recovery public key recorded at Init, or nil.
func (r *Receiver) RecoveryKey() ed25519.PublicKey { return r.recoveryPub }

// Path returns the database file's path, or "" for a receiver opened on an
// engine with OpenEngine.
func (r *Receiver) Path() string {
	if !r.file {
		return ""
	}
	return r.path
}

// Close releases the database and its lock.
func (r *Receiver) Close() error {
	r.closed.Store(true)
	return r.eng.Close()
}

// view runs fn in a read-only transaction, turning a bbolt panic on a
// corrupt page into an error. fn may run more than once.
func (r *Receiver) view(fn func(tx engine.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: bbolt: %v", ErrBadFormat, r.path, p)
		}
	}()
	return engineErr(r.eng.View(context.Background(), fn))
}

// wtx is one run of a write transaction with the audit chain it extends.
// Every call of a batch runs in the same wtx; now is the clock as the
// current call read it. A wtx is made afresh for every run of the
// transaction function, so nothing of a run that did not commit is kept.
type wtx struct {
	tx     engine.Tx
	chain  chain.Writer
	now    time.Time
	faults *faultHooks
	// state is the fence state's digest, kept current by every put to a
	// state bucket; stateDirty says a record changed in this transaction;
	// stateSum is state's sum as of the last checkpoint.
	state      audit.StateHash
	stateDirty bool
	stateSum   audit.Hash
	// terms, when set, keeps the digest terms of records written.
	terms *termCache
	// recs, when set, checks every state record the transaction reads
	// against the receiver's known records and collects what it writes;
	// it is nil only in Init's first transaction, which builds the state
	// from nothing.
	recs *txRecords
	// hw is the epoch high-water as the receiver verified or wrote it,
	// which the stored one must equal when recs is set.
	hw uint64
	// anchor is the anchor read before the transaction on a store that
	// other processes write (currentAnchor), signed by this receiver and
	// in its chain; nil on a file, where the receiver's own last anchor
	// write is the anchor (anchorNow).
	anchor *audit.SignedCheckpoint
	// idle counts the calls that wrote nothing and need no commit (a
	// repeated hold); when every call of a batch is idle, the
	// transaction commits nothing (errIdle).
	idle int
	// rawWritten are the etcd targets' keys this run wrote: a second
	// write of one in the same batch is errRawRewrite.
	rawWritten map[string]bool
}

// appendAudit fills in e's time, links it into the chain and stores it. It
// returns the entry's seq. A cached head that fell behind (a commit
// reported as failed that reached the disk anyway) must stop writes, not
// overwrite the entry it missed: the chain refuses to overwrite one.
func (w *wtx) appendAudit(e *audit.Entry) (uint64, error) {
	if w.faults != nil && w.faults.beforeAudit != nil {
		if err := w.faults.beforeAudit(e); err != nil {
			return 0, err
		}
	}
	e.At = w.now.UnixNano()
	e.Note = boundNote(e.Note)
	seq, err := w.chain.Append(e)
	if errors.Is(err, chain.ErrBadChain) {
		return 0, fmt.Errorf("%w: %v; reopen the receiver", ErrBadFormat, err)
	}
	return seq, err
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
