// Package boltengine is the engine seam over one bbolt file: an Update runs
// its function exactly once, under bbolt's writer lock, and commits with
// bbolt's fsync; a View runs in a bbolt read transaction. Keys and values
// are bbolt's own slices, without copies, under the seam's lifetime rule
// (valid until the transaction function returns).
//
// # Caveats
//
// bbolt cannot be interrupted: the context is checked before a transaction
// starts, not while it waits for the writer lock or runs. A panic in the
// transaction function, or one that bbolt raises on a corrupt page (see
// runtime/debug.SetPanicOnFault), rolls back and reaches the caller, on the
// caller's goroutine. A commit that grows bbolt's memory map waits until
// every open View has ended (bbolt's Options.InitialMmapSize avoids it).
// Limits, when set, count every Put, Delete and
// CreateBucket call: a key written twice counts twice.
package boltengine
