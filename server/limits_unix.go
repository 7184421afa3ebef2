//go:build unix

package server

import "golang.org/x/sys/unix"

func descriptorLimit() (uint64, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	// Cur is int64 on some systems, where RLIM_INFINITY is -1.
	return uint64(rl.Cur), nil
}
