//go:build darwin || dragonfly || freebsd || netbsd || openbsd || (linux && kvfenceosfile)

package audit

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on the open file. flock locks belong
// to the open file description, so this excludes other processes and
// other calls in this one alike.
func lockFile(f *os.File) error {
	fd := int(f.Fd())
	for {
		err := syscall.Flock(fd, syscall.LOCK_EX)
		if err != syscall.EINTR {
			return err
		}
	}
}

// lockFileShared takes a shared flock on the open file, which lockFile's
// lock excludes.
func lockFileShared(f *os.File) error {
	fd := int(f.Fd())
	for {
		err := syscall.Flock(fd, syscall.LOCK_SH)
		if err != syscall.EINTR {
			return err
		}
	}
}

// unlockFile releases lockFile's or lockFileShared's lock.
func unlockFile(f *os.File) { syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
