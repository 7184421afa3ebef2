package etcdengine

import (
	"github.com/kvfence/kvfence/engine"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Scan walks etcd's keys at the transaction's revision a page at a time,
// merged with the buffered writes. In an Update it then compares the
// walked range and the bucket's marker (see the package documentation).
func (t *tx) Scan(bucket, from []byte, fn func(key, value []byte) error) error {
	if err := t.bucket(bucket); err != nil {
		return err
	}
	first, end := t.bounds(bucket)
	start := first + string(from)
	if t.writable {
		// Read from etcd even if this transaction rewrote the marker: the
		// compare must see another writer's deletes.
		if _, err := t.fetch(t.marker(bucket), false); err != nil {
			return err
		}
	}
	buf := t.buffered(start, end)
	var stop string // the last key handed to fn, once it stopped the scan
	var ferr error
	emit := func(k string, v []byte) bool {
		if err := fn([]byte(k[len(first):]), v); err != nil {
			stop = k
			if err != engine.StopScan {
				ferr = err
			}
			return false
		}
		return true
	}
	// flush hands fn the buffered puts before limit ("" for all of them).
	flush := func(limit string) bool {
		for len(buf) > 0 && (limit == "" || buf[0] < limit) {
			k := buf[0]
			buf = buf[1:]
			if w := t.writes[k]; !w.del && !emit(k, w.val) {
				return false
			}
		}
		return true
	}
	cur := start
walk:
	for {
		resp, err := t.rangeAt(cur, clientv3.WithRange(end), clientv3.WithLimit(int64(t.e.opts.ScanPage)))
		if err != nil {
			return t.readErr(err)
		}
		for _, kv := range resp.Kvs {
			k := string(kv.Key)
			if !flush(k) {
				break walk
			}
			if len(buf) > 0 && buf[0] == k {
				// This transaction rewrote or deleted the key.
				buf = buf[1:]
				if w := t.writes[k]; !w.del && !emit(k, w.val) {
					break walk
				}
				continue
			}
			if !emit(k, present(kv.Value)) {
				break walk
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			flush("")
			break
		}
		cur = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	if ferr != nil {
		return ferr
	}
	walkedEnd := end
	if stop != "" {
		walkedEnd = stop + "\x00"
	}
	return t.walked(start, walkedEnd)
}

// Last finds etcd's greatest key not deleted by this transaction (a
// keys-only descending range: etcd sorts the bucket's keys in its index to
// answer it, so Last costs time in the bucket's size and belongs in rare
// calls, not on every write), then compares it with the buffered puts.
func (t *tx) Last(bucket []byte) ([]byte, []byte, error) {
	if err := t.bucket(bucket); err != nil {
		return nil, nil, err
	}
	first, end := t.bounds(bucket)
	var remote string
	cur := end
find:
	for {
		resp, err := t.rangeAt(first, clientv3.WithRange(cur), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(t.e.opts.ScanPage)))
		if err != nil {
			return nil, nil, t.readErr(err)
		}
		for _, kv := range resp.Kvs {
			if w, ok := t.writes[string(kv.Key)]; !ok || !w.del {
				remote = string(kv.Key)
				break find
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		cur = string(resp.Kvs[len(resp.Kvs)-1].Key)
	}
	var local string
	buf := t.buffered(first, end)
	for i := len(buf) - 1; i >= 0; i-- {
		if !t.writes[buf[i]].del {
			local = buf[i]
			break
		}
	}
	walkedFrom := first
	var val []byte
	if remote != "" {
		// The value, and a compare that fails if the key is deleted.
		r, err := t.fetch(remote, false)
		if err != nil {
			return nil, nil, err
		}
		walkedFrom, val = remote, r.val
	}
	if err := t.walked(walkedFrom, end); err != nil {
		return nil, nil, err
	}
	if local != "" && local >= remote {
		return []byte(local[len(first):]), t.writes[local].val, nil
	}
	if remote == "" {
		return nil, nil, nil
	}
	if val == nil {
		// Listed at the revision, absent at the same revision: etcd broke
		// its own snapshot.
		return nil, nil, engine.ErrCorrupt
	}
	return []byte(remote[len(first):]), val, nil
}
