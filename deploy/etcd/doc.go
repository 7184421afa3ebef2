// Package etcd holds the etcd auth setup that leaves workers read-only on
// the receiver's cluster and the anchor's (README.md beside it), embedded
// so that tests apply the very etcdctl lines the page documents
// (internal/etcdtest.ApplyEtcdctl) and then try a worker's credentials on
// every path around the fence.
package etcd

import _ "embed"

// README is deploy/etcd/README.md: its etcdctl lines are the whole setup.
//
//go:embed README.md
var README string
