//go:build !unix

package server

import (
	"errors"
	"net"
)

func listenUnixSocket(string, UnixSocketOptions) (net.Listener, error) {
	return nil, errors.New("server: an admin socket needs a unix system")
}
