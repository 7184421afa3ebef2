package etcdanchor

import (
	"errors"

	"github.com/kvfence/kvfence/internal/etcdauth"
)

var (
	// ErrBadAddress means an anchor address is not one that ParseAddress
	// accepts.
	ErrBadAddress = errors.New("etcdanchor: bad address")
	// ErrBadTLS means the TLS options are incomplete, or a certificate,
	// key or CA file cannot be used.
	ErrBadTLS = errors.New("etcdanchor: bad TLS options")
	// ErrBadAuth means a user name was given without its password, or the
	// reverse.
	ErrBadAuth = errors.New("etcdanchor: bad auth options")
	// ErrAuthOff means a user name was given for a cluster whose auth is
	// not enabled. etcd's client would go on without the user, and every
	// client of the cluster could then write the anchor key; Open refuses
	// the cluster instead.
	ErrAuthOff = etcdauth.ErrAuthOff
	// ErrOutcomeUnknown means an anchor write reached the cluster, or may
	// have, and no answer came back (a timeout, a lost leader, a dropped
	// connection), and reading the key afterwards could not settle it: the
	// write may or may not have taken effect, now or later. It is never a
	// verdict: neither success nor a conflict. The caller must not
	// acknowledge what the write was to cover; a later Load decides which
	// anchor the key holds.
	ErrOutcomeUnknown = errors.New("etcdanchor: outcome of the anchor write is unknown")
	// ErrClusterMismatch means an answer came from an etcd cluster other
	// than the one the anchor was expected on (Store.ExpectCluster): a
	// different cluster answers at the anchor's address.
	ErrClusterMismatch = errors.New("etcdanchor: another etcd cluster answered for the anchor")
)
