package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
)

// PeerCredentials are the credentials of the process at the other end of a
// unix socket connection, as the kernel recorded them when it connected.
type PeerCredentials struct {
	// PID is the peer's process id.
	PID int32
	// UID is the peer's user id: the one UnixPeer admits or refuses.
	UID uint32
	// GID is the peer's group id.
	GID uint32
}

// connKey is the context key under which ConnContext stores what it knows
// of a connection.
type connKey struct{}

// connInfo is what ConnContext stores: the connection itself, so that a
// request whose connection is no longer trusted can close it; the peer
// credentials, or why there are none, so that the authenticator can tell
// "not a unix socket" from a failed lookup; and the last verdict on the
// connection's client certificate, and the identity read from it.
type connInfo struct {
	conn     net.Conn
	cred     PeerCredentials
	credErr  error
	verdict  atomic.Pointer[chainVerdict]
	identity atomic.Pointer[leafIdentity]
}

// ConnContext is an http.Server ConnContext function, required for a unix
// socket listener and for a SPIFFECertificate with ClientRoots: it reads
// the peer credentials of each connection once, when the connection is
// accepted (SO_PEERCRED on Linux), and attaches them and the connection to
// the context of every request on it, where PeerCredentialsOf and the
// authenticators find them.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	ci := &connInfo{conn: c}
	if _, ok := c.(*tls.Conn); ok {
		ci.credErr = fmt.Errorf("%w: a TLS connection", ErrNoPeerCredentials)
	} else {
		ci.cred, ci.credErr = peerCredentials(c)
	}
	return context.WithValue(ctx, connKey{}, ci)
}

// connInfoOf returns what ConnContext attached to ctx, or nil.
func connInfoOf(ctx context.Context) *connInfo {
	ci, _ := ctx.Value(connKey{}).(*connInfo)
	return ci
}

// PeerCredentialsOf returns the peer credentials that ConnContext attached
// to ctx.
func PeerCredentialsOf(ctx context.Context) (PeerCredentials, error) {
	ci := connInfoOf(ctx)
	if ci == nil {
		return PeerCredentials{}, fmt.Errorf("%w: the server has no ConnContext", ErrNoPeerCredentials)
	}
	return ci.cred, ci.credErr
}

// UnixPeer authenticates a caller on a unix socket by its peer
// credentials: the identity is "unix:uid:N", admitted only if N is in
// UIDs. Any other peer is refused with ErrForbidden: it is known, and not
// admitted. The server must set ConnContext as its ConnContext.
type UnixPeer struct {
	// UIDs are the admitted user ids.
	UIDs []uint32
}

// Authenticate returns "unix:uid:N" for an admitted peer.
func (p UnixPeer) Authenticate(r *http.Request) (string, error) {
	cred, err := PeerCredentialsOf(r.Context())
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	if !slices.Contains(p.UIDs, cred.UID) {
		return "", fmt.Errorf("%w: uid %d is not on the admin socket's allow-list", ErrForbidden, cred.UID)
	}
	return UnixIdentity(cred.UID), nil
}

// UnixIdentity is the identity of a unix socket peer with uid.
func UnixIdentity(uid uint32) string { return fmt.Sprintf("unix:uid:%d", uid) }
