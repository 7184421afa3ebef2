package engine

import "errors"

// Update's failures that decide what a caller may say about its writes.
var (
	// ErrConflict means the transaction kept meeting concurrent writes and
	// gave up after the engine's retry bound. Nothing was written.
	ErrConflict = errors.New("engine: transaction conflict: retry bound exhausted")
	// ErrOutcomeUnknown means the commit was sent and no answer says
	// whether it applied (a timeout, a lost leader, a closed connection).
	// The writes may or may not be in the store; it is never a verdict.
	ErrOutcomeUnknown = errors.New("engine: outcome unknown")
	// ErrTxnTooLarge means the transaction exceeds the engine's Limits.
	// Nothing was written; a smaller transaction may succeed.
	ErrTxnTooLarge = errors.New("engine: transaction too large")
)

// Faults of a single operation or of the engine.
var (
	// ErrBucketNotFound means an operation named a bucket that was never
	// created.
	ErrBucketNotFound = errors.New("engine: bucket not found")
	// ErrBucketExists means CreateBucket named a bucket that exists.
	ErrBucketExists = errors.New("engine: bucket already exists")
	// ErrInvalid means a bucket name, key or value breaks the rules in the
	// package documentation.
	ErrInvalid = errors.New("engine: invalid bucket name, key or value")
	// ErrReadOnly means a write was attempted in a View.
	ErrReadOnly = errors.New("engine: write in a read-only transaction")
	// ErrClosed means the engine was closed.
	ErrClosed = errors.New("engine: closed")
	// ErrCorrupt means the store holds something no engine writes, such as
	// a nested bbolt bucket inside a bucket.
	ErrCorrupt = errors.New("engine: store holds data the engine never writes")
)

// StopScan is returned by a Scan function to end the scan early; Scan then
// returns nil. It is not an error.
var StopScan = errors.New("engine: stop scan")

// ErrReservedKey means a raw key (RawTx) lies where the engine keeps its
// own keys, or under a prefix its options reserve for another user of the
// store. Nothing is read or written.
var ErrReservedKey = errors.New("engine: raw key inside a reserved keyspace")
