//go:build darwin || dragonfly || freebsd || netbsd || openbsd || (linux && kvfenceosfile)

package audit

import (
	"os"
	"syscall"
)

// tryLockFile takes a shared or an exclusive flock on the open file
// without waiting, and reports whether it got it.
func tryLockFile(f *os.File, shared bool) (bool, error) {
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	fd := int(f.Fd())
	for {
		err := syscall.Flock(fd, how|syscall.LOCK_NB)
		switch err {
		case nil:
			return true, nil
		case syscall.EWOULDBLOCK:
			return false, nil
		case syscall.EINTR:
			continue
		}
		return false, err
	}
}

// unlockFile releases tryLockFile's lock.
func unlockFile(f *os.File) { syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
