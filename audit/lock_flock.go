//go:build darwin || dragonfly || freebsd || netbsd || openbsd || (linux && kvfenceosfile)

package audit

import (
	"os"
	"syscall"
)

// tryLockFile takes a shared or an exclusive flock on the open file
// without waiting, and reports whether it got it.
func tryLockFile(f *os.File, shared bool) (bool, error) { return flockNB(int(f.Fd()), shared) }

// unlockFile releases tryLockFile's lock.
func unlockFile(f *os.File) { syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
