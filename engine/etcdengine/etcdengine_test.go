package etcdengine

import (
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
	c := single
	t.Logf("single member ready in %v", c.Ready)
	enginetest.Run(t, func(t *testing.T, lim engine.Limits) engine.Engine {
		return newEngine(t, c, Options{MaxTxnOps: lim.MaxOps, MaxRequestBytes: lim.MaxBytes, ScanPage: 4})
	})
}
