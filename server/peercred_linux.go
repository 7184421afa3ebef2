package server

import (
	"crypto/tls"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peerCredentials reads SO_PEERCRED from a unix socket connection.
func peerCredentials(c net.Conn) (PeerCredentials, error) {
	// A capping Listener's connection wraps the socket.
	if w, ok := c.(interface{ NetConn() net.Conn }); ok {
		if _, isTLS := c.(*tls.Conn); !isTLS {
			c = w.NetConn()
		}
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return PeerCredentials{}, fmt.Errorf("%w: %T is not a unix socket", ErrNoPeerCredentials, c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return PeerCredentials{}, fmt.Errorf("%w: %w", ErrNoPeerCredentials, err)
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return PeerCredentials{}, fmt.Errorf("%w: %w", ErrNoPeerCredentials, err)
	}
	if serr != nil {
		return PeerCredentials{}, fmt.Errorf("%w: SO_PEERCRED: %w", ErrNoPeerCredentials, serr)
	}
	return PeerCredentials{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}, nil
}
