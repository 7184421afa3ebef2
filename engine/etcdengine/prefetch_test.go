package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/kvfence/kvfence/engine"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func keys(ks ...string) []engine.Key {
	out := make([]engine.Key, len(ks))
	for i, k := range ks {
		out[i] = engine.Key{Bucket: bk, Key: []byte(k)}
	}
	return out
}

func prefetch(ks ...string) func(engine.Tx) error {
	return func(tx engine.Tx) error { return tx.(engine.Prefetcher).Prefetch(keys(ks...)...) }
}

// Ensure that a prefetched key is in the read set whether or not Get asks
// for it: a commit fails, and the function runs again, when another writer
// changed, deleted or created a key it prefetched, present or absent, and
// not when it changed another key.
func TestPrefetchCompares(t *testing.T) {
	for _, tc := range []struct {
		name  string
		read  func(engine.Tx) error
		write func(engine.Tx) error
		runs  int
	}{
		{"prefetch, key changed", prefetch("a", "c"), put("c"), 2},
		{"prefetch, key deleted", prefetch("a", "c"), del("c"), 2},
		{"prefetch of an absent key, key created", prefetch("a", "x"), put("x"), 2},
		{"prefetch, another key changed", prefetch("a", "c"), put("e"), 1},
		{"prefetch after a get, key changed", func(tx engine.Tx) error {
			if err := get("e")(tx); err != nil {
				return err
			}
			return prefetch("c")(tx)
		}, put("c"), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, other := setup(t, "a", "c", "e", "g")
			if runs := interfered(t, e, other, tc.read, tc.write); runs != tc.runs {
				t.Fatalf("the function ran %d times, want %d", runs, tc.runs)
			}
		})
	}
}

// Ensure that every read of one run is at one revision with a prefetch:
// a prefetch after the first read, sent after another writer committed,
// reads the state at the first read's revision, and a Get of a prefetched
// key that another writer changed since returns the prefetched value; the
// commit then fails and the next run sees the new values.
func TestPrefetchOneRevision(t *testing.T) {
	for _, first := range []string{"get", "prefetch"} {
		t.Run(first, func(t *testing.T) {
			e, other := setup(t, "a", "c")
			var seen []string
			err := e.Update(context.Background(), func(tx engine.Tx) error {
				var err error
				if first == "get" {
					_, err = tx.Get(bk, []byte("a"))
				} else {
					err = prefetch("a", "c")(tx)
				}
				if err != nil {
					return err
				}
				if len(seen) == 0 {
					if err := other.Update(context.Background(), func(tx engine.Tx) error {
						if err := put("a")(tx); err != nil {
							return err
						}
						return put("c")(tx)
					}); err != nil {
						return err
					}
				}
				if err := prefetch("c")(tx); err != nil {
					return err
				}
				a, err := tx.Get(bk, []byte("a"))
				if err != nil {
					return err
				}
				c, err := tx.Get(bk, []byte("c"))
				if err != nil {
					return err
				}
				seen = append(seen, string(a)+","+string(c))
				return tx.Put(bk, []byte("mine"), []byte("x"))
			})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(seen) != "[v,v other,other]" {
				t.Fatalf("runs saw %q, want the old values, then the new ones", seen)
			}
		})
	}
}

// countingKV counts the requests sent through it.
type countingKV struct {
	clientv3.KV
	n *atomic.Int64
}

func (k countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	k.n.Add(1)
	return k.KV.Get(ctx, key, opts...)
}

func (k countingKV) Txn(ctx context.Context) clientv3.Txn {
	k.n.Add(1)
	return k.KV.Txn(ctx)
}

// Ensure that a prefetch reads its keys in one request, that the Gets
// after it send none, and that the commit is the one request more.
func TestPrefetchOneRequest(t *testing.T) {
	e, _ := setup(t, "a", "c")
	// The bucket's marker is read once per engine.
	if err := e.View(context.Background(), get("a")); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	e.kv = countingKV{KV: e.kv, n: &n}
	for _, tc := range []struct {
		name     string
		prefetch bool
		want     int64
	}{{"without", false, 6}, {"with", true, 2}} {
		n.Store(0)
		err := e.Update(context.Background(), func(tx engine.Tx) error {
			ks := []string{"a", "c", "x", "y", "z"}
			if tc.prefetch {
				if err := prefetch(ks...)(tx); err != nil {
					return err
				}
			}
			for _, k := range ks {
				if err := get(k)(tx); err != nil {
					return err
				}
			}
			return tx.Put(bk, []byte("a"), []byte(tc.name))
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Load(); got != tc.want {
			t.Errorf("%s a prefetch: %d requests, want %d", tc.name, got, tc.want)
		}
	}
}

// Ensure that a prefetch beyond the compares an Update may make reads only
// what fits and fails nothing by itself: the Update that Gets no more than
// fits commits, and one that Gets every key fails with ErrTxnTooLarge as
// it does without a prefetch. A key named twice is read once.
func TestPrefetchLimits(t *testing.T) {
	e, _ := setup(t)
	e.opts.MaxTxnOps = 4
	if err := e.View(context.Background(), get("a")); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	e.kv = countingKV{KV: e.kv, n: &n}
	ks := []string{"k0", "k1", "k0", "k2", "k3", "k4", "k5", "k6"}
	err := e.Update(context.Background(), func(tx engine.Tx) error {
		if err := prefetch(ks...)(tx); err != nil {
			return err
		}
		for _, k := range ks[:3] {
			if err := get(k)(tx); err != nil {
				return err
			}
		}
		return tx.Put(bk, []byte("k0"), []byte("x"))
	})
	if err != nil || n.Load() != 2 {
		t.Fatalf("an Update that prefetches past the limits and Gets what fits: %v, %d requests", err, n.Load())
	}
	var perr error
	err = e.Update(context.Background(), func(tx engine.Tx) error {
		if perr = prefetch(ks...)(tx); perr != nil {
			return perr
		}
		for _, k := range ks {
			if err := get(k)(tx); err != nil {
				return err
			}
		}
		return tx.Put(bk, []byte("k0"), []byte("y"))
	})
	if !errors.Is(err, engine.ErrTxnTooLarge) || perr != nil {
		t.Fatalf("an Update that Gets past the limits after a prefetch = %v (prefetch: %v), want ErrTxnTooLarge from a Get", err, perr)
	}
}
