//go:build !linux

package server

import (
	"fmt"
	"net"
)

// peerCredentials is not implemented here: SO_PEERCRED is Linux's, and a
// socket whose peer cannot be identified admits no one.
func peerCredentials(c net.Conn) (PeerCredentials, error) {
	return PeerCredentials{}, fmt.Errorf("%w: not supported on this system", ErrNoPeerCredentials)
}
