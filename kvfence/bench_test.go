package kvfence

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
	bolt "go.etcd.io/bbolt"
)

// BenchmarkSubmit measures one durable fenced decision (a write transaction
// with its audit entry and checkpoint) with the anchor in memory and in a
// file, so the difference is what the external anchor costs. The decision
// is an identical retry (already_applied), which writes as much as an
// applied request minus the target and receipt puts.
func BenchmarkSubmit(b *testing.B) {
	for _, bc := range []struct {
		name   string
		anchor func(dir string) audit.AnchorStore
	}{
		{"anchor=memory", func(string) audit.AnchorStore { return &audit.MemAnchor{} }},
		{"anchor=file", func(dir string) audit.AnchorStore { return audit.FileAnchor{Path: filepath.Join(dir, "a")} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f := newFixture(b, defect.Variant{})
			// Reopen the fixture's receiver on a fresh anchor store of
			// this case's kind.
			f.r.Close()
			dir := b.TempDir()
			f.path = filepath.Join(dir, "r.db")
			store := bc.anchor(dir)
			if err := Init(f.path, &InitOptions{ReceiverID: "bench", Key: testKey, Anchor: store}); err != nil {
				b.Fatal(err)
			}
			r, err := Open(f.path, &Options{Key: testKey, Anchor: store, Now: f.clock.Now})
			if err != nil {
				b.Fatal(err)
			}
			f.r, f.admin = r, r.Admin()
			if _, err := f.admin.CreateScope(f.ctx, fixScope); err != nil {
				b.Fatal(err)
			}
			if _, err := f.admin.CreateTarget(f.ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
				b.Fatal(err)
			}
			a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
			if res, err := r.Submit(f.ctx, "worker-a", a.envelope); err != nil || res.Outcome != Applied {
				b.Fatal(res, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := r.Submit(f.ctx, "worker-a", a.envelope)
				if err != nil || res.Outcome != AlreadyApplied {
					b.Fatal(res, err)
				}
			}
		})
	}
}

// BenchmarkSubmitParallel measures durable fenced writes from concurrent
// writers with a file anchor. Every call is an applied write of its own:
// each has its own scope, target and grant, prepared beforehand without
// fsync so that setup stays fast, and the timed part runs on a reopened,
// durable receiver. ops/s is the throughput over all writers; calls/commit
// is how many calls shared each commit.
func BenchmarkSubmitParallel(b *testing.B) {
	for _, writers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			r, envs := parallelBenchFixture(b, b.N)
			commits := r.queue.commits.Load()
			b.ReportAllocs()
			b.ResetTimer()
			err := submitAll(r, envs, writers)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			b.ReportMetric(float64(b.N)/float64(r.queue.commits.Load()-commits), "calls/commit")
		})
	}
}

// submitAll submits every prepared call from writers goroutines, each
// taking the next call not yet taken, and returns the first error or
// outcome other than Applied.
func submitAll(r *Receiver, envs []benchCall, writers int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	ctx := context.Background()
	for range writers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(envs) {
					return
				}
				res, err := r.Submit(ctx, envs[i].caller, envs[i].envelope)
				if err == nil && res.Outcome != Applied {
					err = fmt.Errorf("call %d: %s/%s %s", i, res.Outcome, res.Reason, res.Detail)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// benchCall is one prepared Submit: a caller and its envelope.
type benchCall struct {
	caller   string
	envelope []byte
}

// parallelBenchFixture returns a durable receiver with a file anchor and n
// envelopes, each for its own scope, target and active grant, so that every
// one of them applies.
func parallelBenchFixture(b *testing.B, n int) (*Receiver, []benchCall) {
	b.Helper()
	dir := b.TempDir()
	path := filepath.Join(dir, "r.db")
	clock := newClock()
	mem := &audit.MemAnchor{}
	if err := Init(path, &InitOptions{ReceiverID: "bench", Key: testKey, Anchor: mem, Now: clock.Now}); err != nil {
		b.Fatal(err)
	}
	// Setup writes skip fsync; they are not what is measured.
	setup, err := Open(path, &Options{Key: testKey, Anchor: mem, Now: clock.Now, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	admin := setup.Admin()
	calls := make([]benchCall, n)
	for i := range calls {
		scope := fmt.Sprintf("bench/scope-%d", i)
		caller := fmt.Sprintf("worker-%d", i)
		if _, err := admin.CreateScope(ctx, scope); err != nil {
			b.Fatal(err)
		}
		if _, err := admin.CreateTarget(ctx, scope, scope, []byte(fixValue)); err != nil {
			b.Fatal(err)
		}
		req, err := EncodeRequest(&Request{V: 1, Action: "act", Target: scope, Patch: []byte(fixPatch)})
		if err != nil {
			b.Fatal(err)
		}
		g, err := admin.Activate(ctx, ActivateRequest{Scope: scope, Executor: caller, Claim: "claim", Request: req})
		if err != nil {
			b.Fatal(err)
		}
		env, err := EncodeEnvelope(&Envelope{V: 1, Scope: scope, Epoch: g.Epoch, Grant: g.ID, Executor: caller, Claim: "claim", Request: req})
		if err != nil {
			b.Fatal(err)
		}
		calls[i] = benchCall{caller: caller, envelope: env}
	}
	if err := setup.Close(); err != nil {
		b.Fatal(err)
	}
	// Move the anchor to a file, and sync the database once before the
	// durable receiver takes over.
	sc, err := mem.Load()
	if err != nil {
		b.Fatal(err)
	}
	store := audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}
	if err := store.Store(nil, sc); err != nil {
		b.Fatal(err)
	}
	if err := syncFile(path); err != nil {
		b.Fatal(err)
	}
	r, err := Open(path, &Options{Key: testKey, Anchor: store, Now: clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r, calls
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// BenchmarkBoltUpdate is the baseline for BenchmarkSubmitParallel: one
// writer committing bbolt Update transactions that put about as many bytes
// as an applied Submit (target, receipt, audit entry, checkpoint), with
// nothing checked, signed or anchored.
func BenchmarkBoltUpdate(b *testing.B) {
	db, err := bolt.Open(filepath.Join(b.TempDir(), "raw.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	bucket := []byte("raw")
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(bucket); return err }); err != nil {
		b.Fatal(err)
	}
	value := bytes.Repeat([]byte{'x'}, 200)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		err := db.Update(func(tx *bolt.Tx) error {
			bk := tx.Bucket(bucket)
			for _, k := range []string{"target", "receipt", "audit", "checkpoint"} {
				if err := bk.Put(fmt.Appendf(nil, "%s-%d", k, i), value); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkComputeState measures the state check that Open and VerifyChain
// run: the digest recomputed from every control, grant, target and receipt
// record. Each of KVFENCE_BENCH_SCOPES scopes (default 10,000) has one
// record of each kind, of the sizes a fenced write leaves; the database is
// written with bbolt directly, since only the reading is measured.
func BenchmarkComputeState(b *testing.B) {
	n := benchScopes(b)
	r := scaleStore(b, n)
	b.ResetTimer()
	for b.Loop() {
		if _, err := r.computeState(nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(4*n), "ns/record")
}

// benchScopes is KVFENCE_BENCH_SCOPES, or 10,000.
func benchScopes(b *testing.B) int {
	n := 10_000
	if s := os.Getenv("KVFENCE_BENCH_SCOPES"); s != "" {
		if _, err := fmt.Sscan(s, &n); err != nil {
			b.Fatal(err)
		}
	}
	return n
}

// scaleStore returns a read-only receiver over a store of n scopes, each
// with one record of each kind, of the sizes a fenced write leaves; the
// database is written with bbolt directly.
func scaleStore(b *testing.B, n int) *Receiver {
	path := filepath.Join(b.TempDir(), "r.db")
	if err := Init(path, &InitOptions{ReceiverID: "bench", Key: testKey, Anchor: &audit.MemAnchor{}}); err != nil {
		b.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	const perTx = 10_000
	for start := 0; start < n; start += perTx {
		err := db.Update(func(tx *bolt.Tx) error {
			for i := start; i < min(n, start+perTx); i++ {
				scope := fmt.Sprintf("bench/scope-%07d", i)
				grant := fmt.Sprintf("%032x", i)
				sum := bytes.Repeat([]byte{byte(i)}, 32)
				for _, rec := range []struct {
					bucket, key []byte
					v           any
				}{
					{bucketControl, []byte(scope), &controlRecord{Epoch: 2, Mode: ModeOpen, ActiveGrant: grant, CreatedAt: 1, ActivatedAt: 2}},
					{bucketGrants, []byte(grant), &grantRecord{ID: grant, Scope: scope, Epoch: 2, Executor: "worker-a", Claim: "claim-1",
						Action: "act", RequestSHA256: sum, NotBefore: 1, NotAfter: 2, Decision: "change-123", CreatedAt: 1}},
					{bucketTargets, []byte(scope), &targetRecord{Scope: scope, Revision: 2, Value: []byte(fixAfter)}},
					{bucketReceipts, receiptKey(scope, "act"), &receiptRecord{Grant: grant, RequestSHA256: sum, Target: scope,
						RevBefore: 1, RevAfter: 2, AuditSeq: uint64(i), At: 3}},
				} {
					raw, err := encodeCanonical(rec.v)
					if err != nil {
						return err
					}
					if err := tx.Bucket(rec.bucket).Put(rec.key, raw); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	db.Close()
	r, err := open(path, &Options{ReadOnly: true}, defect.Variant{SkipAnchor: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}
