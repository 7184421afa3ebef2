package server

import (
	"net"
)

// UnixSocketOptions configures ListenUnixSocket.
type UnixSocketOptions struct {
	// Group, when set, is the group whose members may connect to the
	// socket: it is created 0660 with that group, in a directory 0750 of
	// that group. Nil means only the service's own user: socket 0600,
	// directory 0700. Which peers are admitted is still UnixPeer's
	// decision; the group only lets them reach it.
	Group *uint32
	// UIDs, when set, are the only peers the listener hands on: a
	// connection from any other uid (SO_PEERCRED) is closed as it is
	// accepted, without an answer, so that a user who may reach the
	// socket but is not admitted holds none of its capped connection
	// slots, and an administrator's connection does not wait behind
	// its connections. Nil hands on every peer, for UnixPeer to refuse.
	UIDs []uint32
}

// ListenUnixSocket listens on a unix socket at path for local
// administration, in a directory that only the service can change, so that
// nobody else can put a symbolic link or another file where the socket is
// created or its mode set. The directory is created (0700, or 0750 with
// the group) if it is missing; an existing one must be a directory, not a
// symbolic link, owned by the service's user and not writable by group or
// others (ErrUnsafeSocketDirectory otherwise), and with a group, reachable
// by it. Its parent must exist. A socket left at path by a previous run is
// replaced; any other file there is refused.
func ListenUnixSocket(path string, opts UnixSocketOptions) (net.Listener, error) {
	return listenUnixSocket(path, opts)
}
