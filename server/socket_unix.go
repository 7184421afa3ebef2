//go:build unix

package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

func listenUnixSocket(path string, opts UnixSocketOptions) (net.Listener, error) {
	dir, name := filepath.Split(filepath.Clean(path))
	if name == "" || name == "." || name == ".." {
		return nil, fmt.Errorf("admin socket %q: not a file name", path)
	}
	if dir == "" {
		dir = "."
	}
	dfd, err := socketDir(filepath.Clean(dir), opts.Group)
	if err != nil {
		return nil, err
	}
	keep := false
	defer func() {
		if !keep {
			unix.Close(dfd)
		}
	}()
	// Within the checked directory only this user can add, remove or
	// replace names, so what is found there by name through dfd stays what
	// it is.
	var st unix.Stat_t
	switch err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && st.Mode&unix.S_IFMT != unix.S_IFSOCK:
		return nil, fmt.Errorf("admin socket %s exists and is not a socket; refusing to replace it", path)
	case err == nil:
		// Left by a previous run: this process holds the database's
		// lock, so no other serve of this receiver is using it.
		if err := unix.Unlinkat(dfd, name, 0); err != nil {
			return nil, &fs.PathError{Op: "remove", Path: path, Err: err}
		}
	case !errors.Is(err, unix.ENOENT):
		return nil, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (net.Listener, error) {
		l.Close()
		return nil, err
	}
	// Listen resolved the path again. The socket it made must be the one
	// in the checked directory, and the path must still lead there.
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fail(fmt.Errorf("%w: %s: the socket is not in the checked directory", ErrUnsafeSocketDirectory, path))
	}
	var lst unix.Stat_t
	if err := unix.Lstat(path, &lst); err != nil || lst.Dev != st.Dev || lst.Ino != st.Ino {
		return fail(fmt.Errorf("%w: %s: the path no longer leads to the socket just created", ErrUnsafeSocketDirectory, path))
	}
	// Until now the socket had the umask's mode, in a directory nobody
	// else can enter.
	mode := uint32(0o600)
	if opts.Group != nil {
		mode = 0o660
		if err := unix.Fchownat(dfd, name, -1, int(*opts.Group), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fail(&fs.PathError{Op: "chgrp", Path: path, Err: err})
		}
	}
	if err := unix.Fchmodat(dfd, name, mode, 0); err != nil {
		return fail(&fs.PathError{Op: "chmod", Path: path, Err: err})
	}
	// Closing removes the socket through the directory's descriptor, not
	// by path: a path whose parents changed meanwhile could lead to
	// another directory's file of that name.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	keep = true
	return &unixSocketListener{Listener: l, dfd: dfd, name: name, uids: slices.Clone(opts.UIDs)}, nil
}

// unixSocketListener is an admin socket's listener, which removes its
// socket from the checked directory when closed.
type unixSocketListener struct {
	net.Listener
	dfd  int
	name string
	once sync.Once
	uids []uint32 // admitted peers; nil: all
}

// Accept returns the next connection from an admitted peer, closing
// every other one as it comes: a peer whose credentials cannot be read is
// not admitted either.
func (l *unixSocketListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.uids == nil {
			return c, err
		}
		cred, err := peerCredentials(c)
		if err == nil && slices.Contains(l.uids, cred.UID) {
			return c, nil
		}
		c.Close()
	}
}

// Close stops listening and removes the socket.
func (l *unixSocketListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() {
		var st unix.Stat_t
		if unix.Fstatat(l.dfd, l.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
			unix.Unlinkat(l.dfd, l.name, 0)
		}
		unix.Close(l.dfd)
	})
	return err
}

// socketDir returns a descriptor of dir, created 0700 (0750 with group)
// if it does not exist, after checking that only this user can change it.
func socketDir(dir string, group *uint32) (int, error) {
	var want uint32 = 0o700
	if group != nil {
		want = 0o750
	}
	created := false
	var lst unix.Stat_t
	err := unix.Lstat(dir, &lst)
	if errors.Is(err, unix.ENOENT) {
		if err := unix.Mkdir(dir, want); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("admin socket directory: %w", &fs.PathError{Op: "mkdir", Path: dir, Err: err})
		} else if err == nil {
			created = true
		}
		err = unix.Lstat(dir, &lst)
	}
	if err != nil {
		return -1, fmt.Errorf("admin socket directory: %w", &fs.PathError{Op: "lstat", Path: dir, Err: err})
	}
	if lst.Mode&unix.S_IFMT != unix.S_IFDIR {
		return -1, fmt.Errorf("%w: %s is not a directory (a symbolic link or another file)", ErrUnsafeSocketDirectory, dir)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("admin socket directory: %w", &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	fail := func(err error) (int, error) {
		unix.Close(fd)
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail(fmt.Errorf("admin socket directory: %w", &fs.PathError{Op: "stat", Path: dir, Err: err}))
	}
	if st.Dev != lst.Dev || st.Ino != lst.Ino {
		return fail(fmt.Errorf("%w: %s changed while it was being opened", ErrUnsafeSocketDirectory, dir))
	}
	if uid := os.Geteuid(); st.Uid != uint32(uid) {
		return fail(fmt.Errorf("%w: %s is owned by uid %d, not by this service's uid %d", ErrUnsafeSocketDirectory, dir, st.Uid, uid))
	}
	if created {
		// Mkdir's mode went through the umask; set it exactly.
		if group != nil {
			if err := unix.Fchown(fd, -1, int(*group)); err != nil {
				return fail(fmt.Errorf("admin socket directory: %w", &fs.PathError{Op: "chgrp", Path: dir, Err: err}))
			}
		}
		if err := unix.Fchmod(fd, want); err != nil {
			return fail(fmt.Errorf("admin socket directory: %w", &fs.PathError{Op: "chmod", Path: dir, Err: err}))
		}
		return fd, nil
	}
	perm := st.Mode & 0o7777
	if perm&0o022 != 0 {
		return fail(fmt.Errorf("%w: %s has mode %04o: group or others may write it", ErrUnsafeSocketDirectory, dir, perm))
	}
	if group != nil && !(st.Gid == *group && perm&0o010 != 0) && perm&0o001 == 0 {
		return fail(fmt.Errorf("%w: %s (mode %04o, group %d) does not let group %d reach the socket; remove it and serve creates it 0750",
			ErrUnsafeSocketDirectory, dir, perm, st.Gid, *group))
	}
	return fd, nil
}
