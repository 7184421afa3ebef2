//go:build unix

package kvfence

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// processCPU is the process's user and system CPU time so far, in ns.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkSubmitCPU measures the CPU an applied fenced write costs, with
// 64 writers and without fsync, so that the disk's latency does not hide
// it: cpu-ns/op is the process's CPU time over the timed part per call.
// Every call is an applied write of its own scope, target and grant.
func BenchmarkSubmitCPU(b *testing.B) {
	const writers = 64
	r, envs := parallelBenchFixture(b, b.N)
	r.Close()
	r, err := Open(r.path, &Options{Key: testKey, Anchor: r.opts.Anchor, Now: r.opts.Now, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	ctx := context.Background()
	b.ResetTimer()
	cpu := processCPU(b)
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
	cpu = processCPU(b) - cpu
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}
