package etcdengine

import (
	"fmt"
	"strings"

	"github.com/kvfence/kvfence/engine"
)

// Raw keys (engine.RawTx): keys of the cluster outside the engine's
// prefix, read and written in the same Txn as its buckets. They share the
// transaction's read set and write buffer, keyed by their etcd key, which
// no bucket key can equal: every bucket key begins with the prefix, and a
// raw key never does.

var _ engine.RawTx = (*tx)(nil)

// checkRaw refuses a raw key that is malformed, lies under the engine's
// prefix or under one of Options.Reserved.
func (e *Engine) checkRaw(key []byte) error {
	if err := engine.CheckRawKey(key); err != nil {
		return err
	}
	k := string(key)
	if strings.HasPrefix(k, e.prefix) {
		return fmt.Errorf("%w: %q is under the engine's prefix %q", engine.ErrReservedKey, key, e.prefix)
	}
	for _, r := range e.opts.Reserved {
		if strings.HasPrefix(k, r) {
			return fmt.Errorf("%w: %q is under the reserved prefix %q", engine.ErrReservedKey, key, r)
		}
	}
	return nil
}

// GetRaw reads key at the transaction's revision and adds it to the
// compares of the commit: its mod revision, 0 for an absent key.
func (t *tx) GetRaw(key []byte) ([]byte, int64, error) {
	if err := t.e.checkRaw(key); err != nil {
		return nil, 0, err
	}
	k := string(key)
	if w, ok := t.writes[k]; ok {
		return w.val, 0, nil
	}
	r, err := t.fetch(k, false)
	if err != nil {
		return nil, 0, err
	}
	return r.val, r.mod, nil
}

// PutRaw buffers a write of key for the commit.
func (t *tx) PutRaw(key, value []byte) error {
	if !t.writable {
		return engine.ErrReadOnly
	}
	if err := t.e.checkRaw(key); err != nil {
		return err
	}
	return t.put(string(key), write{val: present(value)})
}

// ModRevision reads bucket's key, if this run has not, and returns the mod
// revision it was read at.
func (t *tx) ModRevision(bucket, key []byte) (int64, error) {
	if err := engine.CheckKey(key); err != nil {
		return 0, err
	}
	if err := t.bucket(bucket); err != nil {
		return 0, err
	}
	k := t.key(bucket, key)
	if _, ok := t.writes[k]; ok {
		return 0, nil
	}
	r, err := t.fetch(k, false)
	if err != nil {
		return 0, err
	}
	return r.mod, nil
}

// OnCommit keeps fn for run, which calls it once this run's Txn
// succeeded.
func (t *tx) OnCommit(fn func(rev int64)) {
	t.committed = append(t.committed, fn)
}
