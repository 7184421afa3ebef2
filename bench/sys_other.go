//go:build !linux

package bench

import "os"

// fdatasync flushes f; where fdatasync(2) is not available it is fsync.
func fdatasync(f *os.File) error { return f.Sync() }

// peakRSS returns 0: the platform has no VmHWM.
func peakRSS() uint64 { return 0 }

// cpuModel returns "": the platform does not tell it through a file.
func cpuModel() string { return "" }

// fileSystem returns "": the platform's statfs differs.
func fileSystem(string) string { return "" }
