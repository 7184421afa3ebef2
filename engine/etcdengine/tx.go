package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kvfence/kvfence/engine"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// read is one key read at the transaction's revision.
type read struct {
	val []byte // nil if absent; non-nil if present
	mod int64  // mod revision, 0 if absent
	// create is the create revision; byCreate says the compare is on it
	// (a bucket marker checked for existence, which Deletes rewrite).
	create   int64
	byCreate bool
	// guard is the key whose compare stands for this one's
	// (PrefetchGuarded), or "" if the key is compared itself.
	guard string
}

// write is one buffered write.
type write struct {
	val []byte
	del bool
}

// tx is one run of a transaction function.
type tx struct {
	ctx      context.Context
	e        *Engine
	writable bool
	// rev is the revision of every read, fixed by the first; 0 before it.
	rev   int64
	reads map[string]*read
	// guarded counts the reads whose compare a guard's stands for: they
	// are in reads, but not in the commit's compares.
	guarded int
	ranges  []clientv3.Cmp
	writes  map[string]write
	// bytes is the estimated size of the commit's request.
	bytes int
	// buckets are those seen to exist in this run (read, or created).
	buckets map[string]bool
	// learned are buckets read as present from etcd, for the engine to
	// remember once the transaction succeeded.
	learned []string
	// tooLarge and readFailed fail the transaction whatever fn does with
	// the error; retry makes it run again.
	tooLarge, readFailed, retry error
	// committed are the OnCommit functions of this run.
	committed []func(rev int64)
}

func newTx(ctx context.Context, e *Engine, writable bool) *tx {
	return &tx{ctx: ctx, e: e, writable: writable, reads: map[string]*read{}, writes: map[string]write{},
		buckets: map[string]bool{}, bytes: baseOverhead}
}

// learnBuckets tells the engine the buckets this run saw in etcd.
func (t *tx) learnBuckets() {
	for _, b := range t.learned {
		t.e.known.Store(b, struct{}{})
	}
}

// marker is the key whose existence is bucket's.
func (t *tx) marker(bucket []byte) string { return t.e.prefix + string(bucket) }

// key is bucket's key k in etcd.
func (t *tx) key(bucket, k []byte) string { return t.e.prefix + string(bucket) + "/" + string(k) }

// bounds are the first and the end key of bucket's keys.
func (t *tx) bounds(bucket []byte) (string, string) {
	return t.e.prefix + string(bucket) + "/", t.e.prefix + string(bucket) + "0"
}

// chargeCompare counts one more compare of n bytes against the limits.
func (t *tx) chargeCompare(n int) error {
	if t.tooLarge != nil {
		return t.tooLarge
	}
	t.bytes += n
	return t.checkLimits(t.cmpCount() + 1)
}

// cmpCount is the number of compares the commit would make now.
func (t *tx) cmpCount() int { return len(t.reads) - t.guarded + len(t.ranges) }

// checkLimits fails the transaction if cmps compares or its writes break
// the limits.
func (t *tx) checkLimits(cmps int) error {
	o := t.e.opts
	if cmps > o.MaxTxnOps || len(t.writes) > o.MaxTxnOps || t.bytes > o.MaxRequestBytes {
		t.tooLarge = fmt.Errorf("%w: %d writes, %d compares, about %d bytes; limits %d operations, %d bytes",
			engine.ErrTxnTooLarge, len(t.writes), cmps, t.bytes, o.MaxTxnOps, o.MaxRequestBytes)
		return t.tooLarge
	}
	return nil
}

// get reads one key at the transaction's revision: from the buffer, the
// reads made so far, or etcd.
func (t *tx) get(k string, byCreate bool) (*read, error) {
	if w, ok := t.writes[k]; ok {
		if w.del {
			return &read{}, nil
		}
		return &read{val: w.val}, nil
	}
	return t.fetch(k, byCreate)
}

// fetch reads one key from etcd at the transaction's revision, once, and
// records it for the commit's compares.
func (t *tx) fetch(k string, byCreate bool) (*read, error) {
	if r, ok := t.reads[k]; ok {
		if !byCreate {
			r.byCreate = false
		}
		return r, nil
	}
	if t.tooLarge != nil {
		return nil, t.tooLarge
	}
	if t.writable {
		if err := t.chargeCompare(len(k) + opOverhead); err != nil {
			return nil, err
		}
	}
	resp, err := t.rangeAt(k)
	if err != nil {
		return nil, t.readErr(err)
	}
	r := &read{byCreate: byCreate}
	if len(resp.Kvs) == 1 {
		kv := resp.Kvs[0]
		r.val, r.mod, r.create = present(kv.Value), kv.ModRevision, kv.CreateRevision
	}
	t.reads[k] = r
	return r, nil
}

// rangeAt reads from etcd at the transaction's revision. The first read
// is linearizable and fixes the revision. A later one is serializable:
// the state at a revision never changes, so any member that has applied
// it answers the same, without the round of the leader that a
// linearizable read costs; a member behind it answers with a future
// revision error and the read is asked again, linearizable.
func (t *tx) rangeAt(key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if t.rev == 0 {
		resp, err := t.e.kv.Get(t.ctx, key, opts...)
		if err == nil {
			t.rev = resp.Header.Revision
		}
		return resp, err
	}
	opts = append(opts, clientv3.WithRev(t.rev))
	resp, err := t.e.kv.Get(t.ctx, key, append(opts, clientv3.WithSerializable())...)
	if errors.Is(err, rpctypes.ErrFutureRev) {
		resp, err = t.e.kv.Get(t.ctx, key, opts...)
	}
	return resp, err
}

// present returns v as a present value: non-nil even when empty, which
// protobuf decodes as nil.
func present(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}

// bucket checks that bucket exists, reading its marker once per engine.
func (t *tx) bucket(bucket []byte) error {
	if t.buckets[string(bucket)] {
		return nil
	}
	if err := engine.CheckBucket(bucket); err != nil {
		return err
	}
	if _, ok := t.e.known.Load(string(bucket)); ok {
		t.buckets[string(bucket)] = true
		return nil
	}
	r, err := t.get(t.marker(bucket), true)
	if err != nil {
		return err
	}
	if r.val == nil {
		return fmt.Errorf("%w: %q", engine.ErrBucketNotFound, bucket)
	}
	t.buckets[string(bucket)] = true
	if r.create != 0 {
		t.learned = append(t.learned, string(bucket))
	}
	return nil
}

func (t *tx) Get(bucket, key []byte) ([]byte, error) {
	if err := engine.CheckKey(key); err != nil {
		return nil, err
	}
	if err := t.bucket(bucket); err != nil {
		return nil, err
	}
	r, err := t.get(t.key(bucket, key), false)
	if err != nil {
		return nil, err
	}
	return r.val, nil
}

// put buffers a write of k, counting it once however often it is written.
func (t *tx) put(k string, w write) error {
	if t.tooLarge != nil {
		return t.tooLarge
	}
	if old, ok := t.writes[k]; ok {
		t.bytes -= len(k) + len(old.val) + opOverhead
	}
	t.bytes += len(k) + len(w.val) + opOverhead
	t.writes[k] = w
	return t.checkLimits(t.cmpCount())
}

func (t *tx) Put(bucket, key, value []byte) error {
	if !t.writable {
		return engine.ErrReadOnly
	}
	if err := engine.CheckKey(key); err != nil {
		return err
	}
	if err := t.bucket(bucket); err != nil {
		return err
	}
	return t.put(t.key(bucket, key), write{val: present(value)})
}

// Delete also rewrites the bucket's marker, so that a concurrent scan of
// the bucket sees the deletion in its compares.
func (t *tx) Delete(bucket, key []byte) error {
	if !t.writable {
		return engine.ErrReadOnly
	}
	if err := engine.CheckKey(key); err != nil {
		return err
	}
	if err := t.bucket(bucket); err != nil {
		return err
	}
	if err := t.put(t.key(bucket, key), write{del: true}); err != nil {
		return err
	}
	return t.put(t.marker(bucket), write{val: []byte{}})
}

func (t *tx) CreateBucket(bucket []byte) error {
	if !t.writable {
		return engine.ErrReadOnly
	}
	if err := engine.CheckBucket(bucket); err != nil {
		return err
	}
	if _, ok := t.e.known.Load(string(bucket)); ok || t.buckets[string(bucket)] {
		return fmt.Errorf("%w: %q", engine.ErrBucketExists, bucket)
	}
	r, err := t.get(t.marker(bucket), true)
	if err != nil {
		return err
	}
	if r.val != nil {
		return fmt.Errorf("%w: %q", engine.ErrBucketExists, bucket)
	}
	if err := t.put(t.marker(bucket), write{val: []byte{}}); err != nil {
		return err
	}
	t.buckets[string(bucket)] = true
	return nil
}

func (t *tx) HasBucket(bucket []byte) (bool, error) {
	err := t.bucket(bucket)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, engine.ErrBucketNotFound):
		return false, nil
	}
	return false, err
}

// compares are the commit's conditions: every point read that no guard
// stands for, then every range walked.
func (t *tx) compares() []clientv3.Cmp {
	cmps := make([]clientv3.Cmp, 0, t.cmpCount())
	for k, r := range t.reads {
		if r.guard != "" {
			// PrefetchGuarded compared the guard when it read the key:
			// kept out only while that holds.
			if g, ok := t.reads[r.guard]; ok && g.guard == "" && g.mod != 0 && !g.byCreate {
				continue
			}
		}
		if r.byCreate {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", r.create))
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", r.mod))
		}
	}
	return append(cmps, t.ranges...)
}

// walked records, in an Update, that the keys in [start, end) were read at
// the transaction's revision.
func (t *tx) walked(start, end string) error {
	if !t.writable {
		return nil
	}
	if err := t.chargeCompare(len(start) + len(end) + opOverhead); err != nil {
		return err
	}
	t.ranges = append(t.ranges, clientv3.Compare(clientv3.ModRevision(start), "<", t.rev+1).WithRange(end))
	return nil
}

// buffered returns the buffered writes' keys in [start, end), in order.
func (t *tx) buffered(start, end string) []string {
	var ks []string
	for k := range t.writes {
		if k >= start && k < end {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}
