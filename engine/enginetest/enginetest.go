// Package enginetest is the one conformance suite that every engine of the
// seam must pass: the same tests, run against each engine by its own test
// file.
package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/engine"
)

// NewEngine returns a fresh, empty engine that is closed when t ends,
// bounded by lim; a zero lim means the engine's defaults.
type NewEngine func(t *testing.T, lim engine.Limits) engine.Engine

var (
	bA = []byte("alpha")
	bB = []byte("alpha_b")
)

// Run runs the suite against the engines that newEngine makes.
func Run(t *testing.T, newEngine NewEngine) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, NewEngine)
	}{
		{"Buckets", testBuckets},
		{"InvalidKeys", testInvalidKeys},
		{"ReadYourWrites", testReadYourWrites},
		{"Delete", testDelete},
		{"ScanOrderAndBounds", testScan},
		{"ScanMergesOwnWrites", testScanOwnWrites},
		{"Last", testLast},
		{"ViewIsolation", testViewIsolation},
		{"ViewReadOnly", testViewReadOnly},
		{"FailedUpdateWritesNothing", testFailedUpdate},
		{"ConcurrentCounters", testCounters},
		{"RerunHarmless", testRerun},
		{"Prefetch", testPrefetch},
		{"PrefetchConcurrentCounters", testPrefetchCounters},
		{"Limits", testLimits},
		{"Context", testContext},
		{"Closed", testClosed},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newEngine) })
	}
}

// fresh returns an engine with the buckets alpha and alpha_b.
func fresh(t *testing.T, newEngine NewEngine, lim engine.Limits) engine.Engine {
	t.Helper()
	e := newEngine(t, lim)
	update(t, e, func(tx engine.Tx) error {
		if err := tx.CreateBucket(bA); err != nil {
			return err
		}
		return tx.CreateBucket(bB)
	})
	return e
}

func update(t *testing.T, e engine.Engine, fn func(engine.Tx) error) {
	t.Helper()
	if err := e.Update(context.Background(), fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

// get reads key of bucket in a View and copies it out.
func get(t *testing.T, e engine.Engine, bucket, key []byte) []byte {
	t.Helper()
	var out []byte
	err := e.View(context.Background(), func(tx engine.Tx) error {
		v, err := tx.Get(bucket, key)
		out = bytes.Clone(v)
		return err
	})
	if err != nil {
		t.Fatalf("View: %v", err)
	}
	return out
}

// scan returns the keys and values of bucket from from, copied.
func scan(t *testing.T, tx engine.Tx, bucket, from []byte) []string {
	t.Helper()
	var out []string
	err := tx.Scan(bucket, from, func(k, v []byte) error {
		out = append(out, string(k)+"="+string(v))
		return nil
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return out
}

func viewScan(t *testing.T, e engine.Engine, bucket, from []byte) []string {
	t.Helper()
	var out []string
	if err := e.View(context.Background(), func(tx engine.Tx) error { out = scan(t, tx, bucket, from); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// Ensure that buckets are created once, are told apart from absent ones,
// and that names outside the rules are refused.
func testBuckets(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	ctx := context.Background()
	if err := e.Update(ctx, func(tx engine.Tx) error { return tx.CreateBucket(bA) }); !errors.Is(err, engine.ErrBucketExists) {
		t.Fatalf("CreateBucket of an existing bucket = %v, want ErrBucketExists", err)
	}
	err := e.View(ctx, func(tx engine.Tx) error {
		for _, tc := range []struct {
			name string
			want bool
		}{{"alpha", true}, {"alpha_b", true}, {"alph", false}, {"beta", false}} {
			ok, err := tx.HasBucket([]byte(tc.name))
			if err != nil || ok != tc.want {
				t.Errorf("HasBucket(%q) = %v, %v; want %v", tc.name, ok, err, tc.want)
			}
		}
		for _, bad := range []string{"", "a/b", "a-b", "a.b", "é", string(bytes.Repeat([]byte("a"), engine.MaxBucketName+1))} {
			if _, err := tx.HasBucket([]byte(bad)); !errors.Is(err, engine.ErrInvalid) {
				t.Errorf("HasBucket(%q) = %v, want ErrInvalid", bad, err)
			}
		}
		missing := []byte("beta")
		if _, err := tx.Get(missing, []byte("k")); !errors.Is(err, engine.ErrBucketNotFound) {
			t.Errorf("Get in a missing bucket = %v", err)
		}
		if err := tx.Scan(missing, nil, func(k, v []byte) error { return nil }); !errors.Is(err, engine.ErrBucketNotFound) {
			t.Errorf("Scan of a missing bucket = %v", err)
		}
		if _, _, err := tx.Last(missing); !errors.Is(err, engine.ErrBucketNotFound) {
			t.Errorf("Last of a missing bucket = %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Update(ctx, func(tx engine.Tx) error { return tx.Put([]byte("beta"), []byte("k"), nil) }); !errors.Is(err, engine.ErrBucketNotFound) {
		t.Fatalf("Put in a missing bucket = %v", err)
	}
	if err := e.Update(ctx, func(tx engine.Tx) error { return tx.CreateBucket([]byte("a/b")) }); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("CreateBucket(a/b) = %v, want ErrInvalid", err)
	}
	// A bucket created in a transaction is usable in it.
	update(t, e, func(tx engine.Tx) error {
		if err := tx.CreateBucket([]byte("gamma")); err != nil {
			return err
		}
		if ok, err := tx.HasBucket([]byte("gamma")); !ok || err != nil {
			return fmt.Errorf("HasBucket of a bucket created in this transaction = %v, %v", ok, err)
		}
		return tx.Put([]byte("gamma"), []byte("k"), []byte("v"))
	})
	if v := get(t, e, []byte("gamma"), []byte("k")); string(v) != "v" {
		t.Fatalf("gamma/k = %q", v)
	}
	// Keys of one bucket never show in another, even where a name is the
	// other's prefix.
	update(t, e, func(tx engine.Tx) error {
		if err := tx.Put(bA, []byte("b/x"), []byte("1")); err != nil {
			return err
		}
		return tx.Put(bB, []byte("x"), []byte("2"))
	})
	if got := viewScan(t, e, bA, nil); !slices.Equal(got, []string{"b/x=1"}) {
		t.Fatalf("scan of alpha = %q", got)
	}
	if got := viewScan(t, e, bB, nil); !slices.Equal(got, []string{"x=2"}) {
		t.Fatalf("scan of alpha_b = %q", got)
	}
}

// Ensure that empty and oversized keys are refused.
func testInvalidKeys(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	for _, k := range [][]byte{nil, {}, make([]byte, engine.MaxKeySize+1)} {
		err := e.Update(context.Background(), func(tx engine.Tx) error { return tx.Put(bA, k, []byte("v")) })
		if !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("Put with a key of %d bytes = %v, want ErrInvalid", len(k), err)
		}
		err = e.View(context.Background(), func(tx engine.Tx) error { _, err := tx.Get(bA, k); return err })
		if !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("Get with a key of %d bytes = %v, want ErrInvalid", len(k), err)
		}
	}
	if got := viewScan(t, e, bA, nil); len(got) != 0 {
		t.Fatalf("refused puts wrote %q", got)
	}
}

// Ensure that a transaction sees its own writes, that a key written twice
// commits its last value, and that an empty value is present.
func testReadYourWrites(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	update(t, e, func(tx engine.Tx) error { return tx.Put(bA, []byte("old"), []byte("0")) })
	update(t, e, func(tx engine.Tx) error {
		for _, step := range []struct {
			put, want string
		}{{"1", "1"}, {"2", "2"}} {
			if err := tx.Put(bA, []byte("k"), []byte(step.put)); err != nil {
				return err
			}
			if v, err := tx.Get(bA, []byte("k")); err != nil || string(v) != step.want {
				return fmt.Errorf("Get after Put(%s) = %q, %v", step.put, v, err)
			}
		}
		if v, err := tx.Get(bA, []byte("old")); err != nil || string(v) != "0" {
			return fmt.Errorf("Get of a committed key = %q, %v", v, err)
		}
		if err := tx.Put(bA, []byte("old"), []byte("new")); err != nil {
			return err
		}
		if v, err := tx.Get(bA, []byte("old")); err != nil || string(v) != "new" {
			return fmt.Errorf("Get after overwriting a read key = %q, %v", v, err)
		}
		if err := tx.Put(bA, []byte("empty"), nil); err != nil {
			return err
		}
		if v, err := tx.Get(bA, []byte("empty")); err != nil || v == nil || len(v) != 0 {
			return fmt.Errorf("Get of an empty value in the transaction = %#v, %v", v, err)
		}
		if v, err := tx.Get(bA, []byte("absent")); err != nil || v != nil {
			return fmt.Errorf("Get of an absent key = %#v, %v", v, err)
		}
		return nil
	})
	if v := get(t, e, bA, []byte("k")); string(v) != "2" {
		t.Fatalf("committed k = %q, want 2", v)
	}
	if v := get(t, e, bA, []byte("old")); string(v) != "new" {
		t.Fatalf("committed old = %q, want new", v)
	}
	err := e.View(context.Background(), func(tx engine.Tx) error {
		v, err := tx.Get(bA, []byte("empty"))
		if err != nil || v == nil || len(v) != 0 {
			return fmt.Errorf("committed empty value = %#v, %v", v, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Ensure that Delete removes a key, in the transaction and once committed,
// and that deleting an absent key is not an error.
func testDelete(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	update(t, e, func(tx engine.Tx) error {
		for _, k := range []string{"a", "b", "c"} {
			if err := tx.Put(bA, []byte(k), []byte(k)); err != nil {
				return err
			}
		}
		return nil
	})
	update(t, e, func(tx engine.Tx) error {
		if err := tx.Delete(bA, []byte("b")); err != nil {
			return err
		}
		if err := tx.Delete(bA, []byte("never")); err != nil {
			return fmt.Errorf("Delete of an absent key: %w", err)
		}
		if v, err := tx.Get(bA, []byte("b")); err != nil || v != nil {
			return fmt.Errorf("Get after Delete = %q, %v", v, err)
		}
		// Put after Delete in one transaction: the last write wins.
		if err := tx.Delete(bA, []byte("c")); err != nil {
			return err
		}
		return tx.Put(bA, []byte("c"), []byte("again"))
	})
	if got := viewScan(t, e, bA, nil); !slices.Equal(got, []string{"a=a", "c=again"}) {
		t.Fatalf("after deletes: %q", got)
	}
}

// scanKeys are stored by testScan; their order is bytewise.
var scanKeys = []string{"\x00", "\x00\x00", "/", "0", "a", "a\x00", "a/", "ab", "b", "\xff", "\xff\xff"}

// Ensure that Scan returns keys in bytewise order from its start, across
// pages, and stops when told.
func testScan(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	// Stored in an order that is not the key order, with enough keys to
	// fill several pages of an engine that pages.
	var all []string
	for i := 0; i < 40; i++ {
		all = append(all, fmt.Sprintf("n%03d", (i*17)%40))
	}
	all = append(all, scanKeys...)
	update(t, e, func(tx engine.Tx) error {
		for _, k := range all {
			if err := tx.Put(bA, []byte(k), []byte("v"+k)); err != nil {
				return err
			}
		}
		return nil
	})
	sorted := slices.Clone(all)
	slices.Sort(sorted)
	pairs := func(ks []string) []string {
		var out []string
		for _, k := range ks {
			out = append(out, k+"=v"+k)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		from []byte
		want []string
	}{
		{"all", nil, pairs(sorted)},
		{"empty from", []byte{}, pairs(sorted)},
		{"present key", []byte("a"), pairs(sorted[slices.Index(sorted, "a"):])},
		{"between keys", []byte("a\x00\x00"), pairs(sorted[slices.Index(sorted, "a/"):])},
		{"middle of pages", []byte("n020"), pairs(sorted[slices.Index(sorted, "n020"):])},
		{"last key", []byte("\xff\xff"), pairs([]string{"\xff\xff"})},
		{"past the end", []byte("\xff\xff\x00"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := viewScan(t, e, bA, tc.from); !slices.Equal(got, tc.want) {
				t.Fatalf("Scan from %q =\n%q\nwant\n%q", tc.from, got, tc.want)
			}
		})
	}
	// StopScan ends a scan without error; another error is returned.
	err := e.View(context.Background(), func(tx engine.Tx) error {
		var seen []string
		err := tx.Scan(bA, []byte("n"), func(k, v []byte) error {
			seen = append(seen, string(k))
			if len(seen) == 3 {
				return engine.StopScan
			}
			return nil
		})
		if err != nil || !slices.Equal(seen, []string{"n000", "n001", "n002"}) {
			return fmt.Errorf("stopped scan = %q, %v", seen, err)
		}
		boom := errors.New("boom")
		if err := tx.Scan(bA, nil, func(k, v []byte) error { return boom }); err != boom {
			return fmt.Errorf("scan whose function failed = %v, want its error", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Ensure that a scan in a transaction sees the transaction's own puts and
// deletes, in order.
func testScanOwnWrites(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	update(t, e, func(tx engine.Tx) error {
		for _, k := range []string{"b", "d", "f", "h"} {
			if err := tx.Put(bA, []byte(k), []byte("old")); err != nil {
				return err
			}
		}
		return nil
	})
	update(t, e, func(tx engine.Tx) error {
		for _, w := range []struct{ k, v string }{{"a", "new"}, {"d", "new"}, {"e", "new"}, {"z", "new"}} {
			if err := tx.Put(bA, []byte(w.k), []byte(w.v)); err != nil {
				return err
			}
		}
		if err := tx.Delete(bA, []byte("f")); err != nil {
			return err
		}
		want := []string{"a=new", "b=old", "d=new", "e=new", "h=old", "z=new"}
		if got := scan(t, tx, bA, nil); !slices.Equal(got, want) {
			return fmt.Errorf("scan in the transaction = %q, want %q", got, want)
		}
		if got := scan(t, tx, bA, []byte("c")); !slices.Equal(got, want[2:]) {
			return fmt.Errorf("scan from c in the transaction = %q, want %q", got, want[2:])
		}
		return nil
	})
	if got := viewScan(t, e, bA, nil); !slices.Equal(got, []string{"a=new", "b=old", "d=new", "e=new", "h=old", "z=new"}) {
		t.Fatalf("committed: %q", got)
	}
}

// Ensure that Last returns the greatest key, seeing the transaction's own
// writes, and nothing for an empty bucket.
func testLast(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	last := func(tx engine.Tx) (string, error) {
		k, v, err := tx.Last(bA)
		if k == nil {
			return "<none>", err
		}
		return string(k) + "=" + string(v), err
	}
	update(t, e, func(tx engine.Tx) error {
		if got, err := last(tx); err != nil || got != "<none>" {
			return fmt.Errorf("Last of an empty bucket = %q, %v", got, err)
		}
		for i := 1; i <= 20; i++ {
			if err := tx.Put(bA, fmt.Appendf(nil, "%08d", i), []byte("v")); err != nil {
				return err
			}
		}
		if got, err := last(tx); err != nil || got != "00000020=v" {
			return fmt.Errorf("Last over uncommitted puts = %q, %v", got, err)
		}
		return nil
	})
	update(t, e, func(tx engine.Tx) error {
		if got, err := last(tx); err != nil || got != "00000020=v" {
			return fmt.Errorf("Last = %q, %v", got, err)
		}
		// Deleting the last keys moves Last back past them.
		for i := 20; i > 12; i-- {
			if err := tx.Delete(bA, fmt.Appendf(nil, "%08d", i)); err != nil {
				return err
			}
		}
		if got, err := last(tx); err != nil || got != "00000012=v" {
			return fmt.Errorf("Last after deletes = %q, %v", got, err)
		}
		if err := tx.Put(bA, []byte("00000013"), []byte("w")); err != nil {
			return err
		}
		if got, err := last(tx); err != nil || got != "00000013=w" {
			return fmt.Errorf("Last after a new put = %q, %v", got, err)
		}
		return nil
	})
	err := e.View(context.Background(), func(tx engine.Tx) error {
		if got, err := last(tx); err != nil || got != "00000013=w" {
			return fmt.Errorf("committed Last = %q, %v", got, err)
		}
		if k, _, err := tx.Last(bB); err != nil || k != nil {
			return fmt.Errorf("Last of another, empty bucket = %q, %v", k, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Ensure that a View sees one state: an Update committed while it runs is
// not seen by its later reads, and is seen by the next View.
func testViewIsolation(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	update(t, e, func(tx engine.Tx) error { return tx.Put(bA, []byte("x"), []byte("0")) })
	started := make(chan struct{})
	committed := make(chan error, 1)
	var once sync.Once
	var x, y []byte
	var scanned []string
	err := e.View(context.Background(), func(tx engine.Tx) error {
		v, err := tx.Get(bA, []byte("x"))
		if err != nil {
			return err
		}
		x = bytes.Clone(v)
		once.Do(func() {
			close(started)
			go func() {
				committed <- e.Update(context.Background(), func(tx engine.Tx) error {
					if err := tx.Put(bA, []byte("x"), []byte("1")); err != nil {
						return err
					}
					return tx.Put(bA, []byte("y"), []byte("1"))
				})
			}()
			select {
			case err := <-committed:
				committed <- err
			case <-time.After(5 * time.Second):
				t.Error("an Update could not commit while a View was open")
			}
		})
		v, err = tx.Get(bA, []byte("y"))
		if err != nil {
			return err
		}
		y = bytes.Clone(v)
		scanned = scan(t, tx, bA, nil)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if string(x) != "0" || y != nil || !slices.Equal(scanned, []string{"x=0"}) {
		t.Fatalf("View saw x=%q y=%q scan %q, want x=0, no y, scan [x=0]", x, y, scanned)
	}
	if got := viewScan(t, e, bA, nil); !slices.Equal(got, []string{"x=1", "y=1"}) {
		t.Fatalf("the next View saw %q", got)
	}
}

// Ensure that a View refuses every write.
func testViewReadOnly(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	err := e.View(context.Background(), func(tx engine.Tx) error {
		for name, err := range map[string]error{
			"Put":          tx.Put(bA, []byte("k"), []byte("v")),
			"Delete":       tx.Delete(bA, []byte("k")),
			"CreateBucket": tx.CreateBucket([]byte("gamma")),
		} {
			if !errors.Is(err, engine.ErrReadOnly) {
				t.Errorf("%s in a View = %v, want ErrReadOnly", name, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := viewScan(t, e, bA, nil); len(got) != 0 {
		t.Fatalf("a View wrote %q", got)
	}
}

// Ensure that an Update whose function fails writes nothing, not even the
// writes made before the failure.
func testFailedUpdate(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	update(t, e, func(tx engine.Tx) error { return tx.Put(bA, []byte("keep"), []byte("1")) })
	boom := errors.New("boom")
	err := e.Update(context.Background(), func(tx engine.Tx) error {
		if err := tx.Put(bA, []byte("k"), []byte("v")); err != nil {
			return err
		}
		if err := tx.Put(bA, []byte("keep"), []byte("2")); err != nil {
			return err
		}
		if err := tx.Delete(bA, []byte("keep")); err != nil {
			return err
		}
		if err := tx.CreateBucket([]byte("gamma")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want the function's error", err)
	}
	if got := viewScan(t, e, bA, nil); !slices.Equal(got, []string{"keep=1"}) {
		t.Fatalf("after a failed Update: %q", got)
	}
	err = e.View(context.Background(), func(tx engine.Tx) error {
		if ok, err := tx.HasBucket([]byte("gamma")); ok || err != nil {
			return fmt.Errorf("a failed Update created a bucket: %v, %v", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Ensure that concurrent read-modify-write transactions lose no update:
// the counters end at the number of Updates that succeeded, and an Update
// fails only with ErrConflict.
func testCounters(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	const workers, each = 4, 15
	var ok atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				err := e.Update(context.Background(), func(tx engine.Tx) error {
					// Two counters in one transaction: both move or neither.
					for _, k := range []string{"n", fmt.Sprint("w", w)} {
						v, err := tx.Get(bA, []byte(k))
						if err != nil {
							return err
						}
						if err := tx.Put(bA, []byte(k), fmt.Append(nil, atoiOrZero(v)+1)); err != nil {
							return err
						}
					}
					return nil
				})
				switch {
				case err == nil:
					ok.Add(1)
				case !errors.Is(err, engine.ErrConflict):
					t.Errorf("Update = %v", err)
				}
			}
		})
	}
	wg.Wait()
	n := atoiOrZero(get(t, e, bA, []byte("n")))
	sum := 0
	for w := range workers {
		sum += atoiOrZero(get(t, e, bA, fmt.Append(nil, "w", w)))
	}
	if n != int(ok.Load()) || sum != n || n == 0 {
		t.Fatalf("counter %d, per-worker sum %d, successful Updates %d", n, sum, ok.Load())
	}
	t.Logf("%d of %d increments succeeded", n, workers*each)
}

// Ensure that a function that runs more than once, as the seam allows, and
// assigns its results on every run, leaves exactly one run's effect.
func testRerun(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	var runs atomic.Int64
	const workers, each = 3, 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[int]bool{}
	for range workers {
		wg.Go(func() {
			for range each {
				var got int
				err := e.Update(context.Background(), func(tx engine.Tx) error {
					runs.Add(1)
					v, err := tx.Get(bA, []byte("seq"))
					if err != nil {
						return err
					}
					got = atoiOrZero(v) + 1
					if err := tx.Put(bA, fmt.Append(nil, "entry", got), []byte("x")); err != nil {
						return err
					}
					return tx.Put(bA, []byte("seq"), fmt.Append(nil, got))
				})
				if err != nil {
					if !errors.Is(err, engine.ErrConflict) {
						t.Errorf("Update = %v", err)
					}
					continue
				}
				mu.Lock()
				if seen[got] {
					t.Errorf("two Updates were handed seq %d", got)
				}
				seen[got] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	entries := viewScan(t, e, bA, []byte("entry"))
	if seq := atoiOrZero(get(t, e, bA, []byte("seq"))); len(entries) != seq+1 || len(seen) != seq {
		t.Fatalf("seq %d, %d entries stored (with seq), %d handed out", seq, len(entries), len(seen))
	}
	t.Logf("%d runs for %d commits", runs.Load(), len(seen))
}

// Ensure that a prefetch (engine.Prefetch: a Prefetcher's, or nothing)
// changes no answer: Get returns after it what it returns without it, for a
// present, an empty and an absent key and one of another bucket, a write of
// the transaction wins over a prefetched value and a later prefetch, and a
// bad key or bucket is refused as Get refuses it.
func testPrefetch(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	update(t, e, func(tx engine.Tx) error {
		if err := tx.Put(bA, []byte("k"), []byte("1")); err != nil {
			return err
		}
		if err := tx.Put(bA, []byte("empty"), nil); err != nil {
			return err
		}
		return tx.Put(bB, []byte("k"), []byte("b"))
	})
	keys := []engine.Key{{Bucket: bA, Key: []byte("k")}, {Bucket: bA, Key: []byte("empty")},
		{Bucket: bA, Key: []byte("absent")}, {Bucket: bB, Key: []byte("k")}, {Bucket: bA, Key: []byte("k")}}
	check := func(tx engine.Tx) error {
		for _, c := range []struct {
			bucket []byte
			key    string
			want   []byte
		}{{bA, "k", []byte("1")}, {bA, "empty", []byte{}}, {bA, "absent", nil}, {bB, "k", []byte("b")}} {
			v, err := tx.Get(c.bucket, []byte(c.key))
			if err != nil || !bytes.Equal(v, c.want) || (v == nil) != (c.want == nil) {
				return fmt.Errorf("Get(%s, %s) after a prefetch = %#v, %v; want %#v", c.bucket, c.key, v, err, c.want)
			}
		}
		return nil
	}
	if err := e.View(context.Background(), func(tx engine.Tx) error {
		if err := engine.Prefetch(tx, keys...); err != nil {
			return err
		}
		return check(tx)
	}); err != nil {
		t.Fatal(err)
	}
	update(t, e, func(tx engine.Tx) error {
		if err := tx.Put(bA, []byte("absent"), []byte("mine")); err != nil {
			return err
		}
		if err := engine.Prefetch(tx, keys...); err != nil {
			return err
		}
		if v, err := tx.Get(bA, []byte("absent")); err != nil || string(v) != "mine" {
			return fmt.Errorf("Get of a key written before its prefetch = %q, %v", v, err)
		}
		if err := tx.Put(bA, []byte("k"), []byte("2")); err != nil {
			return err
		}
		if err := engine.Prefetch(tx, keys...); err != nil {
			return err
		}
		if v, err := tx.Get(bA, []byte("k")); err != nil || string(v) != "2" {
			return fmt.Errorf("Get of a prefetched key written after its prefetch = %q, %v", v, err)
		}
		return nil
	})
	if v := get(t, e, bA, []byte("absent")); string(v) != "mine" {
		t.Fatalf("committed absent = %q, want mine", v)
	}
	err := e.View(context.Background(), func(tx engine.Tx) error {
		return engine.Prefetch(tx, engine.Key{Bucket: bA, Key: nil})
	})
	// Without a Prefetcher nothing is read ahead, and Get refuses later.
	if isPrefetcher(t, e) && !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("Prefetch of an empty key = %v, want ErrInvalid", err)
	}
	err = e.View(context.Background(), func(tx engine.Tx) error {
		return engine.Prefetch(tx, engine.Key{Bucket: []byte("nobucket"), Key: []byte("k")})
	})
	if isPrefetcher(t, e) && !errors.Is(err, engine.ErrBucketNotFound) {
		t.Errorf("Prefetch in a missing bucket = %v, want ErrBucketNotFound", err)
	}
}

// isPrefetcher reports whether e's transactions are Prefetchers.
func isPrefetcher(t *testing.T, e engine.Engine) bool {
	t.Helper()
	var ok bool
	if err := e.View(context.Background(), func(tx engine.Tx) error {
		_, ok = tx.(engine.Prefetcher)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ok
}

// Ensure that concurrent read-modify-write transactions that prefetch what
// they read lose no update: a prefetched value is compared at the commit
// like a Get's, so a transaction whose prefetched key another writer
// changed runs again instead of committing on the old value.
func testPrefetchCounters(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	const workers, each = 4, 15
	var ok atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			mine := fmt.Append(nil, "w", w)
			for range each {
				err := e.Update(context.Background(), func(tx engine.Tx) error {
					if err := engine.Prefetch(tx, engine.Key{Bucket: bA, Key: []byte("n")}, engine.Key{Bucket: bA, Key: mine}); err != nil {
						return err
					}
					for _, k := range [][]byte{[]byte("n"), mine} {
						v, err := tx.Get(bA, k)
						if err != nil {
							return err
						}
						if err := tx.Put(bA, k, fmt.Append(nil, atoiOrZero(v)+1)); err != nil {
							return err
						}
					}
					return nil
				})
				switch {
				case err == nil:
					ok.Add(1)
				case !errors.Is(err, engine.ErrConflict):
					t.Errorf("Update = %v", err)
				}
			}
		})
	}
	wg.Wait()
	n := atoiOrZero(get(t, e, bA, []byte("n")))
	sum := 0
	for w := range workers {
		sum += atoiOrZero(get(t, e, bA, fmt.Append(nil, "w", w)))
	}
	if n != int(ok.Load()) || sum != n || n == 0 {
		t.Fatalf("counter %d, per-worker sum %d, successful Updates %d", n, sum, ok.Load())
	}
	t.Logf("%d of %d increments succeeded; prefetcher: %v", n, workers*each, isPrefetcher(t, e))
}

func atoiOrZero(v []byte) int {
	n := 0
	for _, c := range v {
		n = n*10 + int(c-'0')
	}
	return n
}

// Ensure that an Update beyond the limits fails with ErrTxnTooLarge and
// writes nothing, even if its function ignores the error.
func testLimits(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{MaxOps: 8, MaxBytes: 4096})
	lim := e.Limits()
	if lim.MaxOps != 8 || lim.MaxBytes <= 0 || lim.MaxBytes > 4096 {
		t.Fatalf("Limits() = %+v", lim)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		fn   func(tx engine.Tx) error
	}{
		{"ops", func(tx engine.Tx) error {
			for i := range 9 {
				if err := tx.Put(bA, fmt.Append(nil, "k", i), []byte("v")); err != nil {
					return err
				}
			}
			return nil
		}},
		{"ops ignored", func(tx engine.Tx) error {
			for i := range 9 {
				tx.Put(bA, fmt.Append(nil, "k", i), []byte("v"))
			}
			return nil
		}},
		{"bytes", func(tx engine.Tx) error {
			if err := tx.Put(bA, []byte("small"), []byte("v")); err != nil {
				return err
			}
			return tx.Put(bA, []byte("big"), make([]byte, 4096))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.Update(ctx, tc.fn); !errors.Is(err, engine.ErrTxnTooLarge) {
				t.Fatalf("Update = %v, want ErrTxnTooLarge", err)
			}
			if got := viewScan(t, e, bA, nil); len(got) != 0 {
				t.Fatalf("a refused Update wrote %q", got)
			}
		})
	}
	// Within the limits the same writes pass.
	update(t, e, func(tx engine.Tx) error {
		for i := range 4 {
			if err := tx.Put(bA, fmt.Append(nil, "k", i), make([]byte, 256)); err != nil {
				return err
			}
		}
		return nil
	})
	if got := viewScan(t, e, bA, nil); len(got) != 4 {
		t.Fatalf("%d keys after an Update within the limits", len(got))
	}
}

// Ensure that an Update with a context already ended writes nothing and
// returns the context's error.
func testContext(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := e.Update(ctx, func(tx engine.Tx) error { return tx.Put(bA, []byte("k"), []byte("v")) })
	if !errors.Is(err, context.Canceled) || errors.Is(err, engine.ErrOutcomeUnknown) {
		t.Fatalf("Update with a canceled context = %v", err)
	}
	if got := viewScan(t, e, bA, nil); len(got) != 0 {
		t.Fatalf("wrote %q", got)
	}
}

// Ensure that a closed engine refuses work with ErrClosed.
func testClosed(t *testing.T, newEngine NewEngine) {
	e := fresh(t, newEngine, engine.Limits{})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Update(context.Background(), func(tx engine.Tx) error { return nil }); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Update after Close = %v", err)
	}
	if err := e.View(context.Background(), func(tx engine.Tx) error { return nil }); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("View after Close = %v", err)
	}
}
