package boltengine

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kvfence/kvfence/engine"
	bolt "go.etcd.io/bbolt"
)

// keyN is the n-th key of the tests below, in ascending order.
func keyN(n int) []byte { return fmt.Appendf(nil, "k%05d", n) }

// filled returns an engine whose bucket "b" holds keys 0, 2, 4, ... below
// 2*n, over several pages, and whose bucket "c" holds one key.
func filled(t testing.TB, n int) *Engine { return filledWith(t, n, bolt.Options{}) }

// filledWith is filled on a database opened with bo.
func filledWith(t testing.TB, n int, bo bolt.Options) *Engine {
	e := newEngineWith(t, engine.Limits{}, bo)
	err := e.Update(context.Background(), func(tx engine.Tx) error {
		for _, b := range []string{"b", "c"} {
			if err := tx.CreateBucket([]byte(b)); err != nil {
				return err
			}
		}
		for i := 0; i < 2*n; i += 2 {
			if err := tx.Put([]byte("b"), keyN(i), bytes.Repeat([]byte{byte(i)}, 100)); err != nil {
				return err
			}
		}
		return tx.Put([]byte("c"), keyN(1), []byte("c1"))
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Ensure that Get, which reuses one cursor per bucket in a transaction,
// sees the transaction's own Puts and Deletes in that bucket at once,
// whatever the cursor was last positioned on, and that its answers in a
// View and after the commit are bbolt's own.
func TestGetSeesOwnWrites(t *testing.T) {
	e := filled(t, 500)
	b, c := []byte("b"), []byte("c")
	steps := []struct {
		op       string // "get", "put", "del", "last"
		bucket   []byte
		key      int
		val      string // put: the value; get: the value expected
		absent   bool   // get: the key is expected absent
		wantLast int
	}{
		{op: "get", bucket: b, key: 10, val: string(bytes.Repeat([]byte{10}, 100))},
		{op: "put", bucket: b, key: 10, val: "ten"},
		{op: "get", bucket: b, key: 10, val: "ten"},
		{op: "get", bucket: b, key: 11, absent: true},
		{op: "put", bucket: b, key: 11, val: "eleven"},
		{op: "get", bucket: b, key: 11, val: "eleven"},
		{op: "get", bucket: c, key: 1, val: "c1"},
		// c is small enough that bbolt keeps it inline in its parent.
		{op: "get", bucket: c, key: 3, absent: true},
		{op: "put", bucket: c, key: 3, val: "c3"},
		{op: "get", bucket: c, key: 3, val: "c3"},
		{op: "del", bucket: c, key: 1},
		{op: "get", bucket: c, key: 1, absent: true},
		{op: "get", bucket: b, key: 11, val: "eleven"},
		{op: "del", bucket: b, key: 11},
		{op: "get", bucket: b, key: 11, absent: true},
		{op: "get", bucket: b, key: 10, val: "ten"},
		{op: "del", bucket: b, key: 10},
		{op: "get", bucket: b, key: 10, absent: true},
		{op: "get", bucket: b, key: 12, val: string(bytes.Repeat([]byte{12}, 100))},
		{op: "last", bucket: b, wantLast: 998},
		{op: "get", bucket: b, key: 5000, absent: true},
		{op: "put", bucket: b, key: 5000, val: "last"},
		{op: "last", bucket: b, wantLast: 5000},
		{op: "get", bucket: b, key: 5000, val: "last"},
		{op: "get", bucket: b, key: 999, absent: true},
		{op: "put", bucket: b, key: 999, val: ""},
		{op: "get", bucket: b, key: 999, val: ""},
		{op: "del", bucket: b, key: 5000},
		{op: "get", bucket: b, key: 5000, absent: true},
		{op: "last", bucket: b, wantLast: 999},
	}
	// want is what each key holds after the steps, for the later reads.
	want := map[string]map[int]*string{"b": {}, "c": {}}
	err := e.Update(context.Background(), func(tx engine.Tx) error {
		for i, s := range steps {
			switch s.op {
			case "get":
				v, err := tx.Get(s.bucket, keyN(s.key))
				if err != nil {
					return err
				}
				if v == nil != s.absent || string(v) != s.val {
					return fmt.Errorf("step %d: Get(%s, %d) = %q (nil %v), want %q", i, s.bucket, s.key, v, v == nil, s.val)
				}
			case "put":
				if err := tx.Put(s.bucket, keyN(s.key), []byte(s.val)); err != nil {
					return err
				}
				want[string(s.bucket)][s.key] = &s.val
			case "del":
				if err := tx.Delete(s.bucket, keyN(s.key)); err != nil {
					return err
				}
				want[string(s.bucket)][s.key] = nil
			case "last":
				k, _, err := tx.Last(s.bucket)
				if err != nil || !bytes.Equal(k, keyN(s.wantLast)) {
					return fmt.Errorf("step %d: Last(%s) = %q, %v, want %q", i, s.bucket, k, err, keyN(s.wantLast))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = e.View(context.Background(), func(tx engine.Tx) error {
		for bucket, keys := range want {
			for k, v := range keys {
				got, err := tx.Get([]byte(bucket), keyN(k))
				if err != nil {
					return err
				}
				if v == nil && got != nil || v != nil && (got == nil || string(got) != *v) {
					return fmt.Errorf("committed %s/%d = %q, want %v", bucket, k, got, v)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Ensure that a key naming a nested bucket (which the seam never makes,
// but a file may hold) reads as absent, as bbolt's Bucket.Get has it,
// wherever the reused cursor stood before, while its neighbours read.
func TestGetNestedBucketIsAbsent(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "n.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := New(db, nil)
	defer e.Close()
	err = db.Update(func(btx *bolt.Tx) error {
		b, err := btx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		sub, err := b.CreateBucket([]byte("sub"))
		if err != nil {
			return err
		}
		if err := sub.Put([]byte("x"), []byte("inner")); err != nil {
			return err
		}
		for _, k := range []string{"su", "subz", "a"} {
			if err := b.Put([]byte(k), []byte("v-"+k)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(tx engine.Tx) error {
		for _, k := range []string{"a", "sub", "su", "sub", "subz", "sub", "x"} {
			v, err := tx.Get([]byte("b"), []byte(k))
			if err != nil {
				return err
			}
			want := "v-" + k
			if k == "sub" || k == "x" {
				want = ""
			}
			if string(v) != want || (want == "") != (v == nil) {
				return fmt.Errorf("Get(b, %q) = %q, want %q", k, v, want)
			}
		}
		return nil
	}
	if err := e.View(context.Background(), check); err != nil {
		t.Fatal("View:", err)
	}
	if err := e.Update(context.Background(), func(tx engine.Tx) error {
		if err := tx.Put([]byte("b"), []byte("subb"), []byte("v-subb")); err != nil {
			return err
		}
		return check(tx)
	}); err != nil {
		t.Fatal("Update:", err)
	}
}
