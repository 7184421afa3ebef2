package kvfence

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/kvfence/kvfence/engine"
)

// The state accessors below are the only code that knows the bucket layout.
// A nil record with a nil error means "absent".

func (w *wtx) control(scope string) (*controlRecord, error) {
	return w.controlAt([]byte(scope))
}

// controlAt is control for a scope given as its key (its bytes).
func (w *wtx) controlAt(key []byte) (*controlRecord, error) {
	raw, err := w.getState(bucketControl, key)
	if err != nil || raw == nil {
		return nil, err
	}
	return parseControlKey(key, raw)
}

// getState reads the record under key in a state bucket for a decision.
// A writable receiver's transaction first compares it with the bytes the
// receiver verified or wrote (knownrecords.go): a record changed in the
// store apart from the receiver is audit.ErrStateMismatch, never decided
// on.
func (w *wtx) getState(bucket, key []byte) ([]byte, error) {
	raw, err := w.tx.Get(bucket, key)
	if err != nil || w.recs == nil || raw == nil {
		if err == nil && w.recs != nil {
			_, err = w.recs.check(stateBucketIndex(bucket), key, nil)
		}
		return raw, err
	}
	// A bbolt value lives in the file's mapped pages, which a process
	// writing the file could change between the check and the decoding:
	// the bytes checked are the bytes decided on.
	raw = w.recs.copy(raw)
	if _, err := w.recs.check(stateBucketIndex(bucket), key, raw); err != nil {
		return nil, err
	}
	return raw, nil
}

func getControl(tx engine.Tx, scope string) (*controlRecord, error) {
	return getControlKey(tx, []byte(scope))
}

func getControlKey(tx engine.Tx, key []byte) (*controlRecord, error) {
	raw, err := tx.Get(bucketControl, key)
	if err != nil || raw == nil {
		return nil, err
	}
	return parseControlKey(key, raw)
}

// parseControl decodes and checks a stored control record.
func parseControl(scope string, raw []byte) (*controlRecord, error) {
	return parseControlKey([]byte(scope), raw)
}

func parseControlKey(key, raw []byte) (*controlRecord, error) {
	var c controlRecord
	if err := decodeRecord(bucketControl, key, raw, &c); err != nil {
		return nil, err
	}
	if c.Epoch == 0 || (c.Mode != ModeHeld && c.Mode != ModeOpen) {
		return nil, fmt.Errorf("%w: control record %q: epoch %d mode %q", ErrBadFormat, key, c.Epoch, c.Mode)
	}
	return &c, nil
}

func (w *wtx) putControl(scope string, c *controlRecord) error {
	return w.put(bucketControl, []byte(scope), c)
}

func (w *wtx) grant(id string) (*grantRecord, error) { return w.grantAt([]byte(id)) }

// grantAt is grant for an id given as its key.
func (w *wtx) grantAt(key []byte) (*grantRecord, error) {
	raw, err := w.getState(bucketGrants, key)
	if err != nil || raw == nil {
		return nil, err
	}
	return parseGrantKey(key, raw)
}

func getGrant(tx engine.Tx, id string) (*grantRecord, error) { return getGrantKey(tx, []byte(id)) }

func getGrantKey(tx engine.Tx, key []byte) (*grantRecord, error) {
	raw, err := tx.Get(bucketGrants, key)
	if err != nil || raw == nil {
		return nil, err
	}
	return parseGrantKey(key, raw)
}

func parseGrantKey(key, raw []byte) (*grantRecord, error) {
	var g grantRecord
	if err := decodeRecord(bucketGrants, key, raw, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

func (w *wtx) target(name string) (*targetRecord, error) { return w.targetAt([]byte(name)) }

// targetAt is target for a name given as its key.
func (w *wtx) targetAt(key []byte) (*targetRecord, error) {
	raw, err := w.getState(bucketTargets, key)
	if err != nil || raw == nil {
		return nil, err
	}
	return parseTargetKey(key, raw)
}

func getTarget(tx engine.Tx, name string) (*targetRecord, error) {
	return getTargetKey(tx, []byte(name))
}

func getTargetKey(tx engine.Tx, key []byte) (*targetRecord, error) {
	raw, err := tx.Get(bucketTargets, key)
	if err != nil || raw == nil {
		return nil, err
	}
	return parseTargetKey(key, raw)
}

// parseTarget decodes a stored target record.
func parseTarget(name string, raw []byte) (*targetRecord, error) {
	return parseTargetKey([]byte(name), raw)
}

func parseTargetKey(key, raw []byte) (*targetRecord, error) {
	var t targetRecord
	if err := decodeRecord(bucketTargets, key, raw, &t); err != nil {
		return nil, err
	}
	// An unknown kind is never taken for internal: the write would skip
	// what the kind demands.
	if err := t.checkKind(key); err != nil {
		return nil, err
	}
	// Values read inside a transaction live in the mmap; callers may keep
	// them after it ends, so copy.
	t.Value = append([]byte(nil), t.Value...)
	return &t, nil
}

func (w *wtx) receipt(scope, action string) (*receiptRecord, error) {
	return w.receiptAt(receiptKey(scope, action))
}

// receiptAt is receipt for a receipt key (receiptKey).
func (w *wtx) receiptAt(key []byte) (*receiptRecord, error) {
	raw, err := w.getState(bucketReceipts, key)
	if err != nil || raw == nil {
		return nil, err
	}
	return parseReceiptKey(key, raw)
}

func getReceipt(tx engine.Tx, scope, action string) (*receiptRecord, error) {
	return getReceiptKey(tx, receiptKey(scope, action))
}

func getReceiptKey(tx engine.Tx, key []byte) (*receiptRecord, error) {
	raw, err := tx.Get(bucketReceipts, key)
	if err != nil || raw == nil {
		return nil, err
	}
	return parseReceiptKey(key, raw)
}

func parseReceiptKey(key, raw []byte) (*receiptRecord, error) {
	var rc receiptRecord
	if err := decodeRecord(bucketReceipts, key, raw, &rc); err != nil {
		return nil, err
	}
	// A dispatch state this package never writes is never taken for one
	// it does: a hold would wait on it, or skip it, by mistake.
	if rc.isRemote() && (!validDispatchState(rc.Dispatch) || checkRemoteID("dispatch id", rc.DispatchID) != nil) {
		return nil, fmt.Errorf("%w: receipt record %q: dispatch state %q is not one this receiver writes", ErrBadFormat, key, clip(string(rc.Dispatch), 32))
	}
	return &rc, nil
}

func (w *wtx) putReceipt(scope, action string, rc *receiptRecord) error {
	return w.putReceiptAt(scope, action, receiptKey(scope, action), rc)
}

// putReceiptAt is putReceipt with the receipt's key made by the caller.
func (w *wtx) putReceiptAt(scope, action string, key []byte, rc *receiptRecord) error {
	if w.faults != nil && w.faults.beforeReceipt != nil {
		if err := w.faults.beforeReceipt(scope, action); err != nil {
			return err
		}
	}
	return w.put(bucketReceipts, key, rc)
}

func (w *wtx) put(bucket, key []byte, v any) error {
	raw, err := encodeCanonical(v)
	if err != nil {
		return err
	}
	if isStateBucket(bucket) {
		return w.putState(bucket, key, raw)
	}
	return w.tx.Put(bucket, key, raw)
}

// newGrantID returns 128 random bits as 32 lowercase hex digits.
func newGrantID(rnd io.Reader) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(rnd, b[:]); err != nil {
		return "", fmt.Errorf("kvfence: grant id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// holdAt reads scope's record of hold id, or nil. A database made before
// hold ids has no holds bucket: that reads as no record, checked against
// the known records like any absent one, so that a bucket deleted under
// the running receiver is not taken for one that never held a record.
func (w *wtx) holdAt(scope, id string) (*holdRecord, error) {
	key := holdKey(scope, id)
	raw, err := w.getState(bucketHolds, key)
	if errors.Is(err, engine.ErrBucketNotFound) {
		if w.recs != nil {
			if _, err := w.recs.check(stateBucketIndex(bucketHolds), key, nil); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	if err != nil || raw == nil {
		return nil, err
	}
	var h holdRecord
	if err := decodeRecord(bucketHolds, key, raw, &h); err != nil {
		return nil, err
	}
	if len(h.Request) != sha256.Size || h.Epoch == 0 || h.PreviousEpoch+1 != h.Epoch || h.AuditSeq == 0 {
		return nil, fmt.Errorf("%w: hold record %q is not one a hold writes", ErrBadFormat, key)
	}
	return &h, nil
}

// putHold stores scope's record of hold id, creating the holds bucket in
// this transaction if the database has none yet.
func (w *wtx) putHold(scope, id string, h *holdRecord) error {
	ok, err := w.tx.HasBucket(bucketHolds)
	if err != nil {
		return err
	}
	if !ok {
		if err := w.tx.CreateBucket(bucketHolds); err != nil {
			return err
		}
	}
	return w.put(bucketHolds, holdKey(scope, id), h)
}
