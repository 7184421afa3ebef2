//go:build unix

package kvfence

import (
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
	b.ResetTimer()
	cpu := processCPU(b)
	err = submitAll(r, envs, writers)
	cpu = processCPU(b) - cpu
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}
