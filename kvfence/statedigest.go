package kvfence

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/kvfence/kvfence/internal/chain"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
)

// The fence state is the records of these buckets: what a decision reads.
// Every checkpoint commits to their digest (audit.StateHash), so a database
// whose state was put back or edited apart from its history is refused even
// when its chain is whole (docs/design.md §7.4).
//
// The holds bucket came later: a database made before it has none, which
// reads as a bucket without records (optionalBucket). The digest is a sum
// of one term per record, so an empty or missing bucket adds nothing, and
// checkpoints signed before it still verify.
//
// The app bucket, which keeps the records of the embedder's effects
// (effect.go), is a state bucket too, and optional in the same way: a
// restore that puts back the fence's records without the application's
// records written with them, or the reverse, is refused like any other.
var stateBuckets = [][]byte{bucketControl, bucketGrants, bucketTargets, bucketReceipts, bucketHolds, bucketApp}

// optionalBucket reports whether a state bucket may be missing from a
// database that is otherwise whole: then it holds no records.
func optionalBucket(bucket []byte) bool {
	return bytes.Equal(bucket, bucketHolds) || bytes.Equal(bucket, bucketApp)
}

// stateBucketNames are stateBuckets as strings, made once: a digest
// change names its bucket as a string, and converting on every put would
// allocate.
var stateBucketNames = func() []string {
	names := make([]string, len(stateBuckets))
	for i, b := range stateBuckets {
		names[i] = string(b)
	}
	return names
}()

// stateBucketName returns bucket's name as a string.
func stateBucketName(bucket []byte) string {
	for i, b := range stateBuckets {
		if bytes.Equal(b, bucket) {
			return stateBucketNames[i]
		}
	}
	return string(bucket)
}

// checkpointState is where the checkpoints bucket keeps the state digest's
// 2048-byte binary form, beside the latest checkpoint: a writer updates it
// record by record instead of rehashing the state. It is a cache; Open
// recomputes it from the records and refuses a database whose cache, or
// whose signed checkpoint, disagrees.
var checkpointState = []byte("state")

func isStateBucket(bucket []byte) bool {
	for _, b := range stateBuckets {
		if bytes.Equal(b, bucket) {
			return true
		}
	}
	return false
}

// putState stores raw under key in a state bucket and moves the
// transaction's state digest from the old record to the new one.
func (w *wtx) putState(bucket, key, raw []byte) error {
	old, err := w.tx.Get(bucket, key)
	if err != nil {
		return err
	}
	if w.recs != nil {
		// The record replaced must be one the receiver knows too: its
		// digest term is removed on the strength of these bytes.
		if err := w.recs.wrote(stateBucketIndex(bucket), key, old, raw); err != nil {
			return err
		}
	}
	w.stateDirty = true
	c := stateChange{bucket: stateBucketName(bucket), key: key, old: old, raw: raw, terms: w.terms}
	c.apply(&w.state)
	return w.tx.Put(bucket, key, raw)
}

// stateChange is one record's move in the state digest: the old bytes
// out, if there were any, and the new ones in. terms, if set, keeps the
// terms of records the receiver wrote.
type stateChange struct {
	bucket        string
	key, old, raw []byte
	terms         *termCache
}

func (c *stateChange) apply(s *audit.StateHash) {
	if c.old != nil && !c.terms.remove(s, c.bucket, c.key, c.old) {
		s.Remove(c.bucket, c.key, c.old)
	}
	// raw nil is a deleted record (an app record, effect.go): its term
	// only leaves.
	if c.raw != nil && !c.terms.add(s, c.bucket, c.key, c.raw) {
		s.Add(c.bucket, c.key, c.raw)
	}
}

// deleteState removes the record under key from a state bucket and its
// term from the transaction's state digest; an absent record changes
// nothing. Only app records (effect.go) are ever deleted.
func (w *wtx) deleteState(bucket, key []byte) error {
	old, err := w.tx.Get(bucket, key)
	if err != nil {
		return err
	}
	if w.recs != nil {
		if err := w.recs.deleted(stateBucketIndex(bucket), key, old); err != nil {
			return err
		}
	}
	if old == nil {
		return nil
	}
	w.stateDirty = true
	c := stateChange{bucket: stateBucketName(bucket), key: key, old: old, terms: w.terms}
	c.apply(&w.state)
	return w.tx.Delete(bucket, key)
}

// termCache keeps the digest terms (audit.StateElement) of the control
// and target records this receiver wrote last, so that replacing one
// removes its old version without hashing it again. A scope's control
// record is rewritten by every denial, activation and hold in it, and a
// target by every applied write: a stale worker retrying in a loop then
// costs one expansion per denial instead of two. A term is used only for
// exactly the bytes it was computed from, so the cache can make a digest
// neither wrong nor stale; it only saves work. It holds at most
// maxCachedTerms records of at most maxCachedRecord bytes (a 2 KiB term
// and the bytes beside it), replacing an arbitrary one when full: a
// target's value may be a mebibyte, and keeping such records would let
// workers pin a gibibyte of the receiver's heap. It is safe for
// concurrent use.
type termCache struct {
	mu sync.Mutex
	// control and targets map a record's key to its term.
	control, targets map[string]*cachedTerm
}

type cachedTerm struct {
	raw  []byte
	term audit.StateElement
}

// maxCachedTerms bounds the records whose terms a receiver keeps, and
// maxCachedRecord the size of each: a larger record's term costs more to
// compare than to hash again only past a few KiB, and most control and
// target records are a few hundred bytes.
const (
	maxCachedTerms  = 1024
	maxCachedRecord = 4096
)

// bucket returns the map of bucket's terms (created if create), or nil
// for a bucket whose terms are not kept: grants and receipts are written
// once and rarely replaced.
func (t *termCache) bucket(name string, create bool) map[string]*cachedTerm {
	var m *map[string]*cachedTerm
	switch name {
	case string(bucketControl):
		m = &t.control
	case string(bucketTargets):
		m = &t.targets
	default:
		return nil
	}
	if *m == nil && create {
		*m = make(map[string]*cachedTerm)
	}
	return *m
}

// remove removes the record (bucket, key, raw) from s by its kept term, if
// the cache holds one for exactly these bytes, and reports whether it did.
func (t *termCache) remove(s *audit.StateHash, bucket string, key, raw []byte) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.bucket(bucket, false)[string(key)]
	if c == nil || !bytes.Equal(c.raw, raw) {
		return false
	}
	s.RemoveElement(&c.term)
	return true
}

// add adds the record (bucket, key, raw) to s and keeps its term. It
// reports false for a bucket whose terms are not kept, which the caller
// adds itself.
func (t *termCache) add(s *audit.StateHash, bucket string, key, raw []byte) bool {
	if t == nil || (bucket != string(bucketControl) && bucket != string(bucketTargets)) {
		return false
	}
	var term audit.StateElement
	term.SetRecord(bucket, key, raw)
	s.AddElement(&term)
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.bucket(bucket, true)
	if len(raw) > maxCachedRecord {
		// The key's entry, if any, holds an older version: drop it with
		// its buffer.
		delete(m, string(key))
		return true
	}
	c := m[string(key)]
	if c == nil {
		// Full: reuse an arbitrary entry of either bucket.
		if len(t.control)+len(t.targets) >= maxCachedTerms {
			for _, from := range []map[string]*cachedTerm{t.control, t.targets} {
				for old, v := range from {
					delete(from, old)
					c = v
					break
				}
				if c != nil {
					break
				}
			}
		} else {
			c = new(cachedTerm)
		}
		m[string(key)] = c
	}
	c.raw = append(c.raw[:0], raw...)
	c.term = term
	return true
}

// storeState writes the transaction's state digest to the database if a
// record changed, and returns the sum a checkpoint commits to. An unchanged
// state keeps the sum it had, which spares a decision that changed no
// record (an identical retry) the 2 KiB hash.
func (w *wtx) storeState() (audit.Hash, error) {
	if !w.stateDirty {
		return w.stateSum, nil
	}
	w.stateSum = w.state.Sum()
	raw, _ := w.state.AppendBinary(make([]byte, 0, audit.StateHashSize))
	return w.stateSum, w.tx.Put(bucketCheckpoints, checkpointState, raw)
}

// storedState reads the digest kept in the checkpoints bucket.
func storedState(tx engine.Tx) (audit.StateHash, error) {
	var s audit.StateHash
	raw, err := tx.Get(bucketCheckpoints, checkpointState)
	if err != nil {
		return s, err
	}
	if raw == nil {
		return s, fmt.Errorf("%w: no state digest", ErrBadFormat)
	}
	if err := s.UnmarshalBinary(raw); err != nil {
		return s, fmt.Errorf("%w: %v", ErrBadFormat, err)
	}
	return s, nil
}

// computeState hashes every record of the state buckets, a bucket per
// goroutine, each in a read transaction of its own: the work is the BLAKE3
// expansion of each record, which spreads across cores.
//
// If known is not nil, every record's fingerprint is added to it as well
// (knownrecords.go), in the same reads: the records decisions are later
// checked against are exactly the ones this digest was computed from.
func (r *Receiver) computeState(known *knownRecords) (audit.StateHash, error) {
	if !r.file {
		// On a store that other processes may write (etcd), the state
		// buckets must be read at one revision: one transaction.
		var s audit.StateHash
		err := r.view(func(tx engine.Tx) (err error) {
			s, err = r.computeStateTx(tx, known)
			return err
		})
		return s, err
	}
	parts := make([]audit.StateHash, len(stateBuckets))
	errs := make([]error, len(stateBuckets))
	var wg sync.WaitGroup
	for i, name := range stateBuckets {
		wg.Go(func() {
			errs[i] = r.view(func(tx engine.Tx) error {
				parts[i] = audit.StateHash{} // the function may run more than once
				if known != nil {
					known.tabs[i] = recordTable{}
				}
				fill := known.filler(name)
				err := tx.Scan(name, nil, func(k, v []byte) error {
					parts[i].Add(string(name), k, v)
					return fill.add(k, v)
				})
				if errors.Is(err, engine.ErrBucketNotFound) {
					if optionalBucket(name) {
						return nil
					}
					return fmt.Errorf("%w: %s: missing bucket %q", ErrBadFormat, r.path, name)
				}
				if errors.Is(err, engine.ErrCorrupt) {
					return fmt.Errorf("%w: %s: %v", ErrBadFormat, r.path, err)
				}
				return err
			})
		})
	}
	wg.Wait()
	var s audit.StateHash
	for i := range parts {
		if errs[i] != nil {
			return s, errs[i]
		}
		s.Merge(&parts[i])
	}
	if known != nil {
		return s, known.checkLimit()
	}
	return s, nil
}

// computeStateTx hashes every record of the state buckets in tx, and adds
// their fingerprints to known if it is not nil.
func (r *Receiver) computeStateTx(tx engine.Tx, known *knownRecords) (audit.StateHash, error) {
	var s audit.StateHash
	for i, name := range stateBuckets {
		if known != nil {
			known.tabs[i] = recordTable{}
		}
		fill := known.filler(name)
		err := tx.Scan(name, nil, func(k, v []byte) error {
			s.Add(string(name), k, v)
			return fill.add(k, v)
		})
		if errors.Is(err, engine.ErrBucketNotFound) && optionalBucket(name) {
			continue
		}
		if errors.Is(err, engine.ErrBucketNotFound) {
			return s, fmt.Errorf("%w: %s: missing bucket %q", ErrBadFormat, r.path, name)
		}
		if err != nil {
			return s, err
		}
	}
	if known != nil {
		return s, known.checkLimit()
	}
	return s, nil
}

// latestCheckpoint reads the database's own newest signed checkpoint.
func latestCheckpoint(tx engine.Tx) (audit.SignedCheckpoint, error) {
	sc, err := auditChain.LatestCheckpoint(tx)
	if errors.Is(err, chain.ErrBadChain) {
		return sc, fmt.Errorf("%w: no checkpoint", ErrBadFormat)
	}
	return sc, err
}

// StateCheck is what checking the fence state against the checkpoints
// found: the digest recomputed from the records and the one the checkpoint
// of the database's head commits to.
type StateCheck struct {
	// Computed is the digest of the state records as found.
	Computed audit.Hash
	// Signed is the digest that the database's newest signed checkpoint,
	// which must cover its head, commits to.
	Signed audit.Hash
	// EpochHighWater is the database's recorded high-water.
	EpochHighWater uint64
}

// checkState recomputes the state digest and compares it with what the
// database's newest signed checkpoint and its anchor say (docs/design.md §7.4). A
// chain that verifies says nothing about the state records beside it: a
// backup taken while a grant was active, with the later entries copied in,
// has the right chain and the old state. So the checkpoint of the head,
// which every commit writes in its own transaction and which only the
// receiver's key signs, must cover exactly this head and commit to exactly
// this state; the database's epoch high-water must be the one it signed and
// no lower than the anchor's. Every mismatch wraps audit.ErrStateMismatch.
// It sets r.state on success, the digest writers then keep current.
func (r *Receiver) checkState(anchor *audit.SignedCheckpoint) (StateCheck, error) {
	var latest audit.SignedCheckpoint
	var stored, computed audit.StateHash
	var hw uint64
	var known *knownRecords
	if !r.opts.ReadOnly {
		// A writer learns the records' bytes as it hashes them: only
		// these, checked against the signed digest below, are decided on.
		var err error
		if known, err = newKnownRecords(r.opts.MaxRecords); err != nil {
			return StateCheck{}, err
		}
	}
	err := r.view(func(tx engine.Tx) error {
		var err error
		if !r.file {
			// Another process may commit between two transactions on
			// a shared store (etcd): the head, the checkpoint and the
			// records are read in one, the head again, at or past the
			// anchor that was loaded before it.
			head, mismatch, err := auditChain.LoadHead(tx)
			if err != nil {
				return chainErr(r.path, err)
			}
			if err := r.chainHolds(tx, head); err != nil {
				return err
			}
			r.head, r.headMismatch = head, mismatch
			if computed, err = r.computeStateTx(tx, known); err != nil {
				return err
			}
		}
		if latest, err = latestCheckpoint(tx); err != nil {
			return fmt.Errorf("%w: the database's newest checkpoint: %w", audit.ErrStateMismatch, err)
		}
		if stored, err = storedState(tx); err != nil {
			return fmt.Errorf("%w: %w", audit.ErrStateMismatch, err)
		}
		hw, err = epochHighWater(tx)
		return err
	})
	if err != nil {
		return StateCheck{}, err
	}
	if r.file {
		computed, err = r.computeState(known)
	}
	if err != nil {
		return StateCheck{}, err
	}
	sc := StateCheck{Computed: computed.Sum(), Signed: latest.State, EpochHighWater: hw}
	switch {
	case r.headMismatch != nil:
		return sc, fmt.Errorf("%w: %w: history was copied in without the state it describes", audit.ErrStateMismatch, r.headMismatch)
	case latest.Verify(r.pub) != nil || latest.Receiver != r.id:
		return sc, fmt.Errorf("%w: the database's newest checkpoint is not signed by this receiver's key", audit.ErrStateMismatch)
	case latest.Seq != r.head.Seq || latest.Head != r.head.Hash:
		return sc, fmt.Errorf("%w: the database's newest checkpoint covers seq %d (%x), but its chain ends at seq %d (%x): history was copied in without the state it describes",
			audit.ErrStateMismatch, latest.Seq, latest.Head[:], r.head.Seq, r.head.Hash[:])
	case sc.Computed != latest.State:
		return sc, fmt.Errorf("%w: the control, grant, target, receipt, hold and app records hash to %x, but the checkpoint of seq %d commits to %x: state was restored or edited apart from its history",
			audit.ErrStateMismatch, sc.Computed[:], latest.Seq, latest.State[:])
	case stored != computed:
		return sc, fmt.Errorf("%w: the stored state digest disagrees with the records", audit.ErrStateMismatch)
	case hw != latest.EpochHighWater:
		return sc, fmt.Errorf("%w: the database's epoch high-water is %d, but the checkpoint of seq %d says %d",
			audit.ErrStateMismatch, hw, latest.Seq, latest.EpochHighWater)
	}
	if anchor != nil {
		switch {
		case hw < anchor.EpochHighWater:
			return sc, fmt.Errorf("%w: the database's epoch high-water is %d, below the anchor's %d",
				audit.ErrStateMismatch, hw, anchor.EpochHighWater)
		case anchor.Seq == r.head.Seq && anchor.State != sc.Computed:
			return sc, fmt.Errorf("%w: the state hashes to %x, but the anchor at seq %d commits to %x",
				audit.ErrStateMismatch, sc.Computed[:], anchor.Seq, anchor.State[:])
		}
	}
	r.state, r.stateSum, r.known, r.hw = computed, sc.Computed, known, hw
	r.carried = latest.Admission
	return sc, nil
}
