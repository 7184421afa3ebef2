package client

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"syscall"

	"github.com/kvfence/kvfence/internal/peercred"
)

// fileOwner returns the uid that owns fi's file.
func fileOwner(fi fs.FileInfo) (uint32, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.New("the socket file's owner cannot be read")
	}
	return st.Uid, nil
}

// peerUID returns the uid of the process at the other end of a unix socket
// connection: for a connecting client, the uid that made the listening
// socket (SO_PEERCRED).
func peerUID(c net.Conn) (uint32, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, fmt.Errorf("%T is not a unix socket", c)
	}
	cred, err := peercred.Of(uc)
	if err != nil {
		return 0, err
	}
	return cred.UID, nil
}
