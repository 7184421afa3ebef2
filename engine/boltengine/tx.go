package boltengine

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/kvfence/kvfence/engine"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// tx is one bbolt transaction seen through the seam.
type tx struct {
	e        *Engine
	btx      *bolt.Tx
	writable bool
	// ops and bytes count the writes against the engine's limits; tooLarge
	// is set once they are broken and fails the Update whatever fn does.
	ops, bytes int
	tooLarge   error
	// open holds the buckets this transaction has resolved, so that each
	// is looked up once (a read-only bbolt transaction opens a bucket
	// anew on every lookup) and its fill percent set once. It starts on
	// inline, which holds as many buckets as a receiver has.
	open   []openBucket
	inline [8]openBucket
}

// openBucket is one bucket resolved in a transaction.
type openBucket struct {
	// name is a copy of the bucket's name, which is at most
	// engine.MaxBucketName bytes long, so that no allocation is needed.
	name [engine.MaxBucketName]byte
	n    int
	b    *bolt.Bucket
	// c is the cursor Get and Last reuse, once cur is set: bbolt's
	// Bucket.Get makes a new cursor and grows its stack on every call.
	// Seek and Last rebuild the cursor's position from the bucket's root
	// each time, so a Put or Delete in the bucket since its last use is
	// seen. It is held by value, inside the transaction's one allocation.
	c   bolt.Cursor
	cur bool
}

// cursor returns the bucket's reused cursor.
func (o *openBucket) cursor() *bolt.Cursor {
	if !o.cur {
		o.c, o.cur = *o.b.Cursor(), true
	}
	return &o.c
}

// newTx returns the seam's view of btx.
func newTx(e *Engine, btx *bolt.Tx, writable bool) *tx {
	t := &tx{e: e, btx: btx, writable: writable}
	t.open = t.inline[:0]
	return t
}

// lookup returns the bucket's entry, resolving and remembering it on its
// first use, or ErrBucketNotFound.
func (t *tx) lookup(name []byte) (*openBucket, error) {
	for i := range t.open {
		if o := &t.open[i]; o.n == len(name) && string(o.name[:o.n]) == string(name) {
			return o, nil
		}
	}
	b := t.btx.Bucket(name)
	if b == nil {
		return nil, fmt.Errorf("%w: %q", engine.ErrBucketNotFound, name)
	}
	if f, ok := t.e.fill[string(name)]; ok && t.writable {
		b.FillPercent = f
	}
	if len(name) > engine.MaxBucketName {
		// Not a name the seam creates; resolved, not remembered.
		return &openBucket{b: b}, nil
	}
	t.open = append(t.open, openBucket{n: len(name), b: b})
	o := &t.open[len(t.open)-1]
	copy(o.name[:], name)
	return o, nil
}

// bucket returns the named bucket or ErrBucketNotFound.
func (t *tx) bucket(name []byte) (*bolt.Bucket, error) {
	o, err := t.lookup(name)
	if err != nil {
		return nil, err
	}
	return o.b, nil
}

// Get returns bbolt's own slice. It is bbolt's Bucket.Get on the bucket's
// reused cursor: an exact match that is not a nested bucket (for which
// Seek returns a nil value; a stored value, even an empty one, is never
// nil).
func (t *tx) Get(bucket, key []byte) ([]byte, error) {
	if err := engine.CheckKey(key); err != nil {
		return nil, err
	}
	o, err := t.lookup(bucket)
	if err != nil {
		return nil, err
	}
	k, v := o.cursor().Seek(key)
	if v == nil || !bytes.Equal(k, key) {
		return nil, nil
	}
	return v, nil
}

// count charges one write of n bytes against the limits.
func (t *tx) count(n int) error {
	if t.tooLarge != nil {
		return t.tooLarge
	}
	lim := t.e.lim
	if lim.MaxOps == 0 && lim.MaxBytes == 0 {
		return nil
	}
	t.ops++
	t.bytes += n + lim.OpOverhead
	if lim.MaxOps > 0 && t.ops > lim.MaxOps || lim.MaxBytes > 0 && t.bytes > lim.MaxBytes {
		t.tooLarge = fmt.Errorf("%w: %d writes, %d bytes; limits %d writes, %d bytes",
			engine.ErrTxnTooLarge, t.ops, t.bytes, lim.MaxOps, lim.MaxBytes)
		return t.tooLarge
	}
	return nil
}

func (t *tx) Put(bucket, key, value []byte) error {
	if !t.writable {
		return engine.ErrReadOnly
	}
	if err := engine.CheckKey(key); err != nil {
		return err
	}
	if err := t.count(len(key) + len(value)); err != nil {
		return err
	}
	b, err := t.bucket(bucket)
	if err != nil {
		return err
	}
	if value == nil {
		// bbolt stores nil as empty; say so explicitly.
		value = []byte{}
	}
	return putErr(b.Put(key, value))
}

func (t *tx) Delete(bucket, key []byte) error {
	if !t.writable {
		return engine.ErrReadOnly
	}
	if err := engine.CheckKey(key); err != nil {
		return err
	}
	if err := t.count(len(key)); err != nil {
		return err
	}
	b, err := t.bucket(bucket)
	if err != nil {
		return err
	}
	return putErr(b.Delete(key))
}

// putErr maps bbolt's write errors onto the seam's.
func putErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bolterrors.ErrIncompatibleValue):
		return fmt.Errorf("%w: %w", engine.ErrCorrupt, err)
	case errors.Is(err, bolterrors.ErrValueTooLarge), errors.Is(err, bolterrors.ErrKeyTooLarge),
		errors.Is(err, bolterrors.ErrKeyRequired):
		return fmt.Errorf("%w: %w", engine.ErrInvalid, err)
	}
	return err
}

func (t *tx) Scan(bucket, from []byte, fn func(key, value []byte) error) error {
	b, err := t.bucket(bucket)
	if err != nil {
		return err
	}
	c := b.Cursor()
	var k, v []byte
	if from == nil {
		k, v = c.First()
	} else {
		k, v = c.Seek(from)
	}
	for ; k != nil; k, v = c.Next() {
		if v == nil {
			return fmt.Errorf("%w: nested bucket %q in %q", engine.ErrCorrupt, k, bucket)
		}
		if err := fn(k, v); err != nil {
			if err == engine.StopScan {
				return nil
			}
			return err
		}
	}
	return nil
}

func (t *tx) Last(bucket []byte) ([]byte, []byte, error) {
	o, err := t.lookup(bucket)
	if err != nil {
		return nil, nil, err
	}
	k, v := o.cursor().Last()
	if k != nil && v == nil {
		return nil, nil, fmt.Errorf("%w: nested bucket %q in %q", engine.ErrCorrupt, k, bucket)
	}
	return k, v, nil
}

func (t *tx) CreateBucket(bucket []byte) error {
	if !t.writable {
		return engine.ErrReadOnly
	}
	if err := engine.CheckBucket(bucket); err != nil {
		return err
	}
	if err := t.count(len(bucket)); err != nil {
		return err
	}
	_, err := t.btx.CreateBucket(bucket)
	if errors.Is(err, bolterrors.ErrBucketExists) {
		return fmt.Errorf("%w: %q", engine.ErrBucketExists, bucket)
	}
	return err
}

func (t *tx) HasBucket(bucket []byte) (bool, error) {
	if err := engine.CheckBucket(bucket); err != nil {
		return false, err
	}
	// lookup fails only with ErrBucketNotFound.
	_, err := t.lookup(bucket)
	return err == nil, nil
}
