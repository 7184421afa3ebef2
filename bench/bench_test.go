package bench

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvfence/kvfence/internal/etcdtest"
)

// Ensure that a short run measures every row, with
// operations, latencies and fsync counts that fit what each row does, and
// that the etcd rows leave nothing behind on the cluster.
func TestRun(t *testing.T) {
	ec := etcdtest.Start(t)
	cli := ec.Client(t)
	newClient := func() (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), DialTimeout: 5 * time.Second})
	}
	rep, err := Run(context.Background(), Options{Dir: t.TempDir(), Writers: []int{3}, Duration: 20 * time.Millisecond,
		NewEtcdClient: newClient})
	if err != nil {
		t.Fatal(err)
	}
	left, err := cli.Get(context.Background(), EtcdPrefixRoot, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || left.Count != 0 {
		t.Fatalf("keys left under %s: %v, %v", EtcdPrefixRoot, left, err)
	}
	// Every etcd_txn operation is one revision of the cluster.
	for _, r := range rep.Results {
		if r.Name == RowEtcdTxn && (r.Ops <= 0 || left.Header.Revision < r.Ops) {
			t.Fatalf("the etcd cluster is at revision %d after %d etcd_txn operations", left.Header.Revision, r.Ops)
		}
	}
	if got, want := len(rep.Results), len(Rows()); got != want {
		t.Fatalf("%d results, want %d", got, want)
	}
	// Bounds of fsyncs per operation: exact for the rows that are exact,
	// loose where batching or growth moves them.
	bounds := map[string][2]float64{
		RowFdatasync:   {1, 1},
		RowBoltUpdate:  {2, 2.5},
		RowBoltBatch:   {0.01, 2.5},
		RowBoltNoSync:  {0, 0},
		RowSubmit:      {0.01, 4.5},
		RowSubmitHTTPS: {0.01, 4.5},
		// The receiver's 3 per commit and at least two witnesses' 2 each,
		// shared by at most 3 Submits; at most all three witnesses' and a
		// growth of each file.
		RowSubmitWitnessed: {7.0 / 3, 3 + 6 + 4},
		RowDenied:          {0.01, 4.5},
		RowLifecycle:       {0.03, 12.5},
		// A hold is a commit of its own, growths aside.
		RowHold: {3, 4.5},
		// The flood's commits are counted too, per hold.
		RowHoldUnderFlood: {3, 1e4},
		RowSQLite:         {0.01, 1.5},
		RowSQLiteRollback: {4, 4},
		RowEtcdTxn:        {0, 0},
		RowSubmitEtcd:     {0.01, 1},
	}
	for i, res := range rep.Results {
		writers := 3
		if res.Name == RowHold || res.Name == RowHoldUnderFlood {
			writers = 1
		}
		if want := Rows()[i]; res.Name != want || res.Writers != writers {
			t.Errorf("result %d is %s, want %s", i, res.Name, want)
		}
		if res.Ops <= 0 || res.OpsPerSec <= 0 || res.P50Micros <= 0 || res.P99Micros < res.P50Micros {
			t.Errorf("%s/%d: %+v", res.Name, res.Writers, res)
		}
		if b := bounds[res.Name]; res.FsyncsPerOp < b[0] || res.FsyncsPerOp > b[1] {
			t.Errorf("%s/%d: %.3f fsyncs per op, want within %v", res.Name, res.Writers, res.FsyncsPerOp, b)
		}
		if res.Durable != (res.Name != RowBoltNoSync) {
			t.Errorf("%s: durable = %v", res.Name, res.Durable)
		}
	}
	if rep.Environment.PeakHeapSys == 0 || rep.Environment.GoVersion == "" {
		t.Errorf("environment: %+v", rep.Environment)
	}
}

// Ensure that options Run cannot use are refused before anything runs.
func TestRunOptions(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		opts Options
		want error
	}{
		{"no writers", Options{Dir: dir, Writers: []int{}}, ErrInvalidOptions},
		{"zero writers", Options{Dir: dir, Writers: []int{0}}, ErrInvalidOptions},
		{"too many writers", Options{Dir: dir, Writers: []int{MaxWriters + 1}}, ErrInvalidOptions},
		{"negative duration", Options{Dir: dir, Duration: -time.Second}, ErrInvalidOptions},
		{"negative repeat", Options{Dir: dir, Repeat: -1}, ErrInvalidOptions},
		{"unknown row", Options{Dir: dir, Rows: []string{"bbolt_nosync"}}, ErrUnknownRow},
		{"etcd row without etcd", Options{Dir: dir, Rows: []string{RowFdatasync, RowEtcdTxn}}, ErrInvalidOptions},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Run(context.Background(), tt.opts); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := Run(context.Background(), Options{Dir: dir + "/missing"}); err == nil {
		t.Fatal("a missing directory was accepted")
	}
}

// Ensure that Rows selects rows in table order and the not-durable row
// says so in its name, and that without a cluster the etcd rows are left
// out.
func TestRows(t *testing.T) {
	all, err := Run(context.Background(), Options{Dir: t.TempDir(), Writers: []int{1}, Duration: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all.Results {
		if strings.Contains(r.Name, "etcd") {
			t.Errorf("row %s ran without a cluster", r.Name)
		}
	}
	if len(all.Results) != len(Rows())-2 {
		t.Errorf("%d rows without a cluster, want %d", len(all.Results), len(Rows())-2)
	}
	rep, err := Run(context.Background(), Options{Dir: t.TempDir(), Writers: []int{2}, Duration: 10 * time.Millisecond,
		Rows: []string{RowBoltNoSync, RowFdatasync}, Repeat: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[0].Name != RowFdatasync || rep.Results[1].Name != RowBoltNoSync {
		t.Fatalf("results %+v", rep.Results)
	}
	for _, r := range rep.Results {
		if len(r.Runs) != 3 || !slices.Contains(r.Runs, r.OpsPerSec) {
			t.Errorf("%s: rate %v, runs %v", r.Name, r.OpsPerSec, r.Runs)
		}
	}
	for _, name := range Rows() {
		r, _ := lookupRow(name)
		if !r.durable && !strings.Contains(name, "not_durable") {
			t.Errorf("row %s is not durable and its name does not say so", name)
		}
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		rates []float64
		want  float64
	}{
		{[]float64{5}, 5},
		{[]float64{9, 1}, 1},
		{[]float64{3, 9, 1}, 3},
		{[]float64{100, 2, 50, 7}, 7},
	}
	for _, tt := range tests {
		var rs []Result
		for i, r := range tt.rates {
			rs = append(rs, Result{OpsPerSec: r, Ops: int64(i)})
		}
		m := median(rs)
		if m.OpsPerSec != tt.want || !slices.Equal(m.Runs, tt.rates) || rs[m.Ops].OpsPerSec != tt.want {
			t.Errorf("median(%v) = %+v, want rate %v", tt.rates, m, tt.want)
		}
	}
}

func TestPercentiles(t *testing.T) {
	tests := []struct {
		lat  [][]int64
		q    float64
		want float64
	}{
		{nil, 0.5, 0},
		{[][]int64{{5}}, 0.99, 5},
		{[][]int64{{1, 2}, {3, 4}}, 0.5, 2},
		{[][]int64{{4, 3}, {2, 1}}, 1, 4},
		{[][]int64{{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}}, 0.99, 100},
		{[][]int64{{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}}, 0.9, 90},
	}
	for _, tt := range tests {
		if got := percentiles(tt.lat, tt.q)[0]; got != tt.want {
			t.Errorf("percentiles(%v, %v) = %v, want %v", tt.lat, tt.q, got, tt.want)
		}
	}
}

func TestBoltGrowths(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		a, b int64
		want int
	}{
		{32 << 10, 32 << 10, 0},
		{32 << 10, 64 << 10, 1},
		{32 << 10, 1 * mib, 5},
		{16 * mib, 16 * mib, 0},
		{8 * mib, 16 * mib, 1},
		{16 * mib, 33 * mib, 1},
		{16 * mib, 16*mib + 100*16*mib, 100},
		{100 * mib, 90 * mib, 0},
	}
	for _, tt := range tests {
		if got := boltGrowths(tt.a, tt.b); got != tt.want {
			t.Errorf("boltGrowths(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// BenchmarkRows runs every row at 1, 8 and 64 writers; ns/op is wall time
// divided by operations, so its inverse is the throughput of all writers.
func BenchmarkRows(b *testing.B) {
	for _, rw := range rows {
		for _, w := range DefaultWriters {
			b.Run(fmt.Sprintf("%s/writers=%d", rw.name, w), func(b *testing.B) { benchRow(b, rw, w) })
		}
	}
}

func benchRow(b *testing.B, rw row, writers int) {
	b.StopTimer()
	ctx := context.Background()
	c, err := rw.open(ctx, b.TempDir(), writers)
	if err != nil {
		b.Fatal(err)
	}
	defer c.close()
	b.ReportAllocs()
	m, err := measureBench(b, c, writers)
	if err != nil {
		b.Fatal(err)
	}
	res := m.result(rw, writers)
	b.ReportMetric(res.OpsPerSec, "ops/s")
	b.ReportMetric(res.P50Micros, "p50-µs")
	b.ReportMetric(res.P99Micros, "p99-µs")
	b.ReportMetric(res.FsyncsPerOp, "fsyncs/op")
}

// Profiles of the timed round alone: go test's -cpuprofile and
// -memprofile also cover the setup and the grants prepared for every
// operation, which for a fenced write cost more than the operations.
var (
	roundCPUProfile = flag.String("roundcpuprofile", "", "write a CPU profile of each benchmark's timed round to this file")
	roundMemProfile = flag.String("roundmemprofile", "", "write an allocation profile of each benchmark's timed round to this file")
)

// measureBench prepares b.N operations with the timer stopped and runs
// them with it running.
func measureBench(b *testing.B, c cell, writers int) (*measurement, error) {
	ctx := context.Background()
	if p, ok := c.(preparer); ok {
		if err := p.prepare(ctx, 0, int64(b.N)); err != nil {
			return nil, err
		}
	}
	m := &measurement{lat: make([][]int64, writers)}
	stop := startRoundProfiles(b)
	b.StartTimer()
	err := drive(ctx, c, m, 0, int64(b.N), time.Time{})
	b.StopTimer()
	stop()
	return m, err
}

// startRoundProfiles starts the profiles the -round flags ask for and
// returns what stops and writes them. The allocation profile is the
// difference of two snapshots, so that it counts the round alone.
func startRoundProfiles(b *testing.B) func() {
	var stops []func()
	if *roundCPUProfile != "" {
		f, err := os.Create(*roundCPUProfile)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if *roundMemProfile != "" {
		runtime.GC()
		var before bytes.Buffer
		if err := pprof.Lookup("allocs").WriteTo(&before, 0); err != nil {
			b.Fatal(err)
		}
		stops = append(stops, func() {
			runtime.GC()
			if err := os.WriteFile(*roundMemProfile+".before", before.Bytes(), 0o644); err != nil {
				b.Error(err)
			}
			f, err := os.Create(*roundMemProfile)
			if err != nil {
				b.Error(err)
				return
			}
			defer f.Close()
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				b.Error(err)
			}
		})
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

// Ensure that Scale grows one receiver through its sizes and measures
// applied Submits on each.
func TestScale(t *testing.T) {
	res, err := Scale(context.Background(), ScaleOptions{Dir: t.TempDir(), Sizes: []int{8, 24}, Ops: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results", len(res))
	}
	for _, r := range res {
		// Each unit took at least four entries (scope, target, activation,
		// submit); each timed write adds a grant, a receipt and entries.
		if r.AuditEntries < uint64(4*r.Size) || r.OpsPerSec <= 0 || r.CPUP50Micros <= 0 ||
			r.BytesPerSubmit <= 0 || r.BytesPerAction <= r.BytesPerSubmit || r.FileBytes <= 0 {
			t.Errorf("%+v", r)
		}
	}
	if _, err := Scale(context.Background(), ScaleOptions{Sizes: []int{10}, Ops: 20, NewEtcdClient: func() (*clientv3.Client, error) {
		t.Fatal("an invalid scale connected to etcd")
		return nil, nil
	}}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("etcd with sizes below ops: err = %v", err)
	}
	for _, opts := range []ScaleOptions{{Sizes: []int{}}, {Sizes: []int{10}, Ops: 20}, {Sizes: []int{50, 40}, Ops: 5}} {
		if _, err := Scale(context.Background(), opts); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: err = %v", opts, err)
		}
	}
}

// Ensure that Scale on etcd builds and measures the receiver on the
// cluster, one commit per timed Submit, with the member's database for
// the bytes columns and no CPU-only column, and leaves nothing behind.
func TestScaleEtcd(t *testing.T) {
	ec := etcdtest.Start(t)
	cli := ec.Client(t)
	newClient := func() (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), DialTimeout: 5 * time.Second})
	}
	const ops = 40
	// The prefix is deleted in many requests.
	defer func(n int64) { etcdDeleteChunk = n }(etcdDeleteChunk)
	etcdDeleteChunk = 50
	res, err := Scale(context.Background(), ScaleOptions{Dir: t.TempDir(), Sizes: []int{ops, 2 * ops}, Ops: ops,
		NewEtcdClient: newClient})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results", len(res))
	}
	st, err := cli.Status(context.Background(), ec.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.AuditEntries < uint64(4*r.Size) || r.OpsPerSec <= 0 || r.CPUP50Micros != 0 ||
			r.BytesPerSubmit <= 0 || r.BytesPerAction <= r.BytesPerSubmit || r.FileBytes <= 0 || r.FileBytes > st.DbSize {
			t.Errorf("%+v (the member's database: %d bytes)", r, st.DbSize)
		}
	}
	left, err := cli.Get(context.Background(), EtcdPrefixRoot, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || left.Count != 0 {
		t.Fatalf("keys left under %s: %v, %v", EtcdPrefixRoot, left, err)
	}
	// Each timed Submit, one at a time, is a commit of its own: a
	// revision of the cluster.
	if rev := left.Header.Revision; rev < int64(len(res)*ops) {
		t.Fatalf("the etcd cluster is at revision %d after %d timed Submits", rev, len(res)*ops)
	}
}

// BenchmarkSubmitScale times durable Submits of applied writes, one at a
// time, on one receiver grown through DefaultScaleSizes scopes (each with a
// target, a grant and a receipt), and LargeScaleSize too when
// KVFENCE_BENCH_LARGE=1. Building is done without fsync and not timed.
func BenchmarkSubmitScale(b *testing.B) {
	sizes := DefaultScaleSizes
	if os.Getenv("KVFENCE_BENCH_LARGE") == "1" {
		sizes = append(slices.Clone(sizes), LargeScaleSize)
	}
	ctx := context.Background()
	s, err := newScaleReceiver(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.close()
	for _, size := range sizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			b.StopTimer()
			if err := s.grow(ctx, size, nil); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var grew int64
			for done := 0; done < b.N; {
				envs, err := s.prepare(ctx, min(b.N-done, s.units))
				if err != nil {
					b.Fatal(err)
				}
				before, err := s.dataBytes(ctx)
				if err != nil {
					b.Fatal(err)
				}
				r := s.r
				b.StartTimer()
				for _, env := range envs {
					if err := submitApplied(ctx, r, env); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				after, err := s.dataBytes(ctx)
				if err != nil {
					b.Fatal(err)
				}
				grew += after - before
				done += len(envs)
			}
			b.ReportMetric(float64(grew)/float64(b.N), "B/submit")
			b.ReportMetric(float64(s.r.Head().Seq), "audit-entries")
		})
	}
}

// TestScaleLarge runs Scale up to LargeScaleSize scopes and logs its
// table. It takes minutes, so it runs only with KVFENCE_BENCH_LARGE=1:
//
//	KVFENCE_BENCH_LARGE=1 go test -run TestScaleLarge -v -timeout 2h ./bench/
func TestScaleLarge(t *testing.T) {
	if os.Getenv("KVFENCE_BENCH_LARGE") != "1" {
		t.Skip("set KVFENCE_BENCH_LARGE=1 to build a receiver of 1,000,000 scopes")
	}
	dir := os.Getenv("KVFENCE_BENCH_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	res, err := Scale(context.Background(), ScaleOptions{Dir: dir, Sizes: append(slices.Clone(DefaultScaleSizes), LargeScaleSize),
		Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%9s %13s %9s %8s %8s %8s %8s %8s %8s %8s %8s %8s", "scopes", "audit entries", "file MiB", "build s",
		"p50 µs", "p99 µs", "ops/s", "cpu µs", "allocs", "B/submit", "B/action", "heap MiB")
	for _, r := range res {
		t.Logf("%9d %13d %9.1f %8.0f %8.0f %8.0f %8.0f %8.1f %8.0f %8.0f %8.0f %8.1f", r.Size, r.AuditEntries,
			float64(r.FileBytes)/(1<<20), r.BuildSeconds, r.SubmitP50Micros, r.SubmitP99Micros, r.OpsPerSec,
			r.CPUP50Micros, r.AllocsPerOp, r.BytesPerSubmit, r.BytesPerAction, float64(r.PeakHeapSys)/(1<<20))
	}
	t.Logf("peak RSS %.1f MiB", float64(res[len(res)-1].PeakRSS)/(1<<20))
}

// etcdScaleSizes are the receiver sizes TestScaleEtcdLarge measures.
var etcdScaleSizes = []int{1_000, 10_000, 100_000}

// TestScaleEtcdLarge runs Scale on one etcd member that syncs to disk, up
// to 100,000 scopes, and logs its table. It takes minutes, so it runs
// only with KVFENCE_BENCH_LARGE=1; KVFENCE_BENCH_ETCD_SIZES, a
// comma-separated list, replaces the sizes:
//
//	KVFENCE_BENCH_LARGE=1 go test -run TestScaleEtcdLarge -v -timeout 2h ./bench/
func TestScaleEtcdLarge(t *testing.T) {
	if os.Getenv("KVFENCE_BENCH_LARGE") != "1" {
		t.Skip("set KVFENCE_BENCH_LARGE=1 to build a receiver of 100,000 scopes on etcd")
	}
	sizes := etcdScaleSizes
	if list := os.Getenv("KVFENCE_BENCH_ETCD_SIZES"); list != "" {
		sizes = nil
		for f := range strings.SplitSeq(list, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("KVFENCE_BENCH_ETCD_SIZES: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	// Every revision stays until a compaction, which nothing here runs:
	// the member may outgrow etcd's default quota of 2 GiB.
	ec := etcdtest.NewCluster(t, etcdtest.Config{Fsync: true, QuotaBackendBytes: 8 << 30})
	newClient := func() (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), DialTimeout: 5 * time.Second})
	}
	res, err := Scale(context.Background(), ScaleOptions{Dir: t.TempDir(), Sizes: sizes, NewEtcdClient: newClient,
		Progress: testWriter{t}})
	if len(res) == 0 {
		t.Fatal(err)
	}
	// A failure to delete the prefix at the end still shows the table.
	defer func() {
		if err != nil {
			t.Fatal(err)
		}
	}()
	t.Logf("%9s %13s %9s %8s %8s %8s %8s %8s %8s %8s %8s", "scopes", "audit entries", "db MiB", "build s",
		"p50 µs", "p99 µs", "ops/s", "allocs", "B/submit", "B/action", "heap MiB")
	for _, r := range res {
		t.Logf("%9d %13d %9.1f %8.0f %8.0f %8.0f %8.0f %8.0f %8.0f %8.0f %8.1f", r.Size, r.AuditEntries,
			float64(r.FileBytes)/(1<<20), r.BuildSeconds, r.SubmitP50Micros, r.SubmitP99Micros, r.OpsPerSec,
			r.AllocsPerOp, r.BytesPerSubmit, r.BytesPerAction, float64(r.PeakHeapSys)/(1<<20))
	}
	t.Logf("peak RSS %.1f MiB (this process; the member runs in its own)", float64(res[len(res)-1].PeakRSS)/(1<<20))
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// nopCell does nothing per operation, to measure the harness itself.
type nopCell struct{}

func (nopCell) op(context.Context, int, int64) error { return nil }
func (nopCell) syncs() (float64, error)              { return 0, nil }
func (nopCell) close() error                         { return nil }

// BenchmarkHarness measures what the harness adds to each operation
// (taking a number, two clock reads, recording the latency) with 64
// writers: it must stay far below the cheapest row's cost.
func BenchmarkHarness(b *testing.B) {
	b.StopTimer()
	b.ReportAllocs()
	if _, err := measureBench(b, nopCell{}, 64); err != nil {
		b.Fatal(err)
	}
}

// Ensure that the chart is well-formed SVG with a line per row, the
// not-durable row dashed, and that an empty result set is refused.
func TestPlot(t *testing.T) {
	results := []Result{
		{Name: RowFdatasync, Writers: 1, OpsPerSec: 5000},
		{Name: RowFdatasync, Writers: 8, OpsPerSec: 9000},
		{Name: RowBoltNoSync, Writers: 1, OpsPerSec: 20000},
		{Name: RowBoltNoSync, Writers: 8, OpsPerSec: 30000},
		{Name: RowSubmit, Writers: 1, OpsPerSec: 150},
		{Name: RowSubmit, Writers: 8, OpsPerSec: 0},
	}
	var b bytes.Buffer
	if err := Plot(&b, results, "title <&>"); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	lines, dashed := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, b.String())
		}
		if el, ok := tok.(xml.StartElement); ok && el.Name.Local == "polyline" {
			lines++
			for _, a := range el.Attr {
				if a.Name.Local == "stroke-dasharray" {
					dashed++
				}
			}
		}
	}
	// kvfence_submit has one point with a rate, so no line.
	if lines != 2 || dashed != 1 {
		t.Errorf("%d lines, %d dashed; want 2 and 1", lines, dashed)
	}
	if !strings.Contains(b.String(), "title &lt;&amp;&gt;") {
		t.Error("title not escaped")
	}
	if err := Plot(&b, nil, ""); err == nil {
		t.Error("an empty chart was drawn")
	}
}

// Ensure that the hold rows measure one holder whatever the writer
// counts, and that kvfence_hold_under_flood's workers keep submitting
// (stale and current, each denied as the row says: a worker answered
// otherwise fails the row) while it holds.
func TestHoldRows(t *testing.T) {
	ctx := context.Background()
	rep, err := Run(ctx, Options{Dir: t.TempDir(), Writers: []int{2, 5}, Duration: 50 * time.Millisecond,
		Rows: []string{RowHoldUnderFlood, RowHold}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[0].Name != RowHold || rep.Results[1].Name != RowHoldUnderFlood {
		t.Fatalf("results %+v", rep.Results)
	}
	for _, r := range rep.Results {
		if r.Writers != 1 || r.Ops <= 0 || r.P50Micros <= 0 || r.P99Micros < r.P50Micros || !r.Durable {
			t.Errorf("%s: %+v", r.Name, r)
		}
	}
	c, err := openHoldUnderFlood(ctx, t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	hc := c.(*holdCell)
	for i := range int64(20) {
		if err := c.op(ctx, 0, i); err != nil {
			t.Fatal(err)
		}
	}
	for hc.flood.submits.Load() < 2*FloodWriters {
		if err := hc.flood.failed(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
}
