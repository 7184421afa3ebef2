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
