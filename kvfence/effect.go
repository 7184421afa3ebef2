package kvfence

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/kvfence/kvfence/engine"
)

// Targets of kind func (docs/design.md §4.1): an embedder's effect runs at
// check 12, after every check passed, inside the write transaction that
// stores the target's new value, the receipt and the audit entry, so that
// the application's own records change with them or not at all.
//
// An effect writes only the app buckets it declared. Their records live in
// one engine bucket, bucketApp, under appKey(bucket, key): it is a state
// bucket, so the state digest that every checkpoint signs covers them, a
// restore of the database is checked against them, and a record edited
// under a running receiver is refused when an effect reads it, as a
// fence record would be.

// TargetKind is what an applied write to a target changes.
type TargetKind string

// The kinds of target.
const (
	// TargetInternal is a value kept in the receiver's store, and nothing
	// else: every target created by CreateTarget.
	TargetInternal TargetKind = "internal"
	// TargetFunc is a value kept in the receiver's store whose applied
	// write also runs an effect the embedder registered by name
	// (Options.Effects), in the same transaction.
	TargetFunc TargetKind = "func"
)

// Effect is an embedder's change to its own records, run for every applied
// write to a target of kind func that names it.
type Effect struct {
	// Buckets are the app buckets the effect may read and write, declared
	// up front. Each name begins with "app_" and is a valid bucket name
	// (letters, digits and '_', at most 64 bytes). Two effects may share
	// a bucket.
	Buckets []string
	// Apply makes the change. It must be deterministic over its input and
	// what it reads through tx: it runs again, from the start, when a
	// transaction is retried (a conflict on etcd, a group-commit batch
	// that is run again call by call), and only the writes of the run
	// that commits remain. It must touch nothing but tx, and not keep tx
	// after it returns. An error refuses the write: nothing the effect
	// wrote is kept, and the worker gets a precondition_failed denial
	// whose detail begins "effect refused: " and quotes the error.
	Apply func(tx EffectTx, in EffectInput) error
}

// EffectInput is what an effect is told about the write it joins.
type EffectInput struct {
	// Scope, Epoch and Grant are the envelope's, all checked.
	Scope string
	// Epoch is the scope's epoch the write is decided at.
	Epoch uint64
	// Grant is the id of the active grant the write is made under.
	Grant string
	// Executor is the caller, the grant's executor.
	Executor string
	// Action and Target are the request's.
	Action string
	// Target is the name of the target written.
	Target string
	// Request is the exact request bytes the grant binds.
	Request []byte
	// Value is the target's new value: the request's Set, or its JSON
	// Patch applied to the target's value.
	Value []byte
	// Revision is the target's revision after the write.
	Revision uint64
}

// EffectTx is an effect's view of the transaction: the app buckets it
// declared, and nothing else. Writes are kept aside until the effect
// returns nil, and are then stored together; reads see them. Bytes it
// returns are the caller's to keep. It is not safe for concurrent use,
// and dead once the effect returned.
type EffectTx interface {
	// Get returns key's value in bucket, or nil if it is absent.
	Get(bucket string, key []byte) ([]byte, error)
	// Put sets key's value in bucket; value may be empty.
	Put(bucket string, key, value []byte) error
	// Delete removes key from bucket; an absent key is not an error.
	Delete(bucket string, key []byte) error
	// Scan calls fn for each key of bucket at or after from (nil: the
	// first) in ascending bytewise order, the effect's own writes merged
	// in as they were when the scan began. fn returns ErrStopScan to end
	// the scan early; any other error ends it and is returned. The
	// records from `from` to the bucket's end are read before fn is
	// first called.
	Scan(bucket string, from []byte, fn func(key, value []byte) error) error
}

// ErrStopScan, returned by an EffectTx.Scan function, ends the scan early
// without error.
var ErrStopScan = errors.New("kvfence: stop scan")

// ErrEffectBucket means an effect named a bucket it did not declare in
// Effect.Buckets. Nothing is read or written.
var ErrEffectBucket = errors.New("kvfence: the effect did not declare this bucket")

// ErrEffectNotRegistered means a target of kind func names an effect that
// this receiver's Options.Effects does not register.
var ErrEffectNotRegistered = errors.New("kvfence: no effect of this name is registered with the receiver")

// Bounds of an effect's records.
const (
	// MaxAppKeySize is the longest key of an app record: the engine's
	// bound, less the bucket name and the zero byte before the key.
	MaxAppKeySize = engine.MaxKeySize - engine.MaxBucketName - 1
	// MaxAppValueSize is the largest value of an app record.
	MaxAppValueSize = MaxTargetValueSize
)

// maxEffectDetail bounds the words of an effect's error a worker is told.
const maxEffectDetail = 256

// appBucketPrefix begins every app bucket's name.
const appBucketPrefix = "app_"

// checkEffects refuses effects that Open cannot register.
func checkEffects(effects map[string]Effect) error {
	for name, e := range effects {
		if err := checkName("effect", name); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
		if e.Apply == nil {
			return fmt.Errorf("%w: effect %q has no Apply", ErrInvalidArgument, name)
		}
		if len(e.Buckets) == 0 {
			return fmt.Errorf("%w: effect %q declares no bucket", ErrInvalidArgument, name)
		}
		for _, b := range e.Buckets {
			if !strings.HasPrefix(b, appBucketPrefix) || engine.CheckBucket([]byte(b)) != nil {
				return fmt.Errorf("%w: effect %q: bucket %q: an app bucket's name begins with %q and holds at most %d letters, digits and '_'",
					ErrInvalidArgument, name, b, appBucketPrefix, engine.MaxBucketName)
			}
		}
	}
	return nil
}

// cloneEffects copies effects, with the slices of their buckets.
func cloneEffects(effects map[string]Effect) map[string]Effect {
	if effects == nil {
		return nil
	}
	out := make(map[string]Effect, len(effects))
	for name, e := range effects {
		e.Buckets = slices.Clone(e.Buckets)
		out[name] = e
	}
	return out
}

// appKey is the key, in bucketApp, of key in the app bucket bucket: a
// bucket name holds no zero byte, so the first one ends it.
func appKey(bucket string, key []byte) []byte {
	k := make([]byte, 0, len(bucket)+1+len(key))
	k = append(k, bucket...)
	k = append(k, 0)
	return append(k, key...)
}

// appWrite is one buffered write of an effect: a value, or a deletion.
type appWrite struct {
	val []byte
	del bool
}

// effectTx is the EffectTx of one run of an effect.
type effectTx struct {
	// mu keeps an effect that breaks the rule of one goroutine at a time
	// from corrupting the handle or the transaction: its calls then run
	// one after another, and none after the effect returned.
	mu      sync.Mutex
	w       *wtx
	buckets []string
	writes  map[string]appWrite
	// fault is the first failure of the store met by a read: the run
	// must not commit, whatever the effect returns (it may have ignored
	// the error).
	fault error
	// done is set when the effect returned; the handle is dead.
	done bool
}

func (e *effectTx) check(bucket string, key []byte) error {
	if e.done {
		return fmt.Errorf("%w: the effect's transaction has ended", ErrInvalidArgument)
	}
	if !slices.Contains(e.buckets, bucket) {
		return fmt.Errorf("%w: %q", ErrEffectBucket, bucket)
	}
	if key == nil {
		return nil
	}
	if len(key) == 0 || len(key) > MaxAppKeySize {
		return fmt.Errorf("%w: app key of %d bytes (1 to %d)", ErrInvalidArgument, len(key), MaxAppKeySize)
	}
	return nil
}

// storeFault records a failure of the store; the run then fails.
func (e *effectTx) storeFault(err error) error {
	if e.fault == nil {
		e.fault = err
	}
	return err
}

// stored reads the app record k as the store holds it, checked against
// the receiver's known records, and copied.
func (e *effectTx) stored(k []byte) (raw []byte, err error) {
	// A damaged page of the file faults while it is read; the fault is
	// the store's, never the effect's refusal.
	defer func() {
		if p := recover(); p != nil {
			err = e.storeFault(fmt.Errorf("%w: reading an app record: %v", ErrBadFormat, p))
		}
	}()
	raw, err = e.w.tx.Get(bucketApp, k)
	if errors.Is(err, engine.ErrBucketNotFound) {
		raw, err = nil, nil
	}
	if err != nil {
		return nil, e.storeFault(err)
	}
	if raw != nil {
		raw = bytes.Clone(raw)
	}
	if e.w.recs != nil {
		if _, err := e.w.recs.check(stateBucketIndex(bucketApp), k, raw); err != nil {
			return nil, e.storeFault(err)
		}
	}
	return raw, nil
}

func (e *effectTx) Get(bucket string, key []byte) ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if key == nil {
		key = []byte{}
	}
	if err := e.check(bucket, key); err != nil {
		return nil, err
	}
	k := appKey(bucket, key)
	if wr, ok := e.writes[string(k)]; ok {
		if wr.del {
			return nil, nil
		}
		return bytes.Clone(wr.val), nil
	}
	return e.stored(k)
}

func (e *effectTx) Put(bucket string, key, value []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if key == nil {
		key = []byte{}
	}
	if err := e.check(bucket, key); err != nil {
		return err
	}
	if len(value) > MaxAppValueSize {
		return fmt.Errorf("%w: app value of %d bytes, over the %d-byte limit", ErrInvalidArgument, len(value), MaxAppValueSize)
	}
	e.writes[string(appKey(bucket, key))] = appWrite{val: append([]byte{}, value...)}
	return nil
}

func (e *effectTx) Delete(bucket string, key []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if key == nil {
		key = []byte{}
	}
	if err := e.check(bucket, key); err != nil {
		return err
	}
	e.writes[string(appKey(bucket, key))] = appWrite{del: true}
	return nil
}

func (e *effectTx) Scan(bucket string, from []byte, fn func(key, value []byte) error) error {
	merged, err := e.scanRange(bucket, from)
	if err != nil {
		return err
	}
	for _, r := range merged {
		if err := fn(r.k, r.v); err != nil {
			if errors.Is(err, ErrStopScan) {
				return nil
			}
			return err
		}
	}
	return nil
}

// appKV is one app record of a scan: its key within its bucket, and its
// value.
type appKV struct{ k, v []byte }

// scanRange returns what Scan hands to its function: the records of
// bucket from `from` on, stored and written by the effect, merged in key
// order as they are now, so that writes fn makes during the scan are not
// seen by it.
func (e *effectTx) scanRange(bucket string, from []byte) ([]appKV, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.check(bucket, nil); err != nil {
		return nil, err
	}
	if len(from) > MaxAppKeySize {
		return nil, fmt.Errorf("%w: scan from a key of %d bytes, over %d", ErrInvalidArgument, len(from), MaxAppKeySize)
	}
	prefix := appKey(bucket, nil)
	start := appKey(bucket, from)
	// The stored records are read first, whole, and checked: fn may
	// call the handle, and the engine's scan allows no other use of the
	// transaction meanwhile.
	var found []appKV
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("%w: scanning app records: %v", ErrBadFormat, p)
			}
		}()
		err = e.w.tx.Scan(bucketApp, start, func(k, v []byte) error {
			if !bytes.HasPrefix(k, prefix) {
				return engine.StopScan
			}
			found = append(found, appKV{bytes.Clone(k), bytes.Clone(v)})
			return nil
		})
		if errors.Is(err, engine.ErrBucketNotFound) {
			err = nil
		}
		return err
	}()
	if err != nil {
		return nil, e.storeFault(err)
	}
	if e.w.recs != nil {
		for _, r := range found {
			if _, err := e.w.recs.check(stateBucketIndex(bucketApp), r.k, r.v); err != nil {
				return nil, e.storeFault(err)
			}
		}
	}
	// The effect's own writes in range, merged in key order.
	var mine []string
	for k := range e.writes {
		if strings.HasPrefix(k, string(prefix)) && k >= string(start) {
			mine = append(mine, k)
		}
	}
	slices.Sort(mine)
	out := make([]appKV, 0, len(found)+len(mine))
	i, j := 0, 0
	for i < len(found) || j < len(mine) {
		var k, v []byte
		switch {
		case j == len(mine) || (i < len(found) && string(found[i].k) < mine[j]):
			k, v = found[i].k, found[i].v
			i++
		default:
			if i < len(found) && string(found[i].k) == mine[j] {
				i++
			}
			wr := e.writes[mine[j]]
			k = []byte(mine[j])
			j++
			if wr.del {
				continue
			}
			v = bytes.Clone(wr.val)
		}
		out = append(out, appKV{k[len(prefix):], v})
	}
	return out, nil
}

// runEffect runs the effect of a func target for a write that passed every
// check, and stores its writes in w if it returns nil. refusal is the
// effect's error or panic, the write's denial; err is a fault of the store,
// after which the transaction must not commit.
func (w *wtx) runEffect(e Effect, in EffectInput) (refusal string, err error) {
	etx := &effectTx{w: w, buckets: e.Buckets, writes: map[string]appWrite{}}
	// The effect runs on a goroutine of its own, so that whatever way it
	// ends (an error, a panic, an error whose Error method panics, or
	// runtime.Goexit, as t.FailNow calls) this goroutine, which leads the
	// commit queue, gets an answer and hands the lead on. The handle is
	// used by one goroutine at a time: this one waits.
	type ending struct {
		refusal  string
		returned bool
	}
	done := make(chan ending, 1)
	go func() {
		var end ending
		defer func() { done <- end }()
		defer func() {
			if p := recover(); p != nil {
				end = ending{refusal: fmt.Sprintf("panicked: %v", p), returned: true}
			}
		}()
		if err := e.Apply(etx, in); err != nil {
			// An error with no text still refuses: "" would read as
			// success. Error is the embedder's code too: a panic in it
			// (a typed nil) is recovered above as the effect's.
			end.refusal = cmp.Or(err.Error(), "an error with no text")
		}
		end.returned = true
	}()
	end := <-done
	etx.mu.Lock()
	etx.done = true
	fault := etx.fault
	etx.mu.Unlock()
	if fault != nil {
		return "", fault
	}
	if !end.returned {
		end.refusal = "the effect ended its goroutine without returning (runtime.Goexit)"
	}
	if end.refusal != "" {
		return clip(end.refusal, maxEffectDetail), nil
	}
	if len(etx.writes) == 0 {
		return "", nil
	}
	if err := w.ensureBucket(bucketApp); err != nil {
		return "", err
	}
	// In key order, so that every run of the same effect writes alike.
	keys := make([]string, 0, len(etx.writes))
	for k := range etx.writes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		wr := etx.writes[k]
		if wr.del {
			err = w.deleteState(bucketApp, []byte(k))
		} else {
			err = w.putState(bucketApp, []byte(k), wr.val)
		}
		if err != nil {
			return "", err
		}
	}
	return "", nil
}

// ensureBucket creates bucket in this transaction if the store has none.
func (w *wtx) ensureBucket(bucket []byte) error {
	ok, err := w.tx.HasBucket(bucket)
	if err != nil || ok {
		return err
	}
	return w.tx.CreateBucket(bucket)
}

// checkKind checks a stored target's kind: an unknown kind, or a func
// target that names no effect, is a record this package never writes.
func (t *targetRecord) checkKind(key []byte) error {
	noEtcd := t.Key == "" && t.ValueSHA256 == nil
	switch {
	case t.Kind == "" && t.Effect == "" && t.Object == nil && t.UID == "" && noEtcd:
		return nil
	case t.Kind == TargetFunc && checkName("effect", t.Effect) == nil && t.Object == nil && t.UID == "" && noEtcd:
		return nil
	case t.Kind == TargetKubernetes && t.Effect == "" && t.Object != nil && t.Object.check() == nil && checkRemoteID("uid", t.UID) == nil && noEtcd:
		return nil
	case t.Kind == TargetEtcd && t.Effect == "" && engine.CheckRawKey([]byte(t.Key)) == nil &&
		len(t.Value) == 0 && len(t.ValueSHA256) == sha256.Size && t.Object == nil && t.UID == "":
		return nil
	}
	return fmt.Errorf("%w: target record %q: kind %q effect %q key %q is not one this receiver writes", ErrBadFormat, key, t.Kind, t.Effect, clip(t.Key, 64))
}

// kind is the target's kind as the API reports it.
func (t *targetRecord) kind() TargetKind {
	if t.Kind == "" {
		return TargetInternal
	}
	return t.Kind
}

// AppGet returns key's value in the app bucket bucket as the store holds
// it, or nil if it is absent: what the committed effects wrote. Like
// Target, it reads the store as it is and is not checked against the
// records this receiver verified or wrote: a record edited in the store
// under the running receiver is returned as edited. An effect's reads
// are the checked path (they refuse such a record), and Open and
// verify-chain check every record against the signed state digest. bucket
// must be an app bucket's name (it begins with "app_"); whether an effect
// declared it does not matter to a read.
func (r *Receiver) AppGet(bucket string, key []byte) ([]byte, error) {
	if !strings.HasPrefix(bucket, appBucketPrefix) || engine.CheckBucket([]byte(bucket)) != nil {
		return nil, fmt.Errorf("%w: %q is not an app bucket's name", ErrInvalidArgument, bucket)
	}
	if len(key) == 0 || len(key) > MaxAppKeySize {
		return nil, fmt.Errorf("%w: app key of %d bytes (1 to %d)", ErrInvalidArgument, len(key), MaxAppKeySize)
	}
	var out []byte
	err := r.view(func(tx engine.Tx) error {
		v, err := tx.Get(bucketApp, appKey(bucket, key))
		if errors.Is(err, engine.ErrBucketNotFound) {
			out = nil
			return nil
		}
		if v != nil {
			v = bytes.Clone(v)
		}
		out = v
		return err
	})
	if err != nil {
		return nil, engineErr(err)
	}
	return out, nil
}
