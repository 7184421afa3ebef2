package server

import (
	"crypto/tls"
	"fmt"
	"net"

	"github.com/kvfence/kvfence/internal/peercred"
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
	cred, err := peercred.Of(uc)
	if err != nil {
		return PeerCredentials{}, fmt.Errorf("%w: %w", ErrNoPeerCredentials, err)
	}
	return PeerCredentials{PID: cred.PID, UID: cred.UID, GID: cred.GID}, nil
}
