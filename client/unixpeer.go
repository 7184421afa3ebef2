package client

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
)

// dialUnix connects to the unix socket at path, and returns the connection
// only if the socket file and the process listening on it both belong to
// one of uids. Nothing is written to a connection it refuses: a socket
// squatted by another user (a stale path, a world-writable directory) must
// not be told the request, nor be believed when it answers "held".
func dialUnix(ctx context.Context, path string, uids []uint32) (net.Conn, error) {
	// The owner of the file is checked before connecting, so that a
	// socket someone else made is never connected to; the listener's uid
	// is checked after, as the kernel recorded it when the listening
	// socket was made, which renaming another socket onto the path after
	// the first check cannot forge.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("%w: %s is not a socket", ErrUntrustedServer, path)
	}
	owner, err := fileOwner(fi)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUntrustedServer, path, err)
	}
	if !slices.Contains(uids, owner) {
		return nil, fmt.Errorf("%w: %s is owned by uid %d, and only uid %s may serve it", ErrUntrustedServer, path, owner, uidList(uids))
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	uid, err := peerUID(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: %s: reading the server's credentials: %w", ErrUntrustedServer, path, err)
	}
	if !slices.Contains(uids, uid) {
		conn.Close()
		return nil, fmt.Errorf("%w: %s is served by a process of uid %d, and only uid %s may serve it", ErrUntrustedServer, path, uid,
			uidList(uids))
	}
	return conn, nil
}

// uidList spells uids for a message: "1000 or 0".
func uidList(uids []uint32) string {
	s := ""
	for i, u := range uids {
		switch {
		case i == 0:
		case i == len(uids)-1:
			s += " or "
		default:
			s += ", "
		}
		s += fmt.Sprint(u)
	}
	return s
}
