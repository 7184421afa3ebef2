package kvfence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"
)

// resolveDispatches settles, before Open returns, every dispatch a process
// left in flight (a receipt still dispatching), by reading its object
// once its deadline has passed, when no write of it can land any more:
//
//   - the object carries this dispatch's receipt stamp, for the scope,
//     in the incarnation read: applied, at the version read;
//   - the object is gone: failed;
//   - the object is still at the precondition version: nothing landed; it
//     is fenced all the same, then recorded failed (unknown if the fenced
//     object holds the new value: a write of a process whose deadline was
//     longer than this one's may have landed in between);
//   - anything else (another version without this stamp, a stamp naming
//     another dispatch, another incarnation): fenced, then recorded
//     unknown, an outstanding effect a later hold lists.
//
// A dispatch whose kind has no dispatcher here makes Open fail with
// ErrNoDispatcher: a receiver that served without settling it could
// acknowledge a hold while the write may still land. So could one that
// cannot read the object: Open then fails with the read's error.
func (r *Receiver) resolveDispatches() error {
	rs, err := r.remoteReceipts("", func(rc *receiptRecord) bool { return rc.Dispatch == DispatchDispatching })
	if err != nil || len(rs) == 0 {
		return err
	}
	for _, rr := range rs {
		if r.opts.Dispatchers[rr.object.kind()] == nil {
			return fmt.Errorf("%w: %s: dispatch %s to %s is in flight; open the receiver with a dispatcher for kind %s",
				ErrNoDispatcher, r.path, rr.rc.DispatchID, rr.object, rr.object.kind())
		}
	}
	// One wait for all, until the latest deadline, bounded by the
	// configured timeout: a deadline recorded further ahead than a write
	// may take is not waited for in full.
	var wait time.Duration
	for _, rr := range rs {
		wait = max(wait, min(time.Until(r.realDeadline(rr.rc.Deadline)), r.opts.DispatchTimeout))
	}
	time.Sleep(wait)
	for _, rr := range rs {
		if err := r.resolveDispatch(rr); err != nil {
			return fmt.Errorf("kvfence: %s: resolving dispatch %s to %s: %w", r.path, rr.rc.DispatchID, rr.object, err)
		}
	}
	return nil
}

// resolveDispatch settles one dispatch found in flight at Open.
func (r *Receiver) resolveDispatch(rr remoteReceipt) error {
	d := r.opts.Dispatchers[rr.object.kind()]
	ctx, cancel := context.WithTimeout(context.Background(), min(remoteReadTimeout, r.opts.DispatchTimeout))
	st, err := d.Read(ctx, rr.object)
	cancel()
	switch {
	case errors.Is(err, ErrRemoteNotFound):
		_, _, err = r.settleDispatch(rr.key, rr.rc.DispatchID, DispatchFailed, "", "the object was gone at open")
		return err
	case err != nil:
		return err
	case st.UID == rr.rc.UID && st.Stamp.Receipt == rr.rc.DispatchID && st.Stamp.Scope == rr.scope &&
		checkRemoteID("object version", st.Version) == nil && valueIs(st.Value, rr.rc.ValueSHA256):
		_, _, err = r.settleDispatch(rr.key, rr.rc.DispatchID, DispatchApplied, st.Version, "stamp found at open")
		return err
	case st.UID == rr.rc.UID && st.Version == rr.rc.Precondition:
		fst, fid, err := r.fenceAtOpen(rr)
		if err != nil {
			return err
		}
		settle := r.settleFenced
		if fid == "" {
			settle = r.settleDispatch // the test switch skipFence wrote none
		}
		// The decided bytes need not be the form the object reads back in
		// (canonical JSON): a value that changed since the read says so too.
		if sum := sha256.Sum256(fst.Value); bytes.Equal(sum[:], rr.rc.ValueSHA256) || fst.Version != "" && !bytes.Equal(fst.Value, st.Value) {
			// The write may have landed between the read and the fence
			// (a deadline longer than this receiver's): it cannot be told
			// from a value that was there already, so it is unknown.
			_, _, err = settle(rr.key, rr.rc.DispatchID, DispatchUnknown, fst.Version, "the object holds the new value after the fence at open; fence "+fid)
			return err
		}
		_, _, err = settle(rr.key, rr.rc.DispatchID, DispatchFailed, "", "not applied: the object was at the precondition at open, and was fenced; fence "+fid)
		return err
	}
	return r.fenceDispatch(context.Background(), rr, rr.scopeEpoch, "fenced at open")
}

// fenceAtOpen writes a fencing stamp on a dispatch's object without
// settling it, and returns the state it left and the stamp's id, which
// the settling entry names.
func (r *Receiver) fenceAtOpen(rr remoteReceipt) (RemoteState, string, error) {
	if r.faults.skipFence {
		return RemoteState{}, "", nil
	}
	fid, err := newGrantID(r.opts.Rand)
	if err != nil {
		return RemoteState{}, "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.DispatchTimeout)
	defer cancel()
	st, err := r.opts.Dispatchers[rr.object.kind()].Fence(ctx, rr.object, Stamp{Scope: rr.scope, Epoch: rr.scopeEpoch, Receipt: fid})
	return st, fid, err
}

// valueIs reports whether value's SHA-256 is sum: a stamp that names the
// dispatch on another value (forged with the id, which the worker and the
// audit chain know) is not taken for the write.
func valueIs(value, sum []byte) bool {
	got := sha256.Sum256(value)
	return bytes.Equal(got[:], sum)
}
