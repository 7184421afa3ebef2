// Package engine is the transactional seam between the fence and the store
// under it: point reads and writes in named buckets and an ordered scan, run
// in an Update or a View.
//
// Two engines implement it. engine/boltengine runs a transaction once under
// bbolt's writer lock on one file. engine/etcdengine runs it optimistically
// on an etcd cluster: reads at one revision, writes buffered, one Txn at the
// commit that compares what was read, retried on conflict within a bound.
//
// # The transaction function
//
// The function given to Update or View may run more than once: an engine
// that commits optimistically runs it again after a conflict, on a newer
// state. Each run must start from scratch and touch nothing but its
// transaction: no sends, no writes to files, no counters. Results may be
// handed out through variables the function assigns on every run (the last
// run's values are the committed ones). A run that returns an error ends the
// Update with that error and writes nothing.
//
// # Reading ahead
//
// A transaction of an engine whose reads are round trips may also be a
// Prefetcher: the caller names the keys it will read, the engine reads
// them in one request, and later Gets of them are answered from what it
// read. A prefetched key is read exactly as by Get, compared at an
// optimistic commit whether or not Get asks for it; so a prefetch changes
// how many requests a transaction sends, never what it sees or commits.
// Prefetch (the function) asks a transaction that is one and does nothing
// for one that is not.
//
// # Raw keys
//
// A transaction of an engine that shares its store with other keyspaces
// (etcd) may also be a RawTx: it reads and writes an application's keys
// outside the engine's own, in the same commit, each read compared at the
// commit like a bucket's key, and reports the commit's revision to
// OnCommit. A raw key never lies where the engine keeps its records or
// under a prefix its options reserve (ErrReservedKey). A target of kind
// etcd is built on it (docs/design.md §4.3).
//
// # Lifetime of bytes
//
// One rule for every engine: keys and values that a Tx returns (Get, Scan,
// Last) are valid only until the transaction function returns, and must not
// be modified. Copy them to keep them (append([]byte(nil), v...)). Keys and
// values given to Put must not be modified until the Update returns.
//
// # Buckets
//
// A bucket is a named keyspace created once with Tx.CreateBucket; there is
// no way to delete one. Bucket names are 1 to MaxBucketName bytes of ASCII
// letters, digits and '_'. Keys are 1 to MaxKeySize bytes, ordered
// bytewise. Get of an absent key returns nil; a present empty value is a
// non-nil empty slice.
//
// # Errors
//
// ErrConflict, ErrOutcomeUnknown and ErrTxnTooLarge are the three ways an
// Update can fail that a caller must tell apart: the first two wrote
// nothing for certain or may have written everything, the third wrote
// nothing and asks for a smaller transaction. ErrOutcomeUnknown is never a
// verdict: the caller must not report the operation as done or as refused.
package engine
