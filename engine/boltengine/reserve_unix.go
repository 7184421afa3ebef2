//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package boltengine

import (
	"math"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// boltAllocSize is bbolt's default allocation step (its DefaultAllocSize,
// which it does not export): the most a large file grows by beyond need.
const boltAllocSize = 16 << 20

// freeSpace returns the bytes the database file can still grow by: the
// free space of its volume available to this process, and no more than
// the process's file-size limit (RLIMIT_FSIZE) leaves beyond the file's
// current size and its next growth step.
func freeSpace(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &st); err != nil {
		return 0, err
	}
	free := uint64(st.Bavail) * uint64(st.Bsize)
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &rl); err == nil && rl.Cur != unix.RLIM_INFINITY {
		fi, err := os.Stat(path)
		if err != nil {
			return 0, err
		}
		// bbolt grows the file ahead of need: to the next doubling of its
		// map while small, then by its allocation step. Under a file-size
		// limit that growth itself needs room, so the next step is counted
		// as used: a write that needs the file to grow must fit.
		size := uint64(fi.Size())
		used := size + min(size, uint64(boltAllocSize))
		room := uint64(0)
		if used < rl.Cur {
			room = rl.Cur - used
		}
		free = min(free, room)
	}
	return int64(min(free, math.MaxInt64)), nil
}
