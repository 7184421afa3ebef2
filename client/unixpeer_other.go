//go:build !linux

package client

import (
	"errors"
	"io/fs"
	"net"
)

// errNoPeerCredentials is why a unix socket is refused where the server's
// credentials cannot be read: an unchecked socket would be trusted blindly.
var errNoPeerCredentials = errors.New("the server's peer credentials cannot be read on this system")

func fileOwner(fs.FileInfo) (uint32, error) { return 0, errNoPeerCredentials }

func peerUID(net.Conn) (uint32, error) { return 0, errNoPeerCredentials }
