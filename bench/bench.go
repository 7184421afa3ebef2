package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Row names, in table order.
const (
	RowFdatasync       = "fdatasync"
	RowBoltUpdate      = "bbolt_update"
	RowBoltBatch       = "bbolt_batch"
	RowBoltNoSync      = "bbolt_nosync_not_durable"
	RowSubmit          = "kvfence_submit"
	RowSubmitHTTPS     = "kvfence_submit_https"
	RowSubmitWitnessed = "kvfence_submit_witnessed"
	RowDenied          = "kvfence_denied"
	RowLifecycle       = "kvfence_lifecycle"
	RowHold            = "kvfence_hold"
	RowHoldUnderFlood  = "kvfence_hold_under_flood"
	RowSQLite          = "sqlite_fenced"
	RowSQLiteRollback  = "sqlite_fenced_rollback_journal"
	RowEtcdTxn         = "etcd_txn"
	RowSubmitEtcd      = "kvfence_submit_etcd"
)

// RecordSize is the size of the value every row writes: the appended
// record, the bbolt value, and the fenced write's new target value.
const RecordSize = 256

// DefaultDuration is how long each row is measured at each writer count
// when Options.Duration is zero.
const DefaultDuration = 5 * time.Second

// DefaultWriters are the writer counts used when Options.Writers is nil.
var DefaultWriters = []int{1, 8, 64}

// MaxWriters bounds a writer count.
const MaxWriters = 4096

// Options configures Run. The zero value measures every row at
// DefaultWriters for DefaultDuration each, in a temporary directory under
// the current directory.
type Options struct {
	// Dir is where the databases and files are created, each row in a new
	// directory below it that is removed afterwards. It decides the disk
	// being measured. Empty means the current directory.
	Dir string
	// Writers are the numbers of concurrent writers to measure each row
	// at. Nil means DefaultWriters.
	Writers []int
	// Duration is the measured time of each row at each writer count,
	// setup and warm-up not included. Zero means DefaultDuration.
	Duration time.Duration
	// Rows selects rows by name, in table order whatever their order here.
	// Nil means every row.
	Rows []string
	// Repeat measures every row at every writer count this many times,
	// one pass over the whole table after another, and reports for each
	// the repetition with the median rate, so that a passing stall of a
	// shared disk or CPU does not decide a ratio. Zero means once.
	Repeat int
	// Progress, if set, receives one line as each measurement starts and
	// ends.
	Progress io.Writer
	// NewEtcdClient, if set, connects to the etcd cluster that the etcd
	// rows measure, each under a fresh prefix below EtcdPrefixRoot that is
	// deleted afterwards; each cell closes the client it was given.
	// Without it the etcd rows are left out, and naming one in Rows is an
	// error.
	NewEtcdClient func() (*clientv3.Client, error)
}

// Result is one row measured at one writer count. The JSON keys are
// stable; new keys may be added.
type Result struct {
	// Name is the row's name.
	Name string `json:"name"`
	// Writers is the number of concurrent writers.
	Writers int `json:"writers"`
	// OpsPerSec is operations completed per second of the timed rounds.
	OpsPerSec float64 `json:"ops_per_s"`
	// P50Micros is the median latency in microseconds.
	P50Micros float64 `json:"p50_us"`
	// P99Micros is the 99th percentile latency in microseconds.
	P99Micros float64 `json:"p99_us"`
	// FsyncsPerOp is the fsync-like system calls per operation, computed
	// from counted commits as the package documentation explains.
	FsyncsPerOp float64 `json:"fsyncs_per_op"`
	// AllocsPerOp is heap allocations per operation, process-wide.
	AllocsPerOp float64 `json:"allocs_per_op"`
	// Ops is the number of operations measured.
	Ops int64 `json:"ops"`
	// Seconds is the wall time of the timed rounds.
	Seconds float64 `json:"seconds"`
	// Durable reports whether an operation is on disk when it returns.
	Durable bool `json:"durable"`
	// Runs are the rates of every repetition, in the order measured; the
	// result is the one with the median rate.
	Runs []float64 `json:"runs_ops_per_s"`
	// RunsP99Micros are the 99th percentile latencies of every
	// repetition, in the same order as Runs.
	RunsP99Micros []float64 `json:"runs_p99_us"`
}

// Environment describes where a run was measured.
type Environment struct {
	// Date is when the run started.
	Date time.Time `json:"date"`
	// GoVersion is the toolchain's version (runtime.Version).
	GoVersion string `json:"go_version"`
	// GOOS is the operating system the run was built for.
	GOOS string `json:"goos"`
	// GOARCH is the architecture the run was built for.
	GOARCH string `json:"goarch"`
	// CPUs is the number of logical CPUs.
	CPUs int `json:"cpus"`
	// CPUModel is the CPUs' model name, when the platform tells it.
	CPUModel string `json:"cpu_model"`
	// Dir is the directory measured.
	Dir string `json:"dir"`
	// FileSystem is Dir's file system type, when the platform tells it.
	FileSystem string `json:"file_system"`
	// PeakHeapSys is the largest runtime.MemStats.HeapSys seen during the
	// run, sampled every 100 ms.
	PeakHeapSys uint64 `json:"peak_heap_sys_bytes"`
	// PeakRSS is the process's peak resident set (VmHWM) at the end, where
	// the platform reports it, else 0.
	PeakRSS uint64 `json:"peak_rss_bytes"`
}

// Report is a whole run.
type Report struct {
	// Results are the rows in table order, each at every writer count in
	// the order given (a one-writer row, such as kvfence_hold, at 1 only).
	Results []Result `json:"results"`
	// Environment says where and when the run was measured.
	Environment Environment `json:"environment"`
}

// Rows returns every row name in table order.
func Rows() []string {
	names := make([]string, len(rows))
	for i, r := range rows {
		names[i] = r.name
	}
	return names
}

// row is one workload of the table.
type row struct {
	name    string
	durable bool
	// open creates the row's files in dir and returns a cell ready for
	// writers concurrent writers.
	open func(ctx context.Context, dir string, writers int) (cell, error)
	// openEtcd, for a row on etcd instead, returns a cell on the cluster
	// that newClient connects to, with its files, if any, in dir.
	openEtcd func(ctx context.Context, dir string, newClient func() (*clientv3.Client, error)) (cell, error)
	// oneWriter marks a row measured with one writer only, whatever the
	// writer counts: an operator's calls, one at a time, whose load (if
	// any) the row makes itself.
	oneWriter bool
}

var rows = []row{
	{RowFdatasync, true, openFdatasync, nil, false},
	{RowBoltUpdate, true, func(ctx context.Context, dir string, _ int) (cell, error) {
		return openBolt(dir, boltUpdate)
	}, nil, false},
	{RowBoltBatch, true, func(ctx context.Context, dir string, _ int) (cell, error) {
		return openBolt(dir, boltBatch)
	}, nil, false},
	{RowBoltNoSync, false, func(ctx context.Context, dir string, _ int) (cell, error) {
		return openBolt(dir, boltNoSync)
	}, nil, false},
	{RowSubmit, true, openSubmit, nil, false},
	{RowSubmitHTTPS, true, openSubmitHTTPS, nil, false},
	{RowSubmitWitnessed, true, openSubmitWitnessed, nil, false},
	{RowDenied, true, openDenied, nil, false},
	{RowLifecycle, true, openLifecycle, nil, false},
	{name: RowHold, durable: true, open: openHold, oneWriter: true},
	{name: RowHoldUnderFlood, durable: true, open: openHoldUnderFlood, oneWriter: true},
}

// The SQLite rows, where this build has them (row_sqlite.go), then etcd's.
func init() {
	rows = append(rows, sqliteRows...)
	rows = append(rows,
		row{name: RowEtcdTxn, durable: true, openEtcd: openEtcdTxn},
		row{name: RowSubmitEtcd, durable: true, openEtcd: openSubmitEtcd})
}

func lookupRow(name string) (row, bool) {
	for _, r := range rows {
		if r.name == name {
			return r, true
		}
	}
	return row{}, false
}

// Run measures the selected rows at each writer count, one after another,
// and returns the results in table order, grouped by row.
func Run(ctx context.Context, opts Options) (*Report, error) {
	o, selected, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	dir, err := absDir(o.Dir)
	if err != nil {
		return nil, err
	}
	mem := startMemSampler()
	rep := &Report{Environment: environment(dir)}
	// Every (row, writer count) measured, in table order.
	type measured struct {
		rw      row
		writers int
		runs    []Result
	}
	var cells []*measured
	for _, rw := range selected {
		writers := o.Writers
		if rw.oneWriter {
			writers = []int{1}
		}
		for _, w := range writers {
			cells = append(cells, &measured{rw: rw, writers: w})
		}
	}
	for pass := range o.Repeat {
		for _, m := range cells {
			rw, w := m.rw, m.writers
			if err := ctx.Err(); err != nil {
				mem.stop()
				return nil, err
			}
			progressf(o.Progress, "bench: %s, %d writers, %v (pass %d of %d)\n", rw.name, w, o.Duration, pass+1, o.Repeat)
			res, err := measureRow(ctx, rw, dir, o.NewEtcdClient, w, o.Duration)
			if err != nil {
				mem.stop()
				return nil, fmt.Errorf("bench: %s with %d writers: %w", rw.name, w, err)
			}
			progressf(o.Progress, "bench: %s, %d writers: %.0f ops/s, p99 %.0f µs\n", rw.name, w, res.OpsPerSec, res.P99Micros)
			m.runs = append(m.runs, res)
		}
	}
	for _, m := range cells {
		rep.Results = append(rep.Results, median(m.runs))
	}
	rep.Environment.PeakHeapSys = mem.stop()
	rep.Environment.PeakRSS = peakRSS()
	return rep, nil
}

// median returns the result with the median rate (the lower of the two
// middle ones for an even count), with every run's rate in Runs and p99
// in RunsP99Micros.
func median(rs []Result) Result {
	rates, p99s := make([]float64, len(rs)), make([]float64, len(rs))
	for i, r := range rs {
		rates[i], p99s[i] = r.OpsPerSec, r.P99Micros
	}
	sorted := slices.Clone(rs)
	slices.SortStableFunc(sorted, func(a, b Result) int { return cmp.Compare(a.OpsPerSec, b.OpsPerSec) })
	m := sorted[(len(sorted)-1)/2]
	m.Runs, m.RunsP99Micros = rates, p99s
	return m
}

// resolve fills in defaults and checks opts.
func (opts Options) resolve() (Options, []row, error) {
	o := opts
	if o.Writers == nil {
		o.Writers = DefaultWriters
	}
	if len(o.Writers) == 0 {
		return o, nil, fmt.Errorf("%w: no writer count", ErrInvalidOptions)
	}
	for _, w := range o.Writers {
		if w < 1 || w > MaxWriters {
			return o, nil, fmt.Errorf("%w: writer count %d is not between 1 and %d", ErrInvalidOptions, w, MaxWriters)
		}
	}
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.Repeat == 0 {
		o.Repeat = 1
	}
	if o.Repeat < 0 {
		return o, nil, fmt.Errorf("%w: negative repeat count", ErrInvalidOptions)
	}
	if o.Duration < 0 {
		return o, nil, fmt.Errorf("%w: negative duration", ErrInvalidOptions)
	}
	var selected []row
	for _, name := range o.Rows {
		r, ok := lookupRow(name)
		if !ok {
			return o, nil, fmt.Errorf("%w: %q (rows: %s)", ErrUnknownRow, name, strings.Join(Rows(), ", "))
		}
		if r.openEtcd != nil && o.NewEtcdClient == nil {
			return o, nil, fmt.Errorf("%w: row %s %v", ErrInvalidOptions, name, errNoEtcd)
		}
	}
	for _, r := range rows {
		if r.openEtcd != nil && o.NewEtcdClient == nil {
			continue
		}
		if o.Rows == nil || slices.Contains(o.Rows, r.name) {
			selected = append(selected, r)
		}
	}
	return o, selected, nil
}

// measureRow opens a fresh cell of rw in a new directory below dir,
// measures it, and removes the directory.
func measureRow(ctx context.Context, rw row, dir string, etcd func() (*clientv3.Client, error), writers int, d time.Duration) (res Result, err error) {
	sub, err := os.MkdirTemp(dir, "kvfence-bench-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(sub)
	var c cell
	if rw.openEtcd != nil {
		c, err = rw.openEtcd(ctx, sub, etcd)
	} else {
		c, err = rw.open(ctx, sub, writers)
	}
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if cerr := c.close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	m, err := measureFor(ctx, c, writers, d)
	if err != nil {
		return Result{}, err
	}
	return m.result(rw, writers), nil
}

func absDir(dir string) (string, error) {
	if dir == "" {
		dir = "."
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %s is not a directory", ErrInvalidOptions, dir)
	}
	return dirAbs(dir)
}

func progressf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format, args...)
	}
}

func environment(dir string) Environment {
	return Environment{
		Date:       time.Now().UTC(),
		GoVersion:  runtime.Version(),
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		CPUs:       runtime.NumCPU(),
		CPUModel:   cpuModel(),
		Dir:        dir,
		FileSystem: fileSystem(dir),
	}
}
