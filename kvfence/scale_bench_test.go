package kvfence

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
)

// BenchmarkKnownRecords measures what Open's recomputation of the state
// digest costs when it also fills the known records (knownrecords.go),
// and the memory those take: KVFENCE_BENCH_SCOPES scopes (10,000 unless
// set; 1000000 for the figure in the package documentation), four records
// each. heapB/record is the live heap the tables add, per record;
// tableMiB their total.
func BenchmarkKnownRecords(b *testing.B) {
	n := benchScopes(b)
	r := scaleStore(b, n)
	var known *knownRecords
	b.ResetTimer()
	for b.Loop() {
		known = nil
		var err error
		if known, err = newKnownRecords(DefaultMaxRecords); err != nil {
			b.Fatal(err)
		}
		if _, err := r.computeState(known); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(4*n), "ns/record")
	if got := known.records(); got != 4*n {
		b.Fatalf("known records = %d, want %d", got, 4*n)
	}
	var before, after runtime.MemStats
	keep := known
	known = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	keep = nil
	runtime.GC()
	runtime.ReadMemStats(&before)
	heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	b.ReportMetric(heap/float64(4*n), "heapB/record")
	b.ReportMetric(heap/(1<<20), "tableMiB")
}

// BenchmarkCheckRecord measures the per-record cost a decision pays: one
// fingerprint and one table probe, on tables of KVFENCE_BENCH_SCOPES
// scopes.
func BenchmarkCheckRecord(b *testing.B) {
	n := benchScopes(b)
	r := scaleStore(b, n)
	known, err := newKnownRecords(DefaultMaxRecords)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := r.computeState(known); err != nil {
		b.Fatal(err)
	}
	var key, raw []byte
	err = r.view(func(tx engine.Tx) error {
		key = []byte(fmt.Sprintf("bench/scope-%07d", n/2))
		v, err := tx.Get(bucketControl, key)
		raw = append([]byte(nil), v...)
		return err
	})
	if err != nil || raw == nil {
		b.Fatal(err, raw == nil)
	}
	var x txRecords
	b.ResetTimer()
	for b.Loop() {
		x.reset(known)
		if _, err := x.check(0, key, raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenReplay measures Open on a chain of KVFENCE_BENCH_ENTRIES
// entries since its base (100,000 unless set; 1000000 for the figure in
// the package documentation): the state digest and the replay of the
// fence over every entry, which a writable Open does before it decides
// anything. The entries are applied submits under the scope's active
// grant, whose replay is the costliest.
func BenchmarkOpenReplay(b *testing.B) {
	n := 100_000
	if s := os.Getenv("KVFENCE_BENCH_ENTRIES"); s != "" {
		if _, err := fmt.Sscan(s, &n); err != nil {
			b.Fatal(err)
		}
	}
	path := filepath.Join(b.TempDir(), "r.db")
	anchor := &audit.MemAnchor{}
	if err := Init(path, &InitOptions{ReceiverID: "bench", Key: testKey, Anchor: anchor}); err != nil {
		b.Fatal(err)
	}
	r, err := Open(path, &Options{Key: testKey, Anchor: anchor, NoSync: true, Reserve: -1})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.Admin().CreateScope(ctx, "s"); err != nil {
		b.Fatal(err)
	}
	if _, err := r.Admin().CreateTarget(ctx, "s", "t", []byte("v")); err != nil {
		b.Fatal(err)
	}
	req, err := EncodeRequest(&Request{V: 1, Action: "act", Target: "t", Set: ptr([]byte("w"))})
	if err != nil {
		b.Fatal(err)
	}
	g, err := r.Admin().Activate(ctx, ActivateRequest{Scope: "s", Executor: "w", Claim: "c", Request: req})
	if err != nil {
		b.Fatal(err)
	}
	digest := RequestDigest(req)
	const perTx = 10_000
	for done := r.Head().Seq; done < uint64(n); {
		k := min(perTx, uint64(n)-done)
		err := r.exec(0, func(w *wtx) error {
			for i := uint64(0); i < k; i++ {
				e := &audit.Entry{Kind: KindSubmit, Outcome: string(Applied), Executor: "w", Scope: "s", Epoch: g.Epoch,
					Grant: g.ID, Action: "act", Target: "t", RequestSHA256: digest[:], RevBefore: 1, RevAfter: 2}
				if _, err := w.appendAudit(e); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		done += k
	}
	entries := r.Head().Seq
	r.Close()
	b.ResetTimer()
	for b.Loop() {
		r, err := Open(path, &Options{Key: testKey, Anchor: anchor, Reserve: -1})
		if err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/open")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(entries), "ns/entry")
}
