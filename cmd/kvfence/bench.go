package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvfence/kvfence/bench"
)

// BenchCommand measures durable fenced writes next to the disk's fsync
// limit, plain bbolt and SQLite, all in one run on one disk (package
// bench).
type BenchCommand struct{ m *Main }

// Run runs the command.
func (c *BenchCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("bench")
	writers := fs.String("writers", "1,8,64", "")
	duration := fs.Duration("duration", bench.DefaultDuration, "")
	dir := fs.String("dir", ".", "")
	rowsFlag := fs.String("rows", "", "")
	plot := fs.String("plot", "", "")
	repeat := fs.Int("repeat", 1, "")
	asJSON := fs.Bool("json", false, "")
	var ef etcdFlags
	ef.register(fs)
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	if err := ef.check("bench"); err != nil {
		return err
	}
	ws, err := parseWriters(*writers)
	if err != nil {
		return err
	}
	if *duration <= 0 {
		return &usageError{msg: "kvfence bench: --duration must be positive", hint: "kvfence bench -h"}
	}
	if *repeat < 1 {
		return &usageError{msg: "kvfence bench: --repeat must be at least 1", hint: "kvfence bench -h"}
	}
	opts := bench.Options{Dir: *dir, Writers: ws, Duration: *duration, Repeat: *repeat, Progress: terminal(c.m.Stderr)}
	if *rowsFlag != "" {
		opts.Rows = strings.Split(*rowsFlag, ",")
	}
	if ef.on() {
		opts.NewEtcdClient = func() (*clientv3.Client, error) { return ef.client("bench") }
	}
	rep, err := bench.Run(ctx, opts)
	if errors.Is(err, bench.ErrUnknownRow) || errors.Is(err, bench.ErrInvalidOptions) {
		return &usageError{msg: "kvfence " + err.Error(), hint: "kvfence bench -h"}
	}
	if err != nil {
		return err
	}
	if *plot != "" {
		if err := writePlot(*plot, rep); err != nil {
			return err
		}
	}
	if *asJSON {
		return writeJSON(c.m.Stdout, rep)
	}
	env := rep.Environment
	fmt.Fprintf(c.m.Stdout, "%s, %s %s/%s, %d CPUs %s, %s on %s\n", env.Date.Format(time.RFC3339), env.GoVersion,
		env.GOOS, env.GOARCH, env.CPUs, env.CPUModel, env.Dir, orDash(env.FileSystem))
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "name\twriters\tops/s\tp50 µs\tp99 µs\tfsyncs/op\tallocs/op\tdurable")
	if *repeat > 1 {
		fmt.Fprintf(tw, "\tops/s of each pass")
	}
	fmt.Fprintln(tw)
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.3f\t%.0f\t%v", r.Name, r.Writers, r.OpsPerSec,
			r.P50Micros, r.P99Micros, r.FsyncsPerOp, r.AllocsPerOp, r.Durable)
		if *repeat > 1 {
			fmt.Fprintf(tw, "\t%s", rates(r.Runs))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.m.Stdout, "peak heap %.1f MiB, peak RSS %.1f MiB\n",
		float64(env.PeakHeapSys)/(1<<20), float64(env.PeakRSS)/(1<<20))
	return err
}

// rates formats the rates of every pass: "810 774 902".
func rates(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.FormatFloat(r, 'f', 0, 64)
	}
	return strings.Join(parts, " ")
}

// parseWriters parses a comma-separated list of writer counts.
func parseWriters(s string) ([]int, error) {
	var ws []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > bench.MaxWriters {
			return nil, &usageError{msg: fmt.Sprintf("kvfence bench: --writers %q: want a comma-separated list of counts from 1 to %d", s, bench.MaxWriters),
				hint: "kvfence bench --writers 1,8,64"}
		}
		ws = append(ws, n)
	}
	return ws, nil
}

// writePlot writes the SVG chart of rep to path, replacing it.
func writePlot(path string, rep *bench.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	env := rep.Environment
	title := fmt.Sprintf("kvfence bench, %s, %d CPUs, %s", env.Date.Format("2006-01-02"), env.CPUs, orDash(env.FileSystem))
	if err := bench.Plot(f, rep.Results, title); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// terminal returns w when it is a terminal, for progress lines, and nil
// otherwise, so that logs and tests stay clean.
func terminal(w io.Writer) io.Writer {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return f
}

// Usage prints the command's help.
func (c *BenchCommand) Usage() {
	fmt.Fprintf(c.m.Stderr, `Usage: kvfence bench [--writers 1,8,64] [--duration D] [--repeat N] [--dir DIR]
                     [--rows NAME,...] [--plot FILE.svg] [--json] [--etcd URL[,URL...]]

Measures, in one run and on one disk, what a durable fenced write costs
next to the disk's limit and the stores it could be built on. Each row runs
at each writer count for --duration, after its setup and a warm-up:

	fdatasync                       a 256-byte append to one file, then fdatasync
	bbolt_update                    one 256-byte put per bbolt Update
	bbolt_batch                     the same put through bbolt's DB.Batch
	bbolt_nosync_not_durable        the same put without fsync: CPU only, not durable
	kvfence_submit                  an applied fenced write, file anchor included
	kvfence_submit_https            the same write through the Go client over loopback mTLS
	kvfence_submit_witnessed        the same write cosigned by 2 of 3 witnesses on loopback
	kvfence_denied                  a stale envelope, denied and recorded in the audit chain
	kvfence_lifecycle               activate, submit and hold of one action
	kvfence_hold                    an administrator's hold of one scope on an idle receiver,
	                                one at a time (measured with 1 writer only)
	kvfence_hold_under_flood        the same hold while 64 workers submit, half with stale
	                                envelopes; fsyncs/op counts the flood's commits too
	sqlite_fenced                   the same fenced transaction on SQLite, WAL, synchronous=FULL
	                                (a plain build only: not with -race or the lab's tag)
	sqlite_fenced_rollback_journal  the same with journal_mode=DELETE, synchronous=FULL
	etcd_txn                        with --etcd: one 256-byte Put per Txn, the cluster's own
	                                limit (fsyncs/op 0: the members' syncs are not counted)
	kvfence_submit_etcd             with --etcd: kvfence_submit on the etcd engine, file anchor
	                                (fsyncs/op: the anchor's only)

Prints a table of ops/s, latency percentiles, fsync-like calls and heap
allocations per operation. fsyncs/op is computed from the commits counted
and the calls each commit makes ("go doc ./bench" explains how). Progress
goes to stderr when it is a terminal.

With --json: {"results":[{"name","writers","ops_per_s","p50_us","p99_us",
"fsyncs_per_op","allocs_per_op","ops","seconds","durable","runs_ops_per_s",
"runs_p99_us"}],
"environment":
{"date","go_version","goos","goarch","cpus","cpu_model","dir","file_system",
"peak_heap_sys_bytes","peak_rss_bytes"}}.

Exit codes: 0 success, 1 a measurement failed, 2 usage error.

Arguments:

	--writers LIST
	    Comma-separated numbers of concurrent writers (default 1,8,64).
	--duration DURATION
	    Measured time per row and writer count (default %v).
	--repeat N
	    Measure the whole table N times over, pass after pass, and report
	    for each row and writer count the pass with the median rate
	    (default 1). On a disk or CPU shared with other work, a passing
	    stall then does not decide a ratio.
	--dir DIR
	    Where the databases are created, each in a new directory removed
	    afterwards; it decides the disk measured (default: the current
	    directory). Not tmpfs, where fsync does nothing.
	--rows LIST
	    Comma-separated row names to run (default: all).
	--plot FILE.svg
	    Also write an SVG chart of ops/s against writers, one line per row.
	--etcd URL[,URL...]
	    Also measure the etcd rows on this cluster, under a fresh prefix
	    below /kvfence-bench/ that is deleted afterwards.
`+usageEtcdTLS+usageJSON, bench.DefaultDuration)
}
