package peercred

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Cred is what the kernel recorded of the peer process.
type Cred struct {
	// PID is the peer's process id.
	PID int32
	// UID is the peer's user id.
	UID uint32
	// GID is the peer's group id.
	GID uint32
}

// Of returns the credentials of the process at the other end of c: for a
// server's connection, the client that connected; for a client's, the
// process that made the listening socket.
func Of(c *net.UnixConn) (Cred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Cred{}, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Cred{}, err
	}
	if serr != nil {
		return Cred{}, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return Cred{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}, nil
}
