package etcdengine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/enginetest"
	"github.com/kvfence/kvfence/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

var prefixes atomic.Int64

// newEngine returns an engine on a fresh prefix of the shared member.
func newEngine(t testing.TB, c *etcdtest.Cluster, o Options) *Engine {
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("/test/%s/%d/", t.Name(), prefixes.Add(1))
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(cli, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// Ensure that the etcd engine passes the seam's conformance suite, with
// pages small enough that scans cross several.
func TestConformance(t *testing.T) {
	c := sharedSingle(t)
	t.Logf("single member ready in %v", c.Ready)
	enginetest.Run(t, func(t *testing.T, lim engine.Limits) engine.Engine {
		return newEngine(t, c, Options{MaxTxnOps: lim.MaxOps, MaxRequestBytes: lim.MaxBytes, ScanPage: 4})
	})
}

// BenchmarkEngineUpdate measures one Update with one Put (a Txn without
// compares), one that reads the key before it writes it (a Get and a Txn
// with one compare), and one that reads four keys, as a fenced write reads
// its scope's records, on a single member that syncs to disk.
func BenchmarkEngineUpdate(b *testing.B) {
	c := etcdtest.NewCluster(b, etcdtest.Config{Fsync: true})
	e := newEngine(b, c, Options{})
	bucket := []byte("b")
	if err := e.Update(context.Background(), func(tx engine.Tx) error { return tx.CreateBucket(bucket) }); err != nil {
		b.Fatal(err)
	}
	val := make([]byte, 100)
	for _, bc := range []struct {
		name  string
		reads int
	}{{"put", 0}, {"get+put", 1}, {"4get+put", 4}} {
		b.Run(bc.name, func(b *testing.B) {
			key := make([]byte, 8)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				key[0], key[1], key[2], key[3] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
				err := e.Update(context.Background(), func(tx engine.Tx) error {
					for r := range bc.reads {
						key[4] = byte(r)
						if _, err := tx.Get(bucket, key); err != nil {
							return err
						}
					}
					key[4] = 0
					return tx.Put(bucket, key, val)
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
