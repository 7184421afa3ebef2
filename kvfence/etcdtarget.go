package kvfence

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/kvfence/kvfence/engine"
)

// Targets of kind etcd (docs/design.md §4.3): a key in an application's
// etcd keyspace, outside the receiver's prefix, holding the target's raw
// value. On the etcd engine the fence decision and the key's write are one
// Txn: the Txn that commits the receipt and the audit entry also puts the
// key, and compares the key's mod revision with the one the decision read,
// so a write of the key by anyone else between the read and the commit
// makes the decision run again on the new value.
//
// The key is the truth: the target record keeps no copy of the value,
// only the SHA-256 of the value the fence last wrote and the count of the
// fence's writes, which the state digest binds. A request's
// expect_revision is compared with the key's mod revision, and an applied
// write's Result.Revision is the key's new mod revision, the revision of
// the commit.

// TargetEtcd is a key in an application's etcd keyspace, written in the
// fence's own transaction. Only a receiver on the etcd engine has it.
const TargetEtcd TargetKind = "etcd"

// ErrKindUnsupported means the receiver's store cannot hold a target of
// the kind asked for: a target of kind etcd needs the etcd engine, whose
// transaction can also write the application's key. Nothing was written.
var ErrKindUnsupported = errors.New("kvfence: the receiver's engine does not support this target kind")

// ErrTargetKeyInUse means an etcd target's key is another etcd target's,
// or already holds a value other than the one the target was to be
// created with. Nothing was written.
var ErrTargetKeyInUse = errors.New("kvfence: the etcd key is in use")

// errRawRewrite ends a batch in which two calls write one etcd key: the
// second would read the first's write at a mod revision not known before
// the commit. The batch then runs again call by call (commitSplit), each
// in a transaction of its own.
var errRawRewrite = errors.New("kvfence: an etcd target's key written twice in one batch")

// rawTx returns the transaction as an engine.RawTx, or ErrKindUnsupported.
func rawTx(tx engine.Tx) (engine.RawTx, error) {
	raw, ok := tx.(engine.RawTx)
	if !ok {
		return nil, fmt.Errorf("%w: targets of kind %s need the etcd engine (kvfence.InitEngine/OpenEngine with etcdengine, the CLI's --etcd)", ErrKindUnsupported, TargetEtcd)
	}
	return raw, nil
}

// rawErr maps the engine's refusal of a raw key onto ErrInvalidArgument:
// the key was the caller's.
func rawErr(err error) error {
	if errors.Is(err, engine.ErrInvalid) || errors.Is(err, engine.ErrReservedKey) {
		return fmt.Errorf("%w: etcd target key: %w", ErrInvalidArgument, err)
	}
	return err
}

// checkEtcdKey checks an etcd target's key before any transaction.
func checkEtcdKey(key string) error {
	if err := engine.CheckRawKey([]byte(key)); err != nil {
		return fmt.Errorf("%w: etcd target key: %w", ErrInvalidArgument, err)
	}
	return nil
}

// liveKey reads an etcd target's key in tx: its value (a copy) and mod
// revision, nil and 0 if absent.
func liveKey(tx engine.Tx, t *targetRecord) ([]byte, int64, error) {
	raw, err := rawTx(tx)
	if err != nil {
		return nil, 0, err
	}
	v, mod, err := raw.GetRaw([]byte(t.Key))
	if err != nil {
		return nil, 0, rawErr(err)
	}
	if v != nil {
		v = bytes.Clone(v)
	}
	return v, mod, nil
}

// createEtcd is CreateTargetSpec's work for a target of kind etcd inside
// its transaction: the key must be no other target's, and either absent
// (the value is written) or already hold exactly the value (it is
// adopted). committed is given the key's mod revision once the
// transaction commits, or at once when nothing is written to the key.
func (w *wtx) createEtcd(rec *targetRecord, value []byte, committed func(rev int64)) (note string, err error) {
	raw, err := rawTx(w.tx)
	if err != nil {
		return "", err
	}
	// A key fenced by two targets would let a worker of one scope write
	// what a hold of the other was to stop.
	var other string
	err = w.tx.Scan(bucketTargets, nil, func(k, v []byte) error {
		t, err := parseTargetKey(k, v)
		if err != nil {
			return err
		}
		if t.Kind == TargetEtcd && t.Key == rec.Key {
			other = string(k)
			return engine.StopScan
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if other != "" {
		return "", fmt.Errorf("%w: %q is the key of target %s", ErrTargetKeyInUse, rec.Key, other)
	}
	cur, mod, err := raw.GetRaw([]byte(rec.Key))
	if err != nil {
		return "", rawErr(err)
	}
	switch {
	case cur == nil:
		if err := raw.PutRaw([]byte(rec.Key), value); err != nil {
			return "", rawErr(err)
		}
		raw.OnCommit(committed)
		return fmt.Sprintf("kind %s, key %s, written", TargetEtcd, rec.Key), nil
	case bytes.Equal(cur, value):
		committed(mod)
		return fmt.Sprintf("kind %s, key %s, adopted at mod revision %d", TargetEtcd, rec.Key, mod), nil
	}
	return "", fmt.Errorf("%w: %q holds %d bytes other than the target's value (create with its exact value to adopt it)", ErrTargetKeyInUse, rec.Key, len(cur))
}

// setEtcdValue records in an etcd target's record the value the fence
// writes to its key: its digest, not a copy.
func (t *targetRecord) setEtcdValue(value []byte) {
	sum := sha256.Sum256(value)
	t.Value, t.ValueSHA256 = []byte{}, sum[:]
}

// committed is the result of s's decision once its transaction committed:
// for a write of an etcd target, the key's mod revision after it is the
// commit's revision, known only then.
func (s *submission) committed(res Result) Result {
	if s.etcdApplied {
		res.Revision = uint64(s.keyRev)
	}
	return res
}

// etcdAlreadyApplied sets the Revision of an already_applied answer about
// an etcd target to the key's mod revision that the applied write gave
// it: the revision of the commit that stored the receipt, which the
// receipt's key keeps (a receipt is written once). A receipt written
// earlier in this batch gets the revision of this commit.
func (w *wtx) etcdAlreadyApplied(s *submission, rc *receiptRecord, res *Result) error {
	raw, ok := w.tx.(engine.RawTx)
	if !ok {
		return nil
	}
	t, err := w.target(rc.Target)
	if err != nil || t == nil || t.Kind != TargetEtcd {
		return err
	}
	mod, err := raw.ModRevision(bucketReceipts, s.keys.receipt)
	if err != nil {
		return err
	}
	if mod == 0 {
		s.etcdApplied = true
		raw.OnCommit(func(rev int64) { s.keyRev = rev })
		return nil
	}
	res.Revision = uint64(mod)
	return nil
}
