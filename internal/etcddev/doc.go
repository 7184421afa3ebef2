// Package etcddev holds what the kvfence-etcd command adds to etcd's own
// main: the dev-cluster subcommand, the command line of snapshot restore,
// and the help that names them. It does not import etcd's server, so that
// its tests, run with the race detector, do not compile etcd's server a
// second time; the command itself (cmd/kvfence-etcd) is main and glue.
package etcddev
