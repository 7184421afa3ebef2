package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/kvfence/kvfence/engine"
)

// prefetchGuarded prefetches compared keys and guarded keys under the
// guard "g".
func prefetchGuarded(compared []string, guarded ...string) func(engine.Tx) error {
	return func(tx engine.Tx) error {
		return tx.(engine.GuardedPrefetcher).PrefetchGuarded(keys(compared...), engine.Key{Bucket: bk, Key: []byte("g")}, keys(guarded...))
	}
}

// both writes each key in one transaction, as a writer that keeps a
// guard's contract writes a guarded key with its guard.
func both(ks ...string) func(engine.Tx) error {
	return func(tx engine.Tx) error {
		for _, k := range ks {
			if err := put(k)(tx); err != nil {
				return err
			}
		}
		return nil
	}
}

// Ensure that a guarded read fails the commit through its guard: another
// writer that changes, creates or deletes a guarded key together with the
// guard, or changes the guard alone, makes the function run again, as
// does a change of a compared key read in the same prefetch. A guarded key
// changed without its guard (a writer that breaks the contract) goes
// unseen: that is the compare the guard saves. With the guard absent, or
// a key read and compared before, nothing is saved and every change is
// seen.
func TestPrefetchGuardedCompares(t *testing.T) {
	for _, tc := range []struct {
		name  string
		keys  []string // present before the run
		read  func(engine.Tx) error
		write func(engine.Tx) error
		runs  int
	}{
		{"guarded key changed with the guard", []string{"g", "c"}, prefetchGuarded(nil, "c"), both("c", "g"), 2},
		{"guarded absent key created with the guard", []string{"g"}, prefetchGuarded(nil, "x"), both("x", "g"), 2},
		{"guarded key deleted with the guard", []string{"g", "c"}, prefetchGuarded(nil, "c"), func(tx engine.Tx) error {
			if err := del("c")(tx); err != nil {
				return err
			}
			return put("g")(tx)
		}, 2},
		{"guard changed alone", []string{"g", "c"}, prefetchGuarded(nil, "c"), put("g"), 2},
		{"compared key changed", []string{"g", "a", "c"}, prefetchGuarded([]string{"a"}, "c"), put("a"), 2},
		{"another key changed", []string{"g", "a", "c"}, prefetchGuarded([]string{"a"}, "c"), put("e"), 1},
		{"guarded key changed without the guard: unseen", []string{"g", "c"}, prefetchGuarded(nil, "c"), put("c"), 1},
		{"guard absent: guarded key compared itself", []string{"c"}, prefetchGuarded(nil, "c"), put("c"), 2},
		{"key read before keeps its compare", []string{"g", "c"}, func(tx engine.Tx) error {
			if err := get("c")(tx); err != nil {
				return err
			}
			return prefetchGuarded(nil, "c")(tx)
		}, put("c"), 2},
		{"guard written before: read from etcd and compared", []string{"g", "c"}, func(tx engine.Tx) error {
			if err := tx.Put(bk, []byte("g"), []byte("mine")); err != nil {
				return err
			}
			return prefetchGuarded(nil, "c")(tx)
		}, both("c", "g"), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, other := setup(t, tc.keys...)
			if runs := interfered(t, e, other, tc.read, tc.write); runs != tc.runs {
				t.Fatalf("the function ran %d times, want %d", runs, tc.runs)
			}
		})
	}
}

// Ensure that guarded reads cost no compares against the limits: with
// --max-txn-ops 4, an Update that reads six guarded keys and Gets them all
// commits, one Get after the prefetch sends nothing, and the same Update
// with the guard absent fails with ErrTxnTooLarge from a Get, as it would
// without the guard, having committed nothing.
func TestPrefetchGuardedLimits(t *testing.T) {
	ks := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	run := func(e *Engine) error {
		return e.Update(context.Background(), func(tx engine.Tx) error {
			if err := prefetchGuarded([]string{"a"}, ks...)(tx); err != nil {
				return err
			}
			for _, k := range ks {
				if err := get(k)(tx); err != nil {
					return err
				}
			}
			return tx.Put(bk, []byte("a"), []byte("x"))
		})
	}
	for _, tc := range []struct {
		name  string
		guard bool
		want  error
	}{{"guard present", true, nil}, {"guard absent", false, engine.ErrTxnTooLarge}} {
		t.Run(tc.name, func(t *testing.T) {
			present := []string{"a"}
			if tc.guard {
				present = append(present, "g")
			}
			e, _ := setup(t, present...)
			e.opts.MaxTxnOps = 4
			if err := run(e); !errors.Is(err, tc.want) {
				t.Fatalf("Update = %v, want %v", err, tc.want)
			}
			var a []byte
			if err := e.View(context.Background(), func(tx engine.Tx) (err error) {
				a, err = tx.Get(bk, []byte("a"))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if committed := string(a) == "x"; committed != (tc.want == nil) {
				t.Fatalf("a = %q after Update: committed %v, want %v", a, committed, tc.want == nil)
			}
		})
	}
}

// Ensure that successive guarded keys are read as one range, and what it
// finds is exactly what point reads would: with --max-txn-ops 4, twelve
// guarded keys k00…k11 (k03 and k07 present) and one compared key are
// read in one request, each present key with its value and each absent
// one absent. Keys no one named that lie in the range are not in the read
// set (a change of one fails nothing); more of them than the range's
// limit (the named keys' count) make its keys read again one by one, in
// three requests of four.
func TestPrefetchGuardedRuns(t *testing.T) {
	var guarded []string
	var unnamed []string
	for i := range 12 {
		guarded = append(guarded, fmt.Sprintf("k%02d", i))
		unnamed = append(unnamed, fmt.Sprintf("k05x%02d", i))
	}
	for _, tc := range []struct {
		name     string
		extra    []string
		requests int64
	}{
		{"nothing between", nil, 1},
		{"an unnamed key between", []string{"k05x"}, 1},
		{"more unnamed keys than named", unnamed, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, other := setup(t, append([]string{"g", "a", "k03", "k07"}, tc.extra...)...)
			e.opts.MaxTxnOps = 4
			if err := e.View(context.Background(), get("a")); err != nil {
				t.Fatal(err)
			}
			var n atomic.Int64
			e.kv = countingKV{KV: e.kv, n: &n}
			runs := 0
			err := e.Update(context.Background(), func(tx engine.Tx) error {
				runs++
				n.Store(0)
				if err := prefetchGuarded([]string{"a"}, guarded...)(tx); err != nil {
					return err
				}
				if got := n.Load(); runs == 1 && got != tc.requests {
					t.Errorf("the prefetch sent %d requests, want %d", got, tc.requests)
				}
				for _, k := range guarded {
					v, err := tx.Get(bk, []byte(k))
					if err != nil {
						return err
					}
					if want := (k == "k03" || k == "k07"); (v != nil) != want || want && string(v) != "v" {
						t.Errorf("%s = %q, want present %v", k, v, want)
					}
				}
				if got := n.Load(); runs == 1 && got != tc.requests {
					t.Errorf("the Gets after the prefetch sent %d requests", got-tc.requests)
				}
				if runs == 1 && tc.extra != nil {
					if err := other.Update(context.Background(), put(tc.extra[0])); err != nil {
						return err
					}
				}
				return tx.Put(bk, []byte("a"), []byte("x"))
			})
			if err != nil || runs != 1 {
				t.Fatalf("Update = %v after %d runs, want nil after 1", err, runs)
			}
		})
	}
}

// Ensure that successor finds exactly the next key of the same length, a
// carry included.
func TestSuccessor(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"\x00\x01", "\x00\x02", true},
		{"\x00\xff", "\x01\x00", true},
		{"\x00\xff", "\x00\x00", false},
		{"\x00\x01", "\x00\x03", false},
		{"\x00\x01", "\x00\x01", false},
		{"\x01", "\x00\x02", false},
		{"\xff", "\x00", false},
		{"a", "b", true},
	} {
		if got := successor([]byte(tc.a), []byte(tc.b)); got != tc.want {
			t.Errorf("successor(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
