//go:build !windows && !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package audit

import (
	"os"
	"sync"
)

// fileLock serialises FileAnchor writes within this process on platforms
// without flock; writers in other processes are not excluded there.
var fileLock sync.Mutex

// tryLockFile takes the process-wide lock without waiting: without flock,
// readers in this process exclude each other too, and other processes are
// not excluded.
func tryLockFile(_ *os.File, _ bool) (bool, error) { return fileLock.TryLock(), nil }

func unlockFile(*os.File) { fileLock.Unlock() }
