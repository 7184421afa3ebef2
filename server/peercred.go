package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
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

// peerKey is the context key under which ConnContext stores a connection's
// peer credentials.
type peerKey struct{}

// peerValue is what ConnContext stores: the credentials, or why there are
// none, so that the authenticator can tell "not a unix socket" from a
// failed lookup.
type peerValue struct {
	cred PeerCredentials
	err  error
}

// ConnContext is an http.Server ConnContext function for a unix socket
// listener: it reads the peer credentials of each connection once, when
// the connection is accepted (SO_PEERCRED on Linux), and attaches them to
// the context of every request on it, where PeerUID finds them.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	cred, err := peerCredentials(c)
	return context.WithValue(ctx, peerKey{}, peerValue{cred: cred, err: err})
}

// PeerCredentialsOf returns the peer credentials that ConnContext attached
// to ctx.
func PeerCredentialsOf(ctx context.Context) (PeerCredentials, error) {
	v, ok := ctx.Value(peerKey{}).(peerValue)
	if !ok {
		return PeerCredentials{}, fmt.Errorf("%w: the server has no ConnContext", ErrNoPeerCredentials)
	}
	return v.cred, v.err
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
