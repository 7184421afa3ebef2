//go:build !kvfenceosfile

package audit

import (
	"io"
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// anchorFD is an open anchor file, used through system calls on its
// descriptor. An *os.File would cost every anchor write an allocation, a
// cleanup to register, a failed poller registration, and two fcntl calls
// for each use of its Fd; the file is only ever read and written at
// offsets, so none of that buys anything. The kvfenceosfile build tag
// selects the *os.File version (anchorfd_os.go) here too, so that it can
// be tested on Linux.
type anchorFD struct{ fd int }

// anchorStat is what FileAnchor needs to know about a file: its identity,
// its mode, in fs.FileMode terms, and its size.
type anchorStat struct {
	dev, ino uint64
	mode     fs.FileMode
	size     int64
}

// sameFile reports whether a and b describe the same file, as os.SameFile
// does.
func sameFile(a, b anchorStat) bool { return a.dev == b.dev && a.ino == b.ino }

// lstatAnchor describes the file at path without following a symbolic
// link. Its error is the one os.Lstat returns.
func lstatAnchor(path string) (anchorStat, error) {
	var st syscall.Stat_t
	for {
		err := syscall.Lstat(path, &st)
		if err == nil {
			return statOf(&st), nil
		}
		if err != syscall.EINTR {
			return anchorStat{}, &fs.PathError{Op: "lstat", Path: path, Err: err}
		}
	}
}

// openAnchorFD opens path with flag, as os.OpenFile does, errors included.
func openAnchorFD(path string, flag int) (anchorFD, error) {
	for {
		fd, err := syscall.Open(path, flag|syscall.O_CLOEXEC, 0)
		if err == nil {
			return anchorFD{fd}, nil
		}
		if err != syscall.EINTR {
			return anchorFD{-1}, &fs.PathError{Op: "open", Path: path, Err: err}
		}
	}
}

// stat describes the open file; its error is the one (*os.File).Stat
// returns.
func (a anchorFD) stat(path string) (anchorStat, error) {
	var st syscall.Stat_t
	for {
		err := syscall.Fstat(a.fd, &st)
		if err == nil {
			return statOf(&st), nil
		}
		if err != syscall.EINTR {
			return anchorStat{}, &fs.PathError{Op: "stat", Path: path, Err: err}
		}
	}
}

// readAt reads into b from offset off with one pread, returning 0 and no
// error at the end of the file; its error is the one (*os.File).ReadAt
// returns.
func (a anchorFD) readAt(path string, b []byte, off int64) (int, error) {
	for {
		n, err := syscall.Pread(a.fd, b, off)
		if err == nil {
			return n, nil
		}
		if err != syscall.EINTR {
			return 0, &fs.PathError{Op: "read", Path: path, Err: err}
		}
	}
}

// writeAt writes all of b at offset off; its error is the one
// (*os.File).WriteAt returns.
func (a anchorFD) writeAt(path string, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := syscall.Pwrite(a.fd, b, off)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return &fs.PathError{Op: "write", Path: path, Err: err}
		case n == 0:
			// A regular file takes at least one byte or says why not;
			// this is never expected, but must not loop.
			return &fs.PathError{Op: "write", Path: path, Err: io.ErrShortWrite}
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// tryLock takes a shared or an exclusive flock on the open file without
// waiting, and reports whether it got it.
func (a anchorFD) tryLock(shared bool) (bool, error) { return flockNB(a.fd, shared) }

// unlock releases tryLock's lock. Closing the descriptor would release it
// too, but not while a child process forked meanwhile still holds a copy
// of the descriptor; unlock releases it for every holder at once.
func (a anchorFD) unlock() { syscall.Flock(a.fd, syscall.LOCK_UN) }

// datasync makes the file's data durable with fdatasync(2), which skips
// the metadata that reading the data does not need, such as the
// modification time. FileAnchor writes only within the file's size, so
// nothing else is needed.
func (a anchorFD) datasync() error {
	if anchorSyncFault != nil {
		if err := anchorSyncFault(); err != nil {
			return err
		}
	}
	for {
		err := unix.Fdatasync(a.fd)
		if err != unix.EINTR {
			return err
		}
	}
}

// close closes the descriptor.
func (a anchorFD) close() { syscall.Close(a.fd) }

// statOf converts st as os.Lstat does, so that messages name the same
// modes.
func statOf(st *syscall.Stat_t) anchorStat {
	m := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFBLK:
		m |= fs.ModeDevice
	case syscall.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFDIR:
		m |= fs.ModeDir
	case syscall.S_IFIFO:
		m |= fs.ModeNamedPipe
	case syscall.S_IFLNK:
		m |= fs.ModeSymlink
	case syscall.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if st.Mode&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if st.Mode&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if st.Mode&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return anchorStat{dev: uint64(st.Dev), ino: uint64(st.Ino), mode: m, size: st.Size}
}
