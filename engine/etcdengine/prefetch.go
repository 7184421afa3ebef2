package etcdengine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/kvfence/kvfence/engine"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var _ engine.Prefetcher = (*tx)(nil)

// Prefetch reads the named keys that this run has neither read nor
// written in one Txn of range requests at the transaction's revision (a
// request per --max-txn-ops keys): the first read of a transaction is
// linearizable and fixes the revision, a later one is serializable at it,
// as for Get. Each key read joins the reads that the commit compares,
// exactly as a Get's does: its mod revision, 0 if absent. Keys whose
// compares would break the limits are left out, for Get to read and
// refuse.
func (t *tx) Prefetch(keys ...engine.Key) error { return t.prefetchKeys(keys, nil, nil) }

var _ engine.GuardedPrefetcher = (*tx)(nil)

// PrefetchGuarded reads keys, guard and guarded in one Txn of range
// requests per --max-txn-ops keys, as Prefetch does, and keeps the keys
// of guarded out of the commit's compares while the guard stands for them
// (engine.GuardedPrefetcher): the guard was read from etcd, not from this
// run's writes, it is compared by mod revision, and it was present. A
// guard read before and compared itself serves too. Otherwise the guarded
// keys become compared reads, as far as the limits allow, and the others
// are forgotten, for Get to read and refuse. A guarded key costs a read,
// not a compare, against the limits.
func (t *tx) PrefetchGuarded(keys []engine.Key, guard engine.Key, guarded []engine.Key) error {
	return t.prefetchKeys(append(slices.Clip(keys), guard), &guard, guarded)
}

// prefetchKeys is Prefetch, and PrefetchGuarded if guard is not nil.
func (t *tx) prefetchKeys(keys []engine.Key, guard *engine.Key, guarded []engine.Key) error {
	if t.tooLarge != nil {
		return t.tooLarge
	}
	// The buckets first: an unknown one is a read of its marker, which
	// counts against the limits before the keys do.
	for _, k := range append(slices.Clip(keys), guarded...) {
		if err := engine.CheckKey(k.Key); err != nil {
			return err
		}
		if err := t.bucket(k.Bucket); err != nil {
			return err
		}
	}
	o := t.e.opts
	cmps, size := t.cmpCount(), t.bytes
	var want []string
	named := map[string]bool{}
	// pick adds the keys not read or written yet to want; compared ones
	// only as far as the limits allow.
	pick := func(keys []engine.Key, compared bool) {
		for _, k := range keys {
			ek := t.key(k.Bucket, k.Key)
			if _, ok := t.writes[ek]; ok {
				continue
			}
			if _, ok := t.reads[ek]; ok || named[ek] {
				continue
			}
			if t.writable && compared {
				if cmps+1 > o.MaxTxnOps || size+len(ek)+opOverhead > o.MaxRequestBytes {
					continue
				}
				cmps, size = cmps+1, size+len(ek)+opOverhead
			}
			named[ek] = true
			want = append(want, ek)
		}
	}
	var gk string
	if guard != nil {
		gk = t.key(guard.Bucket, guard.Key)
		if _, ok := t.writes[gk]; ok {
			// The guard must be read from etcd, whatever this run wrote:
			// read alone, it joins the compares before the keys do.
			if _, err := t.fetch(gk, false); err != nil {
				return err
			}
		}
	}
	pick(keys, true)
	compared := len(want)
	if guard != nil && t.writable {
		pick(guarded, false)
	} else {
		pick(guarded, true)
	}
	for i := 0; i < len(want); {
		n := min(len(want)-i, o.MaxTxnOps)
		if err := t.prefetch(want[i:i+n], gk, max(0, compared-i)); err != nil {
			return err
		}
		i += n
	}
	if guard == nil || !t.writable || len(want) == compared {
		return nil
	}
	if g, ok := t.reads[gk]; ok && g.guard == "" && g.mod != 0 && !g.byCreate {
		return nil
	}
	// No guard stands for them: compare the guarded reads themselves, or
	// forget those that would break the limits.
	for _, k := range want[compared:] {
		r := t.reads[k]
		r.guard = ""
		t.guarded--
		if t.cmpCount() > o.MaxTxnOps || t.bytes+len(k)+opOverhead > o.MaxRequestBytes {
			delete(t.reads, k)
			continue
		}
		t.bytes += len(k) + opOverhead
	}
	return nil
}

// prefetch reads keys, which are not in the read set yet, in one Txn and
// records them in it; those from index compared on are compared through
// guard, if it is not "" and the transaction is writable.
func (t *tx) prefetch(keys []string, guard string, compared int) error {
	get := func(opts ...clientv3.OpOption) (*clientv3.TxnResponse, error) {
		ops := make([]clientv3.Op, len(keys))
		for i, k := range keys {
			ops[i] = clientv3.OpGet(k, opts...)
		}
		return t.e.kv.Txn(t.ctx).Then(ops...).Commit()
	}
	var resp *clientv3.TxnResponse
	var err error
	if t.rev == 0 {
		resp, err = get()
	} else {
		resp, err = get(clientv3.WithRev(t.rev), clientv3.WithSerializable())
		if errors.Is(err, rpctypes.ErrFutureRev) {
			resp, err = get(clientv3.WithRev(t.rev))
		}
	}
	if err != nil {
		return t.readErr(err)
	}
	if len(resp.Responses) != len(keys) {
		return t.readErr(fmt.Errorf("%w: %d answers to %d reads", engine.ErrCorrupt, len(resp.Responses), len(keys)))
	}
	if t.rev == 0 {
		t.rev = resp.Header.Revision
	}
	for i, k := range keys {
		rr := resp.Responses[i].GetResponseRange()
		if rr == nil || len(rr.Kvs) > 1 {
			return t.readErr(fmt.Errorf("%w: the answer to a read of one key is not one range", engine.ErrCorrupt))
		}
		r := &read{}
		if len(rr.Kvs) == 1 {
			kv := rr.Kvs[0]
			r.val, r.mod, r.create = present(kv.Value), kv.ModRevision, kv.CreateRevision
		}
		if t.writable {
			if guard != "" && i >= compared {
				r.guard = guard
				t.guarded++
			} else {
				t.bytes += len(k) + opOverhead
			}
		}
		t.reads[k] = r
	}
	return nil
}
