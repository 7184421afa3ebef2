package main

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdRequestTimeout bounds each request to --etcd: a command against a
// cluster that is down or has lost its majority fails instead of waiting
// for ever. A commit that times out is of unknown outcome, and says so.
const etcdRequestTimeout = 10 * time.Second

// timeoutKV bounds every request of the KV it wraps by d.
type timeoutKV struct {
	clientv3.KV
	d time.Duration
}

func (k timeoutKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, k.d)
	defer cancel()
	return k.KV.Put(ctx, key, val, opts...)
}

func (k timeoutKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, k.d)
	defer cancel()
	return k.KV.Get(ctx, key, opts...)
}

func (k timeoutKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, k.d)
	defer cancel()
	return k.KV.Delete(ctx, key, opts...)
}

func (k timeoutKV) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, k.d)
	defer cancel()
	return k.KV.Compact(ctx, rev, opts...)
}

func (k timeoutKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, k.d)
	defer cancel()
	return k.KV.Do(ctx, op)
}

// Txn starts the clock when the transaction is begun; Commit ends it. A
// transaction never committed is released at its deadline.
func (k timeoutKV) Txn(ctx context.Context) clientv3.Txn {
	ctx, cancel := context.WithTimeout(ctx, k.d)
	return timeoutTxn{Txn: k.KV.Txn(ctx), cancel: cancel}
}

// timeoutTxn releases its deadline's timer when it commits.
type timeoutTxn struct {
	clientv3.Txn
	cancel context.CancelFunc
}

func (t timeoutTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	return timeoutTxn{Txn: t.Txn.If(cs...), cancel: t.cancel}
}

func (t timeoutTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	return timeoutTxn{Txn: t.Txn.Then(ops...), cancel: t.cancel}
}

func (t timeoutTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	return timeoutTxn{Txn: t.Txn.Else(ops...), cancel: t.cancel}
}

func (t timeoutTxn) Commit() (*clientv3.TxnResponse, error) {
	defer t.cancel()
	return t.Txn.Commit()
}
