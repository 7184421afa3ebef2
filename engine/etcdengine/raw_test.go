package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/engine"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// rawClient is a plain client of the shared member, closed with the test.
func rawClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: sharedSingle(t).Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Ensure that a raw key is written in the Update's own Txn, at the
// revision OnCommit reports, together with the bucket's key; that GetRaw
// reads it back with its mod revision; and that ModRevision reports the
// commit's revision for a bucket key.
func TestRaw_OneCommit(t *testing.T) {
	e := newEngine(t, sharedSingle(t), Options{})
	cli := rawClient(t)
	key := fmt.Sprintf("/app/%s/k", t.Name())
	var rev int64
	err := e.Update(context.Background(), func(tx engine.Tx) error {
		raw := tx.(engine.RawTx)
		if err := tx.CreateBucket(bk); err != nil {
			return err
		}
		if err := tx.Put(bk, []byte("r"), []byte("receipt")); err != nil {
			return err
		}
		raw.OnCommit(func(r int64) { rev = r })
		return raw.PutRaw([]byte(key), []byte("value"))
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "value" || resp.Kvs[0].ModRevision != rev || rev == 0 {
		t.Fatalf("key = %v, %v; OnCommit gave %d", resp, err, rev)
	}
	err = e.View(context.Background(), func(tx engine.Tx) error {
		raw := tx.(engine.RawTx)
		v, mod, err := raw.GetRaw([]byte(key))
		if err != nil || string(v) != "value" || mod != rev {
			return fmt.Errorf("GetRaw = %q %d %v", v, mod, err)
		}
		if mod, err := raw.ModRevision(bk, []byte("r")); err != nil || mod != rev {
			return fmt.Errorf("ModRevision = %d %v, want %d", mod, err, rev)
		}
		if v, mod, err := raw.GetRaw([]byte(key + "-absent")); err != nil || v != nil || mod != 0 {
			return fmt.Errorf("absent key = %q %d %v", v, mod, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Ensure that a raw key read in an Update is compared at its commit: a
// write of it by another client after the read makes the function run
// again on the new value, and the write of the first run never lands;
// OnCommit is called once, for the run that committed.
func TestRaw_ComparedAtCommit(t *testing.T) {
	for _, tt := range []struct {
		name    string
		initial string // "" leaves the key absent
	}{
		{"present key", "v0"},
		{"absent key", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, sharedSingle(t), Options{})
			cli := rawClient(t)
			key := fmt.Sprintf("/app/%s/k", t.Name())
			if tt.initial != "" {
				if _, err := cli.Put(context.Background(), key, tt.initial); err != nil {
					t.Fatal(err)
				}
			}
			runs, calls := 0, 0
			var seen []string
			err := e.Update(context.Background(), func(tx engine.Tx) error {
				raw := tx.(engine.RawTx)
				runs++
				v, _, err := raw.GetRaw([]byte(key))
				if err != nil {
					return err
				}
				seen = append(seen, string(v))
				if runs == 1 {
					if _, err := cli.Put(context.Background(), key, "other"); err != nil {
						return err
					}
				}
				raw.OnCommit(func(int64) { calls++ })
				return raw.PutRaw([]byte(key), append([]byte(string(v)), '+'))
			})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := cli.Get(context.Background(), key)
			if err != nil || string(resp.Kvs[0].Value) != "other+" || runs != 2 || calls != 1 {
				t.Fatalf("key %v, %v; runs %d, OnCommit calls %d, reads %q", resp.Kvs, err, runs, calls, seen)
			}
		})
	}
}

// Ensure that raw keys are refused where they would alias the engine's
// own records or a reserved prefix, or are malformed, before anything is
// read or written; and that a View cannot write one.
func TestRaw_KeysRefused(t *testing.T) {
	e := newEngine(t, sharedSingle(t), Options{Reserved: []string{"/ledger/"}})
	for _, tt := range []struct {
		name string
		key  string
		want error
	}{
		{"the prefix", e.prefix, engine.ErrReservedKey},
		{"a bucket key", e.prefix + "targets/x", engine.ErrReservedKey},
		{"a reserved prefix", "/ledger/claims/x", engine.ErrReservedKey},
		{"empty", "", engine.ErrInvalid},
		{"blank", "/app/a b", engine.ErrInvalid},
		{"newline", "/app/a\n", engine.ErrInvalid},
		{"oversized", "/" + strings.Repeat("k", engine.MaxRawKeySize), engine.ErrInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := e.Update(context.Background(), func(tx engine.Tx) error {
				raw := tx.(engine.RawTx)
				if _, _, err := raw.GetRaw([]byte(tt.key)); !errors.Is(err, tt.want) {
					return fmt.Errorf("GetRaw = %v, want %v", err, tt.want)
				}
				if err := raw.PutRaw([]byte(tt.key), []byte("x")); !errors.Is(err, tt.want) {
					return fmt.Errorf("PutRaw = %v, want %v", err, tt.want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	err := e.View(context.Background(), func(tx engine.Tx) error {
		return tx.(engine.RawTx).PutRaw([]byte("/app/x"), []byte("x"))
	})
	if !errors.Is(err, engine.ErrReadOnly) {
		t.Fatalf("PutRaw in a View = %v", err)
	}
	if _, err := New(rawClient(t), &Options{Reserved: []string{""}}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("an empty reserved prefix: %v", err)
	}
}
