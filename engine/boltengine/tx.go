package boltengine

import (
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
}

// bucket returns the named bucket or ErrBucketNotFound.
func (t *tx) bucket(name []byte) (*bolt.Bucket, error) {
	b := t.btx.Bucket(name)
	if b == nil {
		return nil, fmt.Errorf("%w: %q", engine.ErrBucketNotFound, name)
	}
	return b, nil
}

// Get returns bbolt's own slice.
func (t *tx) Get(bucket, key []byte) ([]byte, error) {
	if err := engine.CheckKey(key); err != nil {
		return nil, err
	}
	b, err := t.bucket(bucket)
	if err != nil {
		return nil, err
	}
	v := b.Get(key)
	if v == nil {
		return nil, nil
	}
	// bbolt may return a nil-length slice for an empty value; the seam's
	// present-but-empty value is non-nil.
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
	if t.e.fill != nil {
		if f, ok := t.e.fill[string(bucket)]; ok {
			b.FillPercent = f
		}
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
	b, err := t.bucket(bucket)
	if err != nil {
		return nil, nil, err
	}
	k, v := b.Cursor().Last()
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
	return t.btx.Bucket(bucket) != nil, nil
}
