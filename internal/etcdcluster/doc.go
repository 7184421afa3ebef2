// Package etcdcluster asks an etcd cluster who it is: the cluster ID that
// etcd puts in the header of every answer. Two addresses are the same
// cluster exactly when they answer with the same ID, whatever the
// spelling of their host names, the member answering, or a proxy in
// between; the receiver's store and its anchor are compared by it, never
// by their addresses' text.
package etcdcluster
