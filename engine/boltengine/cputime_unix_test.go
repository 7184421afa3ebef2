//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package boltengine

import "syscall"

// cpuTime returns the CPU time the process has used, user and system, in
// nanoseconds: on a machine shared with other work it moves less than
// the wall-clock time a benchmark reports.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
