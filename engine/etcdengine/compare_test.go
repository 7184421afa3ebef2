package etcdengine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/engine"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var bk = []byte("b")

// setup returns an engine with bucket b holding keys, and a second engine
// on the same prefix, the other writer.
func setup(t *testing.T, keys ...string) (*Engine, *Engine) {
	e := newEngine(t, sharedSingle(t), Options{ScanPage: 2})
	other := newEngine(t, sharedSingle(t), Options{Prefix: e.prefix})
	err := e.Update(context.Background(), func(tx engine.Tx) error {
		if err := tx.CreateBucket(bk); err != nil {
			return err
		}
		for _, k := range keys {
			if err := tx.Put(bk, []byte(k), []byte("v")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return e, other
}

// interfered runs an Update whose first run reads with read, then lets
// the other writer run write, then writes a key of its own; it returns
// how often the function ran.
func interfered(t *testing.T, e, other *Engine, read func(engine.Tx) error, write func(engine.Tx) error) int {
	t.Helper()
	runs := 0
	err := e.Update(context.Background(), func(tx engine.Tx) error {
		runs++
		if err := read(tx); err != nil {
			return err
		}
		if runs == 1 {
			if err := other.Update(context.Background(), write); err != nil {
				return fmt.Errorf("the other writer: %w", err)
			}
		}
		return tx.Put(bk, []byte("mine"), []byte("x"))
	})
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

func put(k string) func(engine.Tx) error {
	return func(tx engine.Tx) error { return tx.Put(bk, []byte(k), []byte("other")) }
}

func del(k string) func(engine.Tx) error {
	return func(tx engine.Tx) error { return tx.Delete(bk, []byte(k)) }
}

// scanUntil scans from from and stops after the key stop.
func scanUntil(from, stop string) func(engine.Tx) error {
	return func(tx engine.Tx) error {
		return tx.Scan(bk, []byte(from), func(k, v []byte) error {
			if string(k) == stop {
				return engine.StopScan
			}
			return nil
		})
	}
}

func get(k string) func(engine.Tx) error {
	return func(tx engine.Tx) error { _, err := tx.Get(bk, []byte(k)); return err }
}

func last(tx engine.Tx) error { _, _, err := tx.Last(bk); return err }

// Ensure that a commit fails, and the function runs again, exactly when
// another writer changed what it read: point reads (present and absent
// keys), the walked range of a scan (creations, changes and deletions),
// and the tail of the bucket that Last looked at.
func TestCompares(t *testing.T) {
	for _, tc := range []struct {
		name  string
		read  func(engine.Tx) error
		write func(engine.Tx) error
		runs  int
	}{
		{"get, key changed", get("c"), put("c"), 2},
		{"get, key deleted", get("c"), del("c"), 2},
		{"get of an absent key, key created", get("x"), put("x"), 2},
		{"get, another key changed", get("c"), put("e"), 1},
		{"scan, key created in range", scanUntil("a", "e"), put("d0"), 2},
		{"scan, key changed in range", scanUntil("a", "e"), put("c"), 2},
		{"scan, key deleted in range", scanUntil("a", "e"), del("c"), 2},
		{"scan, key deleted elsewhere in the bucket (one marker per bucket)", scanUntil("c", "e"), del("a"), 2},
		{"scan, key created before range", scanUntil("c", "e"), put("b0"), 1},
		{"scan, key created after the stop", scanUntil("a", "c"), put("d0"), 1},
		{"scan, key changed after the stop", scanUntil("a", "c"), put("e"), 1},
		{"scan to the end, key created at the end", scanUntil("a", ""), put("z"), 2},
		{"last, key created after it", last, put("z"), 2},
		{"last, last key deleted", last, del("g"), 2},
		{"last, last key changed", last, put("g"), 2},
		{"last, earlier key changed", last, put("a"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, other := setup(t, "a", "c", "e", "g")
			if runs := interfered(t, e, other, tc.read, tc.write); runs != tc.runs {
				t.Fatalf("the function ran %d times, want %d", runs, tc.runs)
			}
		})
	}
}

// Ensure that an Update whose every run meets a conflict gives up after
// MaxAttempts runs with ErrConflict and writes nothing.
func TestConflictBound(t *testing.T) {
	e, other := setup(t, "c")
	e.opts.MaxAttempts = 3
	runs := 0
	err := e.Update(context.Background(), func(tx engine.Tx) error {
		runs++
		if _, err := tx.Get(bk, []byte("c")); err != nil {
			return err
		}
		if err := other.Update(context.Background(), put("c")); err != nil {
			return err
		}
		return tx.Put(bk, []byte("mine"), []byte("x"))
	})
	if !errors.Is(err, engine.ErrConflict) || errors.Is(err, engine.ErrOutcomeUnknown) || runs != 3 {
		t.Fatalf("Update = %v after %d runs, want ErrConflict after 3", err, runs)
	}
	err = e.View(context.Background(), func(tx engine.Tx) error {
		if v, err := tx.Get(bk, []byte("mine")); v != nil || err != nil {
			return fmt.Errorf("a conflicted Update wrote: %q, %v", v, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Ensure that the engine's limits are within etcd's defaults: a Txn at the
// limits is accepted by a member with default --max-txn-ops and
// --max-request-bytes, and one beyond them is refused before it is sent.
func TestLimitsMatchEtcd(t *testing.T) {
	e, _ := setup(t)
	ctx := context.Background()
	lim := e.Limits()
	// The most compares and writes one Update may have: reads of
	// MaxOps-1 keys beside the bucket's marker, and MaxOps puts.
	err := e.Update(ctx, func(tx engine.Tx) error {
		for i := range lim.MaxOps - 1 {
			if _, err := tx.Get(bk, fmt.Appendf(nil, "r%03d", i)); err != nil {
				return err
			}
		}
		for i := range lim.MaxOps {
			if err := tx.Put(bk, fmt.Appendf(nil, "w%03d", i), []byte("v")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("an Update at MaxOps: %v", err)
	}
	// The largest value that fits the engine's estimate is accepted.
	key := []byte("big")
	full := len(e.prefix) + len(bk) + 1 + len(key)
	size := lim.MaxBytes - full - lim.OpOverhead
	if err := e.Update(ctx, func(tx engine.Tx) error { return tx.Put(bk, key, make([]byte, size)) }); err != nil {
		t.Fatalf("an Update of %d value bytes: %v", size, err)
	}
	for _, tc := range []struct {
		name string
		fn   func(engine.Tx) error
	}{
		{"one byte more", func(tx engine.Tx) error { return tx.Put(bk, key, make([]byte, size+1)) }},
		{"one write more", func(tx engine.Tx) error {
			for i := range lim.MaxOps + 1 {
				if err := tx.Put(bk, fmt.Appendf(nil, "x%03d", i), nil); err != nil {
					return err
				}
			}
			return nil
		}},
		{"one read more", func(tx engine.Tx) error {
			for i := range lim.MaxOps + 1 {
				if _, err := tx.Get(bk, fmt.Appendf(nil, "y%03d", i)); err != nil {
					return err
				}
			}
			return tx.Put(bk, []byte("x"), nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := e.Update(ctx, tc.fn)
			if !errors.Is(err, engine.ErrTxnTooLarge) {
				t.Fatalf("Update = %v, want ErrTxnTooLarge", err)
			}
			if errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) {
				t.Fatalf("etcd, not the engine, refused the Txn: %v", err)
			}
		})
	}
	// etcd's own refusal is ErrTxnTooLarge too: an engine that believes
	// the limits are larger than the cluster's.
	loose := newEngine(t, sharedSingle(t), Options{Prefix: e.prefix, MaxTxnOps: 1000})
	err = loose.Update(ctx, func(tx engine.Tx) error {
		for i := range 200 {
			if err := tx.Put(bk, fmt.Appendf(nil, "z%03d", i), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if !errors.Is(err, engine.ErrTxnTooLarge) || errors.Is(err, engine.ErrOutcomeUnknown) {
		t.Fatalf("a Txn etcd refuses as too large = %v", err)
	}
}

// Ensure that commit errors are sorted: refusals etcd gives before
// applying are not unknown outcomes; everything else after the send is.
func TestCommitErr(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error
	}{
		{context.DeadlineExceeded, engine.ErrOutcomeUnknown},
		{context.Canceled, engine.ErrOutcomeUnknown},
		{rpctypes.ErrLeaderChanged, engine.ErrOutcomeUnknown},
		{rpctypes.ErrNoLeader, engine.ErrOutcomeUnknown},
		{rpctypes.ErrTimeout, engine.ErrOutcomeUnknown},
		{rpctypes.ErrTimeoutDueToLeaderFail, engine.ErrOutcomeUnknown},
		{rpctypes.ErrStopped, engine.ErrOutcomeUnknown},
		{status.Error(codes.Unavailable, "connection reset"), engine.ErrOutcomeUnknown},
		{errors.New("raft: stopped"), engine.ErrOutcomeUnknown},
		{rpctypes.ErrTooManyOps, engine.ErrTxnTooLarge},
		{rpctypes.ErrRequestTooLarge, engine.ErrTxnTooLarge},
		{rpctypes.ErrPermissionDenied, nil},
		{rpctypes.ErrDuplicateKey, nil},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			got := commitErr(tc.err)
			if tc.want != nil && !errors.Is(got, tc.want) {
				t.Fatalf("commitErr = %v, want %v", got, tc.want)
			}
			if tc.want == nil && (errors.Is(got, engine.ErrOutcomeUnknown) || errors.Is(got, engine.ErrTxnTooLarge)) {
				t.Fatalf("commitErr of a refusal = %v", got)
			}
			if !errors.Is(got, tc.err) && !strings.Contains(got.Error(), tc.err.Error()) {
				t.Fatalf("commitErr lost the cause: %v", got)
			}
		})
	}
}

// Ensure that a prefix that does not start and end with '/' is refused.
func TestBadPrefix(t *testing.T) {
	for _, p := range []string{"kvfence", "/kvfence", "kvfence/"} {
		if _, err := New(nil, &Options{Prefix: p}); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("New with prefix %q = %v", p, err)
		}
	}
}

// failingKV fails every read of one key.
type failingKV struct {
	clientv3.KV
	key string
	err error
}

func (f failingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if key == f.key {
		return nil, f.err
	}
	return f.KV.Get(ctx, key, opts...)
}

// Ensure that an Update whose function goes on past a failed read, and
// returns nil, fails with the read's error and writes nothing: its
// decision rests on a read that the commit cannot compare.
func TestReadFailure(t *testing.T) {
	e, _ := setup(t, "a")
	broken := errors.New("connection lost")
	e.kv = failingKV{KV: e.kv, key: e.prefix + "b/flaky", err: broken}
	err := e.Update(context.Background(), func(tx engine.Tx) error {
		tx.Get(bk, []byte("flaky"))
		return tx.Put(bk, []byte("mine"), []byte("x"))
	})
	if !errors.Is(err, broken) || errors.Is(err, engine.ErrOutcomeUnknown) {
		t.Fatalf("Update = %v, want the read's error", err)
	}
	err = e.View(context.Background(), func(tx engine.Tx) error {
		if v, err := tx.Get(bk, []byte("mine")); v != nil || err != nil {
			return fmt.Errorf("an Update with a failed read wrote: %q, %v", v, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// behindKV answers the first read of one key as a member that has not yet
// applied the transaction's revision would.
type behindKV struct {
	clientv3.KV
	key   string
	calls *int
}

func (f behindKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if key == f.key {
		if *f.calls++; *f.calls == 1 {
			return nil, rpctypes.ErrFutureRev
		}
	}
	return f.KV.Get(ctx, key, opts...)
}

// Ensure that a read after the first, answered by a member behind the
// transaction's revision, is asked again and answered.
func TestReadBehindRevision(t *testing.T) {
	e, _ := setup(t, "a", "c")
	calls := 0
	e.kv = behindKV{KV: e.kv, key: e.prefix + "b/c", calls: &calls}
	var got []byte
	err := e.View(context.Background(), func(tx engine.Tx) error {
		if _, err := tx.Get(bk, []byte("a")); err != nil {
			return err
		}
		v, err := tx.Get(bk, []byte("c"))
		got = bytes.Clone(v)
		return err
	})
	if err != nil || string(got) != "v" || calls != 2 {
		t.Fatalf("View = %v, c = %q after %d reads; want v after 2", err, got, calls)
	}
}
