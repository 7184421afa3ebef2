//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package audit

import "syscall"

// flockNB takes a shared or an exclusive flock on fd without waiting, and
// reports whether it got it. flock locks belong to the open file
// description, so this excludes other processes and other descriptors in
// this one alike.
func flockNB(fd int, shared bool) (bool, error) {
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
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
