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
// only if the process listening on it and the socket file both belong to
// one of uids. Nothing is written to a connection it refuses: a socket
// squatted by another user (a stale path, a world-writable directory) must
// not be told the request, nor be believed when it answers "held".
func dialUnix(ctx context.Context, path string, uids []uint32) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	if err := checkUnixServer(conn, path, uids); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// checkUnixServer checks the server at the other end of conn, a
// connection to the socket at path. The listener's uid, as the kernel
// recorded it when the listening socket was made, is what no one else can
// forge, and is checked first; the socket file's owner too, so that a
// socket left where another user may replace it is refused even while
// the right process still serves it.
func checkUnixServer(conn net.Conn, path string, uids []uint32) error {
	uid, err := peerUID(conn)
	if err != nil {
		return fmt.Errorf("%w: %s: reading the server's credentials: %w", ErrUntrustedServer, path, err)
	}
	if !slices.Contains(uids, uid) {
		return fmt.Errorf("%w: %s is served by a process of uid %d, and only uid %s may serve it", ErrUntrustedServer, path, uid,
			uidList(uids))
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUntrustedServer, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%w: %s is not a socket", ErrUntrustedServer, path)
	}
	owner, err := fileOwner(fi)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUntrustedServer, path, err)
	}
	if !slices.Contains(uids, owner) {
		return fmt.Errorf("%w: the socket file %s is owned by uid %d, and only uid %s may serve it", ErrUntrustedServer, path, owner,
			uidList(uids))
	}
	return nil
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
