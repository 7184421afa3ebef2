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
	var runs []run
	named := map[string]bool{}
	// pick adds the keys not read or written yet to runs; compared ones
	// one by one and only as far as the limits allow, guarded ones in
	// runs of successive keys.
	pick := func(keys []engine.Key, compared bool) {
		var prev []byte // the last guarded key picked, in its bucket
		var prevBucket []byte
		for _, k := range keys {
			ek := t.key(k.Bucket, k.Key)
			if _, ok := t.writes[ek]; ok {
				continue
			}
			if _, ok := t.reads[ek]; ok || named[ek] {
				continue
			}
			named[ek] = true
			if compared {
				if t.writable {
					if cmps+1 > o.MaxTxnOps || size+len(ek)+opOverhead > o.MaxRequestBytes {
						delete(named, ek)
						continue
					}
					cmps, size = cmps+1, size+len(ek)+opOverhead
				}
				runs = append(runs, run{keys: []string{ek}})
				continue
			}
			if n := len(runs); n > 0 && runs[n-1].guarded && string(prevBucket) == string(k.Bucket) && successor(prev, k.Key) {
				runs[n-1].keys = append(runs[n-1].keys, ek)
			} else {
				runs = append(runs, run{keys: []string{ek}, guarded: true})
			}
			prev, prevBucket = k.Key, k.Bucket
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
	pick(guarded, guard == nil || !t.writable)
	for len(runs) > 0 {
		n := min(len(runs), o.MaxTxnOps)
		over, err := t.prefetch(runs[:n], gk)
		if err != nil {
			return err
		}
		// A run whose range held keys it did not name is read again key
		// by key.
		runs = append(runs[n:], over...)
	}
	if guard == nil || !t.writable {
		return nil
	}
	if g, ok := t.reads[gk]; ok && g.guard == "" && g.mod != 0 && !g.byCreate {
		return nil
	}
	// No guard stands for them: compare the guarded reads themselves, or
	// forget those that would break the limits.
	for _, k := range guarded {
		ek := t.key(k.Bucket, k.Key)
		r, ok := t.reads[ek]
		if !ok || r.guard == "" {
			continue
		}
		r.guard = ""
		t.guarded--
		if t.cmpCount() > o.MaxTxnOps || t.bytes+len(ek)+opOverhead > o.MaxRequestBytes {
			delete(t.reads, ek)
			continue
		}
		t.bytes += len(ek) + opOverhead
	}
	return nil
}

// run is keys that one range request reads: one key, or successive
// guarded keys of one bucket (successor), read as the range from the
// first to the last.
type run struct {
	keys []string
	// guarded says the keys are compared through the guard.
	guarded bool
}

// successor reports whether b is a's successor among keys of a's length,
// a read as a big-endian number (as audit.SeqKey(n) and audit.SeqKey(n+1)
// are).
func successor(a, b []byte) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	i := len(a) - 1
	for i >= 0 && a[i] == 0xff {
		if b[i] != 0 {
			return false
		}
		i--
	}
	return i >= 0 && b[i] == a[i]+1 && string(a[:i]) == string(b[:i])
}

// prefetch reads runs, whose keys are not in the read set yet, in one Txn
// of one range request each and records their keys in it; a guarded
// run's keys are compared through guard. It returns, as runs of one key,
// the keys of a run whose range held more keys than it named (etcd's
// limit on the range cut it), which it did not record.
func (t *tx) prefetch(runs []run, guard string) ([]run, error) {
	get := func(opts ...clientv3.OpOption) (*clientv3.TxnResponse, error) {
		ops := make([]clientv3.Op, len(runs))
		for i, r := range runs {
			if len(r.keys) == 1 {
				ops[i] = clientv3.OpGet(r.keys[0], opts...)
				continue
			}
			last := r.keys[len(r.keys)-1]
			ops[i] = clientv3.OpGet(r.keys[0], append([]clientv3.OpOption{clientv3.WithRange(last + "\x00"), clientv3.WithLimit(int64(len(r.keys)))}, opts...)...)
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
		return nil, t.readErr(err)
	}
	if len(resp.Responses) != len(runs) {
		return nil, t.readErr(fmt.Errorf("%w: %d answers to %d reads", engine.ErrCorrupt, len(resp.Responses), len(runs)))
	}
	if t.rev == 0 {
		t.rev = resp.Header.Revision
	}
	var over []run
	for i, rn := range runs {
		rr := resp.Responses[i].GetResponseRange()
		if rr == nil || len(rr.Kvs) > len(rn.keys) {
			return nil, t.readErr(fmt.Errorf("%w: the answer to a read of %d keys is not a range of at most as many", engine.ErrCorrupt, len(rn.keys)))
		}
		if rr.More {
			for _, k := range rn.keys {
				over = append(over, run{keys: []string{k}, guarded: rn.guarded})
			}
			continue
		}
		found := make(map[string]*read, len(rr.Kvs))
		for _, kv := range rr.Kvs {
			found[string(kv.Key)] = &read{val: present(kv.Value), mod: kv.ModRevision, create: kv.CreateRevision}
		}
		for _, k := range rn.keys {
			r := found[k]
			if r == nil {
				r = &read{}
			}
			if t.writable {
				if rn.guarded && guard != "" {
					r.guard = guard
					t.guarded++
				} else {
					t.bytes += len(k) + opOverhead
				}
			}
			t.reads[k] = r
		}
	}
	return over, nil
}
