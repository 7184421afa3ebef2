package main

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvfence/kvfence/internal/etcdauth"
)

// requireAuth asks the cluster, as the user cli authenticated as, whether
// its auth is enabled (etcdauth.RequireEnabled), within the dial timeout.
func requireAuth(cli *clientv3.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), etcdDialTimeout)
	defer cancel()
	return etcdauth.RequireEnabled(ctx, cli)
}

// authOffErr reports that the cluster of flag (--etcd, --anchor) did not
// confirm that its auth is on, although userFlag named user: a cluster
// with auth off is a usage error naming both ways out, anything else an
// operational error.
func authOffErr(cmd, flag, userFlag, user string, err error) error {
	if !errors.Is(err, etcdauth.ErrAuthOff) {
		return fmt.Errorf("kvfence %s: %s: etcd user %s: %w", cmd, flag, user, err)
	}
	return &usageError{msg: fmt.Sprintf("kvfence %s: %s: %s %s was given, but that etcd cluster does not have auth enabled: "+
		"etcd's client would go on without the user, and every client, a worker's too, could write kvfence's keys there", cmd, flag, userFlag, user),
		hint: "enable auth on the cluster as deploy/etcd/README.md says (auth enable comes last), or drop " + userFlag +
			" and its password file (and their KVFENCE_* variables) if the cluster is meant to run without auth",
		err: err}
}
