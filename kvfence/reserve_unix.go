//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package kvfence

import (
	"math"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// freeSpace returns the bytes the database file can still grow by: the
// free space of its volume available to this process, and no more than
// the process's file-size limit (RLIMIT_FSIZE) leaves beyond the file's
// current size.
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
		room := uint64(0)
		if size := uint64(fi.Size()); size < rl.Cur {
			room = rl.Cur - size
		}
		free = min(free, room)
	}
	return int64(min(free, math.MaxInt64)), nil
}
