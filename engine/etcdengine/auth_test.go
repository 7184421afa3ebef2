package etcdengine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	deployetcd "github.com/kvfence/kvfence/deploy/etcd"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/etcdtest"
)

// Ensure that, on a cluster set up by deploy/etcd/README.md's own lines,
// the engine commits as the receiver's and the ledger's users on their
// own prefixes, and that etcd auth's refusal is a definite error, never
// engine.ErrOutcomeUnknown (which would have a caller retry, or report a
// write that may have landed): the worker, which may read the
// application's prefix, is refused at the commit with nothing written,
// and a user on another's prefix is refused at the first read.
func TestAuthRefusalIsDefinite(t *testing.T) {
	d := etcdtest.StartDeployedAuth(t, deployetcd.README)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	put := func(tx engine.Tx) error {
		if ok, err := tx.HasBucket([]byte("b")); err != nil {
			return err
		} else if !ok {
			if err := tx.CreateBucket([]byte("b")); err != nil {
				return err
			}
		}
		return tx.Put([]byte("b"), []byte("k"), []byte("v"))
	}
	for _, tc := range []struct {
		name, user, passwordFile, prefix string
		// at is where etcd refuses: "" not at all, else a part of the
		// error ("commit", "read").
		at string
	}{
		{"receiver on its prefix", "kvfence-receiver", "receiver.password", "/kvfence/", ""},
		{"ledger on its prefix", "kvfence-ledger", "ledger.password", "/kvfence-ledger/", ""},
		{"worker on the application's prefix", "worker-a", "worker-a.password", "/app/", "refused the commit"},
		{"ledger on the receiver's prefix", "kvfence-ledger", "ledger.password", "/kvfence/", "read"},
		{"receiver on the ledger's prefix", "kvfence-receiver", "receiver.password", "/kvfence-ledger/", "read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(d.ClientAs(t, d.Receiver, tc.user, tc.passwordFile), &Options{Prefix: tc.prefix})
			if err != nil {
				t.Fatal(err)
			}
			err = e.Update(ctx, put)
			if tc.at == "" {
				if err != nil {
					t.Fatalf("Update: %v", err)
				}
				return
			}
			if !errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, engine.ErrOutcomeUnknown) ||
				errors.Is(err, engine.ErrConflict) || !strings.Contains(err.Error(), tc.at) {
				t.Fatalf("Update: %v; want permission denied (%q), definite", err, tc.at)
			}
		})
	}
	resp, err := d.ClientAs(t, d.Receiver, "root", "root.password").Get(ctx, "/app/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 0 {
		t.Errorf("the worker's refused commit wrote %d keys (%v)", len(resp.Kvs), err)
	}
}

// Ensure that New refuses a client that authenticates as a user on a
// cluster whose auth is off (ErrAuthOff), where etcd's client would drop
// the user and every client could write the engine's keys, and that a
// client without a user is taken as before.
func TestNewRefusesUserWithoutAuth(t *testing.T) {
	c := etcdtest.Start(t)
	for _, tc := range []struct {
		name, user string
		want       error
	}{
		{"a user", "kvfence-receiver", ErrAuthOff},
		{"no user", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
			if tc.user != "" {
				cfg.Username, cfg.Password = tc.user, "any-password"
			}
			cli, err := clientv3.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			e, err := New(cli, nil)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("New: %v, want %v", err, tc.want)
			}
			if e != nil && tc.want != nil {
				t.Fatal("New returned an engine with its error")
			}
		})
	}
}
