package server

import "errors"

// Errors an Authenticator returns, wrapped with the reason. The handler
// answers them with 401 and 403; any other error from an Authenticator is
// a fault (500).
var (
	// ErrUnauthenticated means the channel carries no usable identity: no
	// verified client certificate, or one without exactly one SPIFFE ID.
	ErrUnauthenticated = errors.New("server: no usable identity on the channel")
	// ErrForbidden means the channel's identity is known and not admitted,
	// such as a unix socket peer whose uid is not on the allow-list.
	ErrForbidden = errors.New("server: identity not admitted")
)

// ErrNoPeerCredentials means a connection's peer credentials could not be
// read: it is not a unix socket, or the system has no SO_PEERCRED.
var ErrNoPeerCredentials = errors.New("server: no peer credentials for this connection")

// ErrConnectionRevoked means a connection's client certificate, verified
// when the connection was made, no longer verifies against the current
// client CA or has expired since; the request is refused and the
// connection closed. It is returned wrapped together with
// ErrUnauthenticated.
var ErrConnectionRevoked = errors.New("server: the connection's client certificate is no longer trusted")

// ErrConnectionLimit means a cap on connections does not fit the process's
// descriptor limit.
var ErrConnectionLimit = errors.New("server: connection cap does not fit the descriptor limit")

// ErrUnsafeSocketDirectory means the admin socket's directory is not one
// that only the service can change: a symbolic link, not a directory,
// owned by another user, or writable by group or others.
var ErrUnsafeSocketDirectory = errors.New("server: unsafe directory for the admin socket")
