package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvfence/kvfence/kvfence"
)

// DefaultScaleSizes are the receiver sizes Scale measures when
// ScaleOptions.Sizes is nil. LargeScaleSize is added by callers that ask
// for the large run (KVFENCE_BENCH_LARGE=1 in this package's benchmarks).
var DefaultScaleSizes = []int{1_000, 10_000, 100_000}

// LargeScaleSize is the largest receiver size the benchmarks build.
const LargeScaleSize = 1_000_000

// DefaultScaleOps is the number of Submits timed at each size when
// ScaleOptions.Ops is zero.
const DefaultScaleOps = 1000

// ScaleOptions configures Scale.
type ScaleOptions struct {
	// Dir is where the receiver is built, in a new directory that is
	// removed afterwards. Empty means the current directory.
	Dir string
	// Sizes are the numbers of scopes, each with a target, a grant and a
	// receipt, to measure at, in increasing order; the receiver grows from
	// one to the next. Nil means DefaultScaleSizes.
	Sizes []int
	// Ops is the number of Submits timed at each size, at most the
	// smallest size. Zero means DefaultScaleOps.
	Ops int
	// Progress, if set, receives a line per step.
	Progress io.Writer
	// NewEtcdClient, if set, builds the receiver on the etcd cluster it
	// connects to instead of in a bbolt file: under a fresh prefix below
	// EtcdPrefixRoot, deleted afterwards, with its file anchor in Dir.
	// Each call must return a new client, as for Options.NewEtcdClient.
	// A member always syncs, so the receiver is grown durably, by
	// etcdSetupWorkers concurrent callers whose calls group commit
	// batches, and CPUP50Micros is left zero; FileBytes and the bytes
	// columns are the first endpoint's backend database instead (see
	// ScaleResult).
	NewEtcdClient func() (*clientv3.Client, error)
}

// ScaleResult is Submit measured on a receiver of one size. The JSON keys
// are stable; new keys may be added.
type ScaleResult struct {
	// Size is the number of scopes, and of targets, grants and receipts:
	// each scope was created with a target and had one write applied.
	Size int `json:"size"`
	// AuditEntries is the audit chain's length when the Submits were timed.
	AuditEntries uint64 `json:"audit_entries"`
	// FileBytes is the database file's size after the timed Submits. On
	// etcd it is the size of the backend database of the member at the
	// first endpoint (Status's DbSize), which keeps every revision of
	// every key until the cluster is compacted.
	FileBytes int64 `json:"file_bytes"`
	// BuildSeconds is the time spent growing the receiver to Size from the
	// previous size, without fsync on a bbolt file.
	BuildSeconds float64 `json:"build_seconds"`
	// Ops is the number of durable Submits timed, one at a time.
	Ops int `json:"ops"`
	// SubmitP50Micros is the durable Submits' median latency.
	SubmitP50Micros float64 `json:"submit_p50_us"`
	// SubmitP99Micros is the durable Submits' 99th percentile latency.
	SubmitP99Micros float64 `json:"submit_p99_us"`
	// OpsPerSec is the durable Submits' rate.
	OpsPerSec float64 `json:"ops_per_s"`
	// CPUP50Micros is the median of the same Submit on the receiver opened
	// without fsync and with its anchor in memory: what the database's size
	// can change, without the disk. Zero on etcd, which has no such mode.
	CPUP50Micros float64 `json:"cpu_p50_us"`
	// AllocsPerOp is heap allocations per durable Submit.
	AllocsPerOp float64 `json:"allocs_per_op"`
	// BytesPerSubmit is the growth of the bytes bbolt uses for data (pages'
	// used parts, summed over the buckets) per applied Submit: its receipt
	// and audit entry. On etcd it is the growth of the member's backend
	// in use (Status's DbSizeInUse: its pages less the free ones), which
	// includes the revisions that the writes superseded.
	BytesPerSubmit float64 `json:"bytes_per_submit"`
	// BytesPerAction is BytesPerSubmit plus the activation and the hold
	// that a fenced write needs: its grant and their audit entries.
	BytesPerAction float64 `json:"bytes_per_action"`
	// PeakHeapSys is the process's peak HeapSys so far, as in Environment.
	PeakHeapSys uint64 `json:"peak_heap_sys_bytes"`
	// PeakRSS is the process's peak resident set so far, as in
	// Environment.
	PeakRSS uint64 `json:"peak_rss_bytes"`
}

// Scale builds one receiver up to each size in turn and measures durable
// Submits of applied writes on it: how Submit's cost, the database's growth
// per write and the process's memory change as scopes, targets, receipts
// and audit entries grow.
func Scale(ctx context.Context, opts ScaleOptions) ([]ScaleResult, error) {
	sizes := opts.Sizes
	if sizes == nil {
		sizes = DefaultScaleSizes
	}
	ops := opts.Ops
	if ops == 0 {
		ops = DefaultScaleOps
	}
	if len(sizes) == 0 || ops < 0 {
		return nil, fmt.Errorf("%w: scale sizes %v, ops %d", ErrInvalidOptions, sizes, ops)
	}
	for i, n := range sizes {
		if n < ops || (i > 0 && n <= sizes[i-1]) {
			return nil, fmt.Errorf("%w: scale sizes must increase and be at least ops (%d): %v", ErrInvalidOptions, ops, sizes)
		}
	}
	dir, err := absDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	sub, err := os.MkdirTemp(dir, "kvfence-scale-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(sub)
	var s scaleStore
	if opts.NewEtcdClient != nil {
		s, err = newEtcdScale(sub, opts.NewEtcdClient)
	} else {
		s, err = newScaleReceiver(sub)
	}
	if err != nil {
		return nil, err
	}
	out, err := scale(ctx, s, sizes, ops, opts.Progress)
	return out, errors.Join(err, s.close())
}

// scale grows s through sizes and measures it at each.
func scale(ctx context.Context, s scaleStore, sizes []int, ops int, progress io.Writer) ([]ScaleResult, error) {
	mem := startMemSampler()
	defer mem.stop()
	var out []ScaleResult
	for _, size := range sizes {
		progressf(progress, "scale: building %d scopes\n", size)
		start := time.Now()
		if err := s.grow(ctx, size, progress); err != nil {
			return nil, err
		}
		res := ScaleResult{Size: size, BuildSeconds: time.Since(start).Seconds(), Ops: ops}
		progressf(progress, "scale: %d scopes built in %.0fs; timing %d Submits\n", size, res.BuildSeconds, ops)
		if err := measureScale(ctx, s, &res); err != nil {
			return nil, err
		}
		res.PeakHeapSys, res.PeakRSS = mem.peakNow(), peakRSS()
		progressf(progress, "scale: %d scopes: %+v\n", size, res)
		out = append(out, res)
	}
	return out, nil
}

// scaleStore is a receiver that Scale grows and measures: in a bbolt
// file (scaleReceiver) or on etcd (etcdScale).
type scaleStore interface {
	// grow adds units (a scope with a target and one applied write)
	// until there are size.
	grow(ctx context.Context, size int, progress io.Writer) error
	// prepare activates n scopes, round-robin, for applied writes, and
	// returns their envelopes.
	prepare(ctx context.Context, n int) ([][]byte, error)
	// timed returns the durable receiver and its fsync count.
	timed() (*kvfence.Receiver, func() (float64, error))
	// dataBytes is the bytes the store uses for data; sizeBytes its size.
	dataBytes(ctx context.Context) (int64, error)
	sizeBytes(ctx context.Context) (int64, error)
	// cpuP50 times n applied Submits on the receiver without the disk
	// and returns their median latency in nanoseconds; ok is false, and
	// nothing done, where the store has no such mode.
	cpuP50(ctx context.Context, n int) (p50 float64, ok bool, err error)
	close() error
}

// scaleReceiver is a receiver whose scopes 0 to units-1 each have a
// target, a grant and a receipt, and that prepares further applied writes
// on them round-robin.
type scaleReceiver struct {
	*receiver
	units int
	// next is the scope the next prepared write goes to; ops counts the
	// writes prepared, for distinct action ids.
	next int
	ops  int64
}

func newScaleReceiver(dir string) (*scaleReceiver, error) {
	f, err := newReceiver(dir)
	if err != nil {
		return nil, err
	}
	return &scaleReceiver{receiver: f}, nil
}

// buildWorkers is how many goroutines build units concurrently; the
// receiver serialises their transactions, and they overlap the work
// outside them.
const buildWorkers = 4

// buildBatch is the number of units built between progress lines.
const buildBatch = 50_000

// grow adds units until there are size, each a scope with a target and
// one applied write, all without fsync.
func (s *scaleReceiver) grow(ctx context.Context, size int, progress io.Writer) error {
	return s.setup(func(r *kvfence.Receiver, a *kvfence.Admin) error {
		for s.units < size {
			lo, hi := s.units, min(size, s.units+buildBatch)
			var wg sync.WaitGroup
			errs := make([]error, buildWorkers)
			for w := range buildWorkers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := lo + w; i < hi && errs[w] == nil; i += buildWorkers {
						errs[w] = buildUnit(ctx, r, a, i)
					}
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return err
			}
			s.units = hi
			if hi < size {
				progressf(progress, "scale: %d scopes\n", hi)
			}
		}
		return nil
	})
}

// buildUnit creates scope i with its target and applies one write to it.
func buildUnit(ctx context.Context, r *kvfence.Receiver, a *kvfence.Admin, i int) error {
	if err := createScopes(ctx, a, i, i+1); err != nil {
		return err
	}
	env, err := activateWrite(ctx, a, i, "build", benchExecutor, int64(i))
	if err != nil {
		return err
	}
	return submitApplied(ctx, r, env)
}

func submitApplied(ctx context.Context, r *kvfence.Receiver, env []byte) error {
	res, err := r.Submit(ctx, benchExecutor, env)
	if err != nil {
		return err
	}
	if res.Outcome != kvfence.Applied {
		return fmt.Errorf("bench: %s %s: %s", res.Outcome, res.Reason, res.Detail)
	}
	return nil
}

// prepare activates n scopes from next onwards, round-robin, for applied
// writes, and returns their envelopes. Every scope is open with a used
// grant from the build or an earlier round, so it is held first, in bulk.
func (s *scaleReceiver) prepare(ctx context.Context, n int) ([][]byte, error) {
	if n > s.units {
		return nil, fmt.Errorf("bench: %d writes prepared at once on %d scopes", n, s.units)
	}
	scopes := make([]int, n)
	for k := range scopes {
		scopes[k] = s.next
		s.next = (s.next + 1) % s.units
	}
	envs := make([][]byte, n)
	err := s.setup(func(_ *kvfence.Receiver, a *kvfence.Admin) error {
		for lo := 0; lo < n; lo += holdChunk {
			chunk := scopes[lo:min(lo+holdChunk, n)]
			names := make([]string, len(chunk))
			for k, i := range chunk {
				names[k] = scopeName(i)
			}
			if _, err := a.Hold(ctx, kvfence.HoldRequest{Scopes: names, Reason: "bench: next round"}); err != nil {
				return err
			}
		}
		for k, i := range scopes {
			s.ops++
			env, err := activateWrite(ctx, a, i, fmt.Sprintf("op-%d", s.ops), benchExecutor, s.ops)
			if err != nil {
				return err
			}
			envs[k] = env
		}
		return nil
	})
	return envs, err
}

// dataBytes returns the bytes bbolt uses for keys, values and page
// headers, summed over every bucket. The receiver is closed meanwhile.
func (s *scaleReceiver) dataBytes(context.Context) (n int64, err error) {
	err = s.offline(func() error {
		db, err := bolt.Open(s.path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
		if err != nil {
			return err
		}
		defer db.Close()
		return db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(_ []byte, b *bolt.Bucket) error {
				st := b.Stats()
				n += int64(st.BranchInuse + st.LeafInuse + st.InlineBucketInuse)
				return nil
			})
		})
	})
	return n, err
}

func (s *scaleReceiver) sizeBytes(context.Context) (int64, error) { return fileSize(s.path) }

func (s *scaleReceiver) timed() (*kvfence.Receiver, func() (float64, error)) { return s.r, s.syncs }

// cpuP50 prepares n writes and submits them on the receiver opened
// without fsync and with its anchor in memory.
func (s *scaleReceiver) cpuP50(ctx context.Context, n int) (p50 float64, ok bool, err error) {
	envs, err := s.prepare(ctx, n)
	if err != nil {
		return 0, false, err
	}
	err = s.offline(func() error {
		r, err := s.openFast()
		if err != nil {
			return err
		}
		c := &envCell{r: r, envs: envs, sync: func() (float64, error) { return 0, nil }}
		m := &measurement{lat: make([][]int64, 1)}
		err = drive(ctx, c, m, 0, int64(len(envs)), time.Time{})
		p50 = percentiles(m.lat, 0.5)[0]
		return errors.Join(err, r.Close())
	})
	return p50, true, err
}

// measureScale times res.Ops durable Submits of applied writes, one at a
// time, and the same number without the disk where the store can, and
// measures the store's growth.
func measureScale(ctx context.Context, s scaleStore, res *ScaleResult) error {
	bytes0, err := s.dataBytes(ctx)
	if err != nil {
		return err
	}
	envs, err := s.prepare(ctx, res.Ops)
	if err != nil {
		return err
	}
	bytes1, err := s.dataBytes(ctx)
	if err != nil {
		return err
	}
	r, syncs := s.timed()
	res.AuditEntries = r.Head().Seq
	c := &envCell{r: r, envs: envs, sync: syncs}
	m := &measurement{lat: make([][]int64, 1)}
	if err := drive(ctx, c, m, 0, int64(len(envs)), time.Time{}); err != nil {
		return err
	}
	bytes2, err := s.dataBytes(ctx)
	if err != nil {
		return err
	}
	p := percentiles(m.lat, 0.5, 0.99)
	res.SubmitP50Micros, res.SubmitP99Micros = p[0]/1e3, p[1]/1e3
	res.OpsPerSec = float64(m.ops) / m.elapsed.Seconds()
	res.AllocsPerOp = float64(m.mallocs) / float64(m.ops)
	res.BytesPerSubmit = float64(bytes2-bytes1) / float64(m.ops)
	res.BytesPerAction = float64(bytes2-bytes0) / float64(m.ops)
	if res.FileBytes, err = s.sizeBytes(ctx); err != nil {
		return err
	}
	// The same Submits without the disk.
	p50, _, err := s.cpuP50(ctx, res.Ops)
	res.CPUP50Micros = p50 / 1e3
	return err
}

// envCell submits prepared envelopes that must apply.
type envCell struct {
	r    *kvfence.Receiver
	envs [][]byte
	sync func() (float64, error)
}

func (c *envCell) op(ctx context.Context, _ int, i int64) error {
	env := c.envs[i]
	c.envs[i] = nil
	return submitApplied(ctx, c.r, env)
}

func (c *envCell) syncs() (float64, error) { return c.sync() }
func (c *envCell) close() error            { return nil }
