package engine

import "fmt"

// RawTx is a Tx that also reads and writes keys of the store outside the
// engine's own buckets, in the same transaction: an application's keys
// that a fence decision changes together with its own records (a target
// of kind etcd). An engine that keeps other keyspaces beside its own
// (etcd) implements it; one that owns its whole store (a bbolt file) does
// not, and callers find out with a type assertion.
//
// A raw key is read exactly as a bucket's key is: it joins the
// transaction's read set, so an optimistic engine compares its mod
// revision at the commit (an absent key as revision 0) and a write of it
// by anyone else after the read makes the transaction run again, never
// commit on the old value. Its write is buffered and committed with the
// transaction's other writes, or not at all.
//
// A raw key must pass CheckRawKey, and must lie outside everything the
// engine keeps and everything its options reserve (ErrReservedKey): a raw
// write must never alias a record of the store's owner.
type RawTx interface {
	Tx
	// GetRaw returns key's value and mod revision, or nil and 0 if the key
	// is absent. A key written earlier in the same transaction reads back
	// its written value and revision 0: the revision it will have is the
	// commit's, not known before it.
	GetRaw(key []byte) (value []byte, modRev int64, err error)
	// PutRaw sets key's value in the transaction's commit. value may be
	// empty, not absent.
	PutRaw(key, value []byte) error
	// ModRevision returns the mod revision of bucket's key as the
	// transaction read it (0 if absent or written by the transaction):
	// the revision of the commit that last wrote it.
	ModRevision(bucket, key []byte) (int64, error)
	// OnCommit registers fn to be called, once, with the revision of the
	// commit if this run of the transaction function commits. A run that
	// does not commit never calls it.
	OnCommit(fn func(rev int64))
}

// MaxRawKeySize is the longest raw key: an application's key name, not a
// blob.
const MaxRawKeySize = 512

// CheckRawKey reports whether key may name a raw key: 1 to MaxRawKeySize
// bytes of printable ASCII without blanks, so that it reads the same in
// every tool and log that shows it.
func CheckRawKey(key []byte) error {
	if len(key) == 0 || len(key) > MaxRawKeySize {
		return fmt.Errorf("%w: raw key of %d bytes (1 to %d)", ErrInvalid, len(key), MaxRawKeySize)
	}
	for _, c := range key {
		if c <= ' ' || c > '~' {
			return fmt.Errorf("%w: raw key %q: printable ASCII without blanks only", ErrInvalid, key)
		}
	}
	return nil
}
