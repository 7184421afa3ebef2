//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package audit

import (
	"os"
	"syscall"
)

// lockDir takes an exclusive flock on the open directory. flock locks
// belong to the open file description, so this excludes other processes
// and other calls in this one alike.
func lockDir(dir *os.File) (unlock func(), err error) {
	fd := int(dir.Fd())
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

// lockExcludesProcesses says that lockDir excludes writers in other
// processes too, so that a writer holding it may remove another's
// abandoned temporary file.
const lockExcludesProcesses = true
