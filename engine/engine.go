package engine

import (
	"context"
	"fmt"
)

// Engine is a transactional store of buckets of ordered keys. Its methods
// are safe for concurrent use.
type Engine interface {
	// Update runs fn in a read-write transaction and commits its writes
	// atomically, or writes nothing if fn returns an error. fn may run more
	// than once (see the package documentation) and must touch nothing but
	// its transaction. A transaction whose size breaks Limits fails with
	// ErrTxnTooLarge even if fn ignored the operation's error.
	Update(ctx context.Context, fn func(Tx) error) error
	// View runs fn in a read-only transaction that sees one consistent
	// state, at least as new as every Update that returned before View was
	// called. fn may run more than once.
	View(ctx context.Context, fn func(Tx) error) error
	// Limits returns the bounds of one Update.
	Limits() Limits
	// Close releases the engine. Later calls fail with ErrClosed.
	Close() error
}

// Tx is one transaction. It is valid only inside the function it was given
// to, and is not safe for concurrent use. Bytes it returns are valid until
// that function returns (the package documentation's lifetime rule).
type Tx interface {
	// Get returns key's value in bucket, or nil if the key is absent. A
	// write earlier in the same transaction is seen (read-your-writes).
	Get(bucket, key []byte) ([]byte, error)
	// Put sets key's value in bucket. value may be empty, not absent.
	Put(bucket, key, value []byte) error
	// Delete removes key from bucket; an absent key is not an error.
	Delete(bucket, key []byte) error
	// Scan calls fn for each key of bucket at or after from (nil: the
	// first key) in ascending bytewise order, with the transaction's own
	// writes merged in. fn returns StopScan to end the scan early; any
	// other error ends it and is returned. The transaction must not write
	// during the scan.
	Scan(bucket, from []byte, fn func(key, value []byte) error) error
	// Last returns the greatest key of bucket and its value, or nil, nil
	// for an empty bucket.
	Last(bucket []byte) (key, value []byte, err error)
	// CreateBucket creates an empty bucket; ErrBucketExists if it exists.
	CreateBucket(bucket []byte) error
	// HasBucket reports whether bucket was created.
	HasBucket(bucket []byte) (bool, error)
}

// Key names one key of a bucket.
type Key struct {
	// Bucket is the bucket's name.
	Bucket []byte
	// Key is the key in it.
	Key []byte
}

// Prefetcher is a Tx that reads several keys in one request. An engine
// whose reads are round trips (etcd) implements it; one whose reads are
// local (bbolt) need not, and callers find out with a type assertion.
//
// Prefetch reads every named key that the transaction has neither read
// nor written yet, at the transaction's one state (the first read of a
// transaction fixes it, as a Get would), and keeps the values: a later Get
// of such a key returns the kept value, with no request. A prefetched key
// is read exactly as by Get: it joins the transaction's read set whether or
// not Get asks for it later, so an optimistic engine compares it at the
// commit (an absent key is compared as absent, a mod revision of 0 on
// etcd) and a change of it by another writer after the read makes the
// transaction run again, never commit on the old value. A key already
// written by the transaction is skipped (Get answers from the write).
//
// Prefetch returns the errors Get would for an invalid or missing bucket
// or an invalid key, and a failed read. Keys that would take the
// transaction's compares past its Limits are not read and left to Get, so
// a prefetch alone never makes an Update fail with ErrTxnTooLarge; the
// keys it did read count against the limits like any read.
type Prefetcher interface {
	// Prefetch reads keys into the transaction's read set, in one round
	// trip where the engine can.
	Prefetch(keys ...Key) error
}

// GuardedPrefetcher is a Prefetcher that can also read keys whose change
// another key's compare stands for. An optimistic engine (etcd) compares
// every key a transaction read, and its commits are bounded in compares
// (Limits.MaxOps); keys that are only ever written together with a guard
// key need no compare of their own once the guard's is made.
//
// PrefetchGuarded reads keys as Prefetch does, and with them, in the same
// round trip where the engine can, guard (as a key of keys) and guarded:
// a key of guarded is read like the others but not compared itself, so
// that a change of it by another writer makes the commit fail only
// through the guard's compare. The caller must know that every writer of
// those keys, in every process and every version, writes guard in the
// same transaction; a writer that does not would have its change go
// unseen. A guard that is absent guards nothing: guarded keys are then
// compared as Prefetch's are (or left to Get where their compares would
// break the limits). A key the transaction already read keeps its own
// compare, and a key read as guarded keeps the guard's for the rest of the
// transaction, also when Get asks for it again.
type GuardedPrefetcher interface {
	Prefetcher
	// PrefetchGuarded reads keys and guard into the transaction's read
	// set, and guarded, compared only through guard.
	PrefetchGuarded(keys []Key, guard Key, guarded []Key) error
}

// Limits bound one Update. A zero field means no bound. An engine checks
// them while fn runs, so an Update that breaks them writes nothing.
type Limits struct {
	// MaxOps bounds the distinct keys one Update writes. An engine whose
	// commit also names what was read (etcd) bounds those reads by the
	// same number.
	MaxOps int
	// MaxBytes bounds the bytes of one commit: every key and value
	// written, plus what the engine adds per operation (OpOverhead) and,
	// for an optimistic engine, the keys it compares.
	MaxBytes int
	// OpOverhead is what the engine counts per operation on top of its
	// key and value bytes, so that a caller can split a batch ahead.
	OpOverhead int
}

// Size limits shared by every engine, those of bbolt's.
const (
	// MaxKeySize is the longest key.
	MaxKeySize = 32768
	// MaxBucketName is the longest bucket name.
	MaxBucketName = 64
)

// CheckBucket reports whether name is a valid bucket name.
func CheckBucket(name []byte) error {
	if len(name) == 0 || len(name) > MaxBucketName {
		return fmt.Errorf("%w: bucket name of %d bytes", ErrInvalid, len(name))
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return fmt.Errorf("%w: bucket name %q", ErrInvalid, name)
		}
	}
	return nil
}

// CheckKey reports whether key is a valid key.
func CheckKey(key []byte) error {
	if len(key) == 0 || len(key) > MaxKeySize {
		return fmt.Errorf("%w: key of %d bytes", ErrInvalid, len(key))
	}
	return nil
}

// Prefetch has tx read keys ahead (Prefetcher) if it can, and does nothing
// otherwise: Get then reads each key when asked, with the same result.
func Prefetch(tx Tx, keys ...Key) error {
	if p, ok := tx.(Prefetcher); ok {
		return p.Prefetch(keys...)
	}
	return nil
}
