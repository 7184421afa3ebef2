//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package boltengine

// cpuTime is not measured on this platform.
func cpuTime() int64 { return 0 }
