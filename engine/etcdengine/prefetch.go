package etcdengine

import (
	"errors"
	"fmt"

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
func (t *tx) Prefetch(keys ...engine.Key) error {
	if t.tooLarge != nil {
		return t.tooLarge
	}
	// The buckets first: an unknown one is a read of its marker, which
	// counts against the limits before the keys do.
	for _, k := range keys {
		if err := engine.CheckKey(k.Key); err != nil {
			return err
		}
		if err := t.bucket(k.Bucket); err != nil {
			return err
		}
	}
	o := t.e.opts
	cmps, size := len(t.reads)+len(t.ranges), t.bytes
	var want []string
	named := map[string]bool{}
	for _, k := range keys {
		ek := t.key(k.Bucket, k.Key)
		if _, ok := t.writes[ek]; ok {
			continue
		}
		if _, ok := t.reads[ek]; ok || named[ek] {
			continue
		}
		if t.writable {
			if cmps+1 > o.MaxTxnOps || size+len(ek)+opOverhead > o.MaxRequestBytes {
				continue
			}
			cmps, size = cmps+1, size+len(ek)+opOverhead
		}
		named[ek] = true
		want = append(want, ek)
	}
	for len(want) > 0 {
		n := min(len(want), o.MaxTxnOps)
		if err := t.prefetch(want[:n]); err != nil {
			return err
		}
		want = want[n:]
	}
	return nil
}

// prefetch reads keys, which are not in the read set yet, in one Txn and
// records them in it.
func (t *tx) prefetch(keys []string) error {
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
			t.bytes += len(k) + opOverhead
		}
		t.reads[k] = r
	}
	return nil
}
