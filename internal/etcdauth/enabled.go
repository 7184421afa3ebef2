package etcdauth

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrAuthOff means a user was given for a cluster whose auth is not
// enabled. A caller that was given credentials refuses such a cluster
// rather than run with a fence that can be written around.
var ErrAuthOff = errors.New("a user was given, but the etcd cluster does not have auth enabled: " +
	"etcd's client would go on without the user, and every client of the cluster could write everywhere")

// RequireEnabled asks the cluster, through a client that authenticated as
// a user, whether its auth is enabled, and returns ErrAuthOff if not. The
// question is asked with the user's own token, so an answer from a
// cluster that enforces auth also shows that the token is good. The
// caller bounds ctx.
func RequireEnabled(ctx context.Context, auth clientv3.Auth) error {
	resp, err := auth.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("asking the etcd cluster whether auth is enabled: %w", err)
	}
	if !resp.Enabled {
		return ErrAuthOff
	}
	return nil
}
