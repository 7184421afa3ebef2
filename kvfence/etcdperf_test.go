package kvfence

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"math/bits"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Ensure that a Submit on etcd sends two requests, whatever it decides:
// one that reads what the decision reads (the head, the state digest, the
// high-water, the audit key, the scope's control record, the grant, the
// receipt and the target) and the commit. Each read of its own would be a
// request more.
func TestSubmitEtcd_ReadsInOneRequest(t *testing.T) {
	var n atomic.Int64
	e, err := etcdengine.New(countingClient(t, sharedEtcd(t), &n), &etcdengine.Options{Prefix: fmt.Sprintf("/kvfence-test-%d/", prefixes.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	clock := newClock()
	anchor := &audit.MemAnchor{}
	if err := InitEngine(e, &InitOptions{ReceiverID: "rtt", Key: testKey, Anchor: anchor, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	r, err := OpenEngine(e, &Options{Key: testKey, Anchor: anchor, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f := &fixture{t: t, clock: clock, ctx: t.Context(), r: r, admin: r.Admin()}
	if _, err := f.admin.CreateScope(f.ctx, fixScope); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.CreateTarget(f.ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
		t.Fatal(err)
	}
	a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
	for _, step := range []struct {
		name string
		hold bool
		want Outcome
	}{{"applied", false, Applied}, {"already applied", false, AlreadyApplied}, {"denied, held", true, Denied}} {
		if step.hold {
			f.hold("stale")
		}
		n.Store(0)
		res := f.submit("worker-a", a.envelope)
		if res.Outcome != step.want {
			t.Fatalf("%s: %+v", step.name, res)
		}
		if got := n.Load(); got != 2 {
			t.Errorf("%s: %d requests to etcd, want 2 (one read, one commit)", step.name, got)
		}
	}
}

// Ensure that what a batch read ahead is compared at its commit: a hold
// committed through another receiver process on the same prefix after the
// Submit's transaction read the scope's records, and before it commits,
// makes the commit fail and the decision run again on the held scope. The
// worker is denied, the target keeps its value, and the chain verifies.
func TestSubmitEtcd_ReadAheadChangedBeforeCommit(t *testing.T) {
	s := engines[1].new(t)
	anchor := &audit.MemAnchor{}
	clock := newClock()
	if err := s.init(t, &InitOptions{ReceiverID: "shared", Key: testKey, Anchor: anchor, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	open := func() *fixture {
		r, err := s.open(t, &Options{Key: testKey, Anchor: anchor, Now: clock.Now}, defect.Variant{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return &fixture{t: t, clock: clock, ctx: t.Context(), r: r, admin: r.Admin(), store: s}
	}
	one, two := open(), open()
	if _, err := one.admin.CreateScope(one.ctx, fixScope); err != nil {
		t.Fatal(err)
	}
	if _, err := one.admin.CreateTarget(one.ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
		t.Fatal(err)
	}
	a := one.activate("worker-a", "claim-1", one.patchRequest("act"))
	runs := 0
	one.r.faults.beforeAudit = func(*audit.Entry) error {
		// Inside the Submit's transaction, after its reads: the first
		// run lets the other process hold the scope.
		if runs++; runs == 1 {
			two.hold("worker-a deposed")
		}
		return nil
	}
	res := one.submit("worker-a", a.envelope)
	one.r.faults.beforeAudit = nil
	wantDenied(t, res, ReasonReceiverHeld)
	if runs != 2 {
		t.Fatalf("the decision ran %d times, want 2: the commit did not see the hold", runs)
	}
	if tg, err := two.r.Target(fixTarget); err != nil || string(tg.Value) != fixValue {
		t.Fatalf("target after the denied submit: %q, %v; want %q", tg.Value, err, fixValue)
	}
	if _, err := s.verify(t, VerifyOptions{Anchor: anchor, PublicKey: testKey.Public().(ed25519.PublicKey)}); err != nil {
		t.Fatalf("verify-chain: %v", err)
	}
}

// BenchmarkEtcdFsync compares an applied fenced Submit on the etcd engine
// with the cluster's own limit, a raw Txn that puts one 256-byte key, on
// one embedded member that syncs to disk, from 1, 8 and 64 writers. The
// receiver keeps a file anchor, which syncs to the local disk too, or one
// in memory, to show the engine's part. ops/s is over all writers; rtt/op
// counts the requests sent to etcd per operation (the reads and the
// commits), and calls/commit how many Submits shared one commit.
func BenchmarkEtcdFsync(b *testing.B) {
	c := etcdtest.NewCluster(b, etcdtest.Config{Fsync: true})
	writers := []int{1, 8, 64}
	for _, n := range writers {
		b.Run(fmt.Sprintf("etcd_txn/writers=%d", n), func(b *testing.B) {
			var rtt atomic.Int64
			cli := countingClient(b, c, &rtt)
			val := string(make([]byte, 256))
			prefix := fmt.Sprintf("/raw-%d/", prefixes.Add(1))
			rtt.Store(0)
			runWriters(b, n, func(i int64) error {
				_, err := cli.Txn(context.Background()).Then(clientv3.OpPut(fmt.Sprint(prefix, i), val)).Commit()
				return err
			})
			b.ReportMetric(float64(rtt.Load())/float64(b.N), "rtt/op")
		})
	}
	for _, anchor := range []string{"file", "memory"} {
		for _, n := range writers {
			b.Run(fmt.Sprintf("kvfence_submit_etcd/anchor=%s/writers=%d", anchor, n), func(b *testing.B) {
				benchSubmitEtcd(b, c, anchor == "file", n)
			})
		}
	}
}

// benchSubmitEtcd times applied submits from n writers on a receiver on c,
// with a file anchor or one in memory (what the engine costs alone).
func benchSubmitEtcd(b *testing.B, c *etcdtest.Cluster, file bool, n int) {
	var rtt atomic.Int64
	r, envs := etcdBenchFixture(b, c, &rtt, file, b.N)
	commits := r.queue.commits.Load()
	rtt.Store(0)
	runWriters(b, n, func(i int64) error {
		res, err := r.Submit(context.Background(), envs[i].caller, envs[i].envelope)
		if err == nil && res.Outcome != Applied {
			err = fmt.Errorf("call %d: %s/%s %s", i, res.Outcome, res.Reason, res.Detail)
		}
		return err
	})
	b.ReportMetric(float64(rtt.Load())/float64(b.N), "rtt/op")
	b.ReportMetric(float64(b.N)/float64(r.queue.commits.Load()-commits), "calls/commit")
}

// runWriters times op for b.N indexes shared by n writers and reports
// ops/s.
func runWriters(b *testing.B, n int, op func(i int64) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	// The writers' samples in a CPU profile carry phase=timed, to tell
	// them from the setup's (go tool pprof -tagfocus phase=timed).
	pprof.Do(context.Background(), pprof.Labels("phase", "timed"), func(context.Context) {
		for range n {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(b.N) {
						return
					}
					if err := op(i); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// countingClient is a client of c that counts its requests in rtt.
func countingClient(b testing.TB, c *etcdtest.Cluster, rtt *atomic.Int64) *clientv3.Client {
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		rtt.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return cli
}

// etcdBenchFixture returns a receiver on a fresh prefix of c, with a file
// anchor or one in memory, and n envelopes, each for its own scope, target and active
// grant, so that every one of them applies. The setup runs from many
// writers at once, so that it shares commits.
func etcdBenchFixture(b testing.TB, c *etcdtest.Cluster, rtt *atomic.Int64, file bool, n int) (*Receiver, []benchCall) {
	b.Helper()
	e, err := etcdengine.New(countingClient(b, c, rtt), &etcdengine.Options{Prefix: fmt.Sprintf("/bench-%d/", prefixes.Add(1))})
	if err != nil {
		b.Fatal(err)
	}
	clock := newClock()
	var anchor audit.AnchorStore = &audit.MemAnchor{}
	if file {
		anchor = audit.FileAnchor{Path: filepath.Join(b.TempDir(), "r.anchor")}
	}
	if err := InitEngine(e, &InitOptions{ReceiverID: "bench", Key: testKey, Anchor: anchor, Now: clock.Now}); err != nil {
		b.Fatal(err)
	}
	r, err := OpenEngine(e, &Options{Key: testKey, Anchor: anchor, Now: clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	ctx := context.Background()
	admin := r.Admin()
	calls := make([]benchCall, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				env, err := benchEnvelope(ctx, admin, i)
				if err != nil {
					b.Error(err)
					return
				}
				calls[i] = benchCall{caller: fmt.Sprintf("worker-%d", i), envelope: env}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return r, calls
}

// benchEnvelope creates scope i with its target and an active grant for
// worker-i, and returns the envelope that grant approves.
func benchEnvelope(ctx context.Context, admin *Admin, i int) ([]byte, error) {
	scope := fmt.Sprintf("bench/scope-%d", i)
	caller := fmt.Sprintf("worker-%d", i)
	if _, err := admin.CreateScope(ctx, scope); err != nil {
		return nil, err
	}
	if _, err := admin.CreateTarget(ctx, scope, scope, []byte(fixValue)); err != nil {
		return nil, err
	}
	req, err := EncodeRequest(&Request{V: 1, Action: "act", Target: scope, Patch: []byte(fixPatch)})
	if err != nil {
		return nil, err
	}
	g, err := admin.Activate(ctx, ActivateRequest{Scope: scope, Executor: caller, Claim: "claim", Request: req})
	if err != nil {
		return nil, err
	}
	return EncodeEnvelope(&Envelope{V: 1, Scope: scope, Epoch: g.Epoch, Grant: g.ID, Executor: caller, Claim: "claim", Request: req})
}

// Ensure that a full batch of Submits on etcd is one commit of two
// requests, with a tree frontier of eight records: one read-ahead of
// everything the batch reads, and one Txn. The audit and tree records the
// batch reads are compared through the chain's head key, not each, its
// audit keys are read as one range, and the batch is sized so that its
// compares, its writes and its read-ahead fit etcd's 128 operations; a
// batch sized without them is split, each half a read and a commit of its
// own.
func TestSubmitEtcd_FullBatchOneCommit(t *testing.T) {
	var n atomic.Int64
	r, calls := etcdBenchFixture(t, sharedEtcd(t), &n, false, maxBatchCalls/16)
	if r.batchCalls < 16 || r.batchCalls > len(calls) {
		t.Fatalf("a batch on etcd holds %d calls, want 16 to %d", r.batchCalls, len(calls))
	}
	f := &fixture{t: t, ctx: t.Context(), r: r}
	// A chain whose length has eight bits set has a tree frontier of
	// eight records, which the batch's appends read.
	for i := 0; bits.OnesCount64(r.Head().Seq) < 8; i++ {
		if _, err := r.Admin().CreateScope(f.ctx, fmt.Sprintf("pad/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	calls = calls[:r.batchCallsNow()]
	batch := make([]*gcCall, len(calls))
	for i, c := range calls {
		batch[i] = &gcCall{caller: c.caller, envelope: c.envelope}
	}
	n.Store(0)
	commits := inOneBatch(t, f, batch)
	if commits != 1 {
		t.Errorf("%d calls took %d commits, want 1", len(batch), commits)
	}
	for i, c := range batch {
		if got := outcome(c); got != "applied/" {
			t.Errorf("call %d = %s %v, want applied", i, got, c.err)
		}
	}
	// The blocking write that holds the batch back is a read and a
	// commit of its own.
	if got := n.Load(); got != 4 {
		t.Errorf("%d requests to etcd, want 4 (a read and a commit for the blocking write, one of each for the batch)", got)
	}
}
