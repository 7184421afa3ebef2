// Package etcdauth checks that an etcd cluster enforces the auth that
// kvfence was told to use. etcd's client, given a user for a cluster
// whose auth is disabled, drops the user and goes on without one; a
// receiver configured as a restricted user would then run
// unauthenticated, and every other client of the cluster, a worker's
// too, could write around the fence while its operator believed the
// cluster enforced roles.
package etcdauth
