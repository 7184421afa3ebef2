//go:build darwin || dragonfly || freebsd || netbsd || openbsd || (linux && kvfenceosfile)

package audit

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on the open file. flock locks belong
// to the open file description, so this excludes other processes and
// other calls in this one alike.
func lockFile(f *os.File) (unlock func(), err error) {
	fd := int(f.Fd())
	for {
		err = syscall.Flock(fd, syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return func() { syscall.Flock(fd, syscall.LOCK_UN) }, nil
}
