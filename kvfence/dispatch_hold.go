package kvfence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvfence/kvfence/engine"
)

// A hold commits at once; it is acknowledged only once every remote write
// of its scopes decided before it has settled or, still unsettled at its
// deadline, been fenced off (docs/design.md §4.2). The dispatches are
// read from the store, so that another process's on a shared etcd prefix
// count as this one's do.

// holdPoll bounds a hold's sleep between reads of the store while it
// waits: a dispatch of another process settles without waking it.
const holdPoll = 20 * time.Millisecond

// remoteReceipt is a remote target's receipt as a hold or Open finds it.
type remoteReceipt struct {
	key    []byte
	scope  string
	action string
	rc     receiptRecord
	object RemoteObject
	// scopeEpoch is the scope's epoch when it was read.
	scopeEpoch uint64
}

// remoteReceipts reads the remote receipts of scope (every scope if
// scope is empty) for which keep reports true, with their targets'
// objects.
func (r *Receiver) remoteReceipts(scope string, keep func(rc *receiptRecord) bool) ([]remoteReceipt, error) {
	var out []remoteReceipt
	err := r.view(func(tx engine.Tx) error {
		out = out[:0]
		var prefix []byte
		if scope != "" {
			// Scope names hold no zero byte: the scope's receipts are
			// exactly the keys under this prefix.
			prefix = receiptKey(scope, "")
		}
		err := tx.Scan(bucketReceipts, prefix, func(k, v []byte) error {
			if !bytes.HasPrefix(k, prefix) {
				return engine.StopScan
			}
			rc, err := parseReceiptKey(k, v)
			if err != nil {
				return err
			}
			if !rc.isRemote() || !keep(rc) {
				return nil
			}
			s, a, _ := bytes.Cut(k, []byte{0})
			out = append(out, remoteReceipt{key: bytes.Clone(k), scope: string(s), action: string(a), rc: *rc})
			return nil
		})
		if err != nil {
			return err
		}
		for i := range out {
			t, err := getTarget(tx, out[i].rc.Target)
			if err != nil {
				return err
			}
			if t == nil || t.Kind != TargetKubernetes || t.Scope != out[i].scope {
				return fmt.Errorf("%w: receipt %q names target %q, which is not a remote target of its scope", ErrBadFormat, out[i].key, out[i].rc.Target)
			}
			out[i].object = *t.Object
			c, err := getControl(tx, out[i].scope)
			if err != nil {
				return err
			}
			if c == nil {
				return fmt.Errorf("%w: receipt %q names a scope the store does not hold", ErrBadFormat, out[i].key)
			}
			out[i].scopeEpoch = c.Epoch
		}
		return nil
	})
	return out, err
}

// settleBeforeAck waits, for each held scope, until every dispatch decided
// before the hold (at an older epoch) has settled, fences each still
// dispatching at its deadline and records it unknown, and returns every
// unknown dispatch of those scopes decided before the hold. If ctx ends
// first, it returns ErrHoldNotSettled.
func (r *Receiver) settleBeforeAck(ctx context.Context, held []HeldScope) ([]OutstandingDispatch, error) {
	if r.faults.skipHoldWait {
		return nil, nil
	}
	// A deadline is on the receiver's clock; a dispatch first seen here
	// is also given up at the time then left on this process's monotonic
	// clock, so that a clock that stands still cannot hold the hold.
	seen := make(map[string]time.Time)
	for {
		var pending, outstanding []remoteReceipt
		for _, h := range held {
			rs, err := r.remoteReceipts(h.Scope, func(rc *receiptRecord) bool {
				return rc.Epoch < h.Epoch && (rc.Dispatch == DispatchDispatching || rc.Dispatch == DispatchUnknown)
			})
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrHoldNotSettled, err)
			}
			for _, rr := range rs {
				if rr.rc.Dispatch == DispatchDispatching {
					pending = append(pending, rr)
				} else {
					outstanding = append(outstanding, rr)
				}
			}
		}
		if len(pending) == 0 {
			return outstandingList(outstanding), nil
		}
		sleep := holdPoll
		fenced := false
		for _, rr := range pending {
			due, ok := seen[rr.rc.DispatchID]
			if !ok {
				due = r.realDeadline(rr.rc.Deadline)
				seen[rr.rc.DispatchID] = due
			}
			if left := time.Until(due); left > 0 && r.opts.Now().UnixNano() < rr.rc.Deadline {
				sleep = min(sleep, left)
				continue
			}
			if err := r.fenceDispatch(ctx, rr, heldEpoch(held, rr.scope), "fenced by the hold"); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrHoldNotSettled, err)
			}
			fenced = true
		}
		if fenced {
			continue
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %d write(s) in flight: %w", ErrHoldNotSettled, len(pending), ctx.Err())
		case <-r.gate.wait():
		case <-time.After(sleep):
		}
	}
}

// heldEpoch is scope's epoch in held.
func heldEpoch(held []HeldScope, scope string) uint64 {
	for _, h := range held {
		if h.Scope == scope {
			return h.Epoch
		}
	}
	return 0
}

// fenceDispatch writes a fencing stamp of epoch on the object of a
// dispatch past its deadline, after which a write still in flight with
// the older precondition can only fail, and records the dispatch unknown
// with the version the fence left.
func (r *Receiver) fenceDispatch(ctx context.Context, rr remoteReceipt, epoch uint64, why string) error {
	d := r.opts.Dispatchers[rr.object.kind()]
	if d == nil {
		return fmt.Errorf("%w: dispatch %s to %s cannot be fenced: no dispatcher for kind %s", ErrNoDispatcher, rr.rc.DispatchID, rr.object, rr.object.kind())
	}
	fid, err := newGrantID(r.opts.Rand)
	if err != nil {
		return err
	}
	version := ""
	if !r.faults.skipFence {
		fctx, cancel := context.WithTimeout(ctx, r.opts.DispatchTimeout)
		st, err := d.Fence(fctx, rr.object, Stamp{Scope: rr.scope, Epoch: epoch, Receipt: fid})
		cancel()
		// An object that is gone takes no write conditioned on its UID.
		if err != nil && !errors.Is(err, ErrRemoteNotFound) {
			return fmt.Errorf("fencing %s for dispatch %s: %w", rr.object, rr.rc.DispatchID, err)
		}
		version = st.Version
		if checkRemoteID("object version", version) != nil {
			version = ""
		}
	}
	settle := r.settleFenced
	if r.faults.skipFence {
		settle = r.settleDispatch
	}
	_, _, err = settle(rr.key, rr.rc.DispatchID, DispatchUnknown, version, fmt.Sprintf("%s at epoch %d; fence %s", why, epoch, fid))
	return err
}

// outstandingList is the public form of unknown dispatches.
func outstandingList(rs []remoteReceipt) []OutstandingDispatch {
	var out []OutstandingDispatch
	for _, rr := range rs {
		out = append(out, OutstandingDispatch{Scope: rr.scope, Action: rr.action, Grant: rr.rc.Grant, Target: rr.rc.Target,
			Object: rr.object, DispatchID: rr.rc.DispatchID, Precondition: rr.rc.Precondition, Version: rr.rc.Version,
			AuditSeq: rr.rc.AuditSeq})
	}
	return out
}
