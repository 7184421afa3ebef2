package etcdtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// TxnGate holds one Txn of a client on its way to the cluster, so that a
// test can put a fault in place while a commit is known to be in flight:
// the commit is then sent into the fault. It is a gRPC interceptor of the
// client (GatedClient) and changes nothing it lets through.
type TxnGate struct {
	mu    sync.Mutex
	match func(*etcdserverpb.TxnRequest) bool
	// held is closed when a Txn is held; release lets it go; done gets
	// its error.
	held, release chan struct{}
	done          chan error
}

// Arm makes the gate hold the next Txn for which match is true (any Txn if
// match is nil). The channel is closed once one is held.
func (g *TxnGate) Arm(match func(*etcdserverpb.TxnRequest) bool) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if match == nil {
		match = func(*etcdserverpb.TxnRequest) bool { return true }
	}
	g.match, g.held, g.release, g.done = match, make(chan struct{}), make(chan struct{}), make(chan error, 1)
	return g.held
}

// Release sends the held Txn on; the channel gets what etcd answered.
func (g *TxnGate) Release() <-chan error {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.release)
	return g.done
}

func (g *TxnGate) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	txn, ok := req.(*etcdserverpb.TxnRequest)
	if !ok {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	g.mu.Lock()
	take := g.match != nil && g.match(txn)
	var release chan struct{}
	var done chan error
	if take {
		g.match = nil
		close(g.held)
		release, done = g.release, g.done
	}
	g.mu.Unlock()
	if !take {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	<-release
	err := invoker(ctx, method, req, reply, cc, opts...)
	done <- err
	return err
}

// GatedClient returns a client of every member whose Txns pass through g,
// closed when the test ends.
func (c *Cluster) GatedClient(t testing.TB, g *TxnGate) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(g.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
