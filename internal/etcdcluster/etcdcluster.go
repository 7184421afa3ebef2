package etcdcluster

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrNoClusterID means an etcd answer carried no cluster ID, which no
// etcd member sends: whatever answered is not to be trusted as a cluster.
var ErrNoClusterID = errors.New("etcdcluster: the answer names no cluster ID")

// ID returns the ID of the cluster that kv reaches, from the header of a
// linearizable count-only read of key: the read goes through the cluster's
// leader, so a member cut off from the majority does not answer, and
// nothing but the count of key is transferred. The caller bounds ctx. An
// error is never an ID: a caller that cannot learn the ID must refuse
// whatever the ID was to decide.
func ID(ctx context.Context, kv clientv3.KV, key string) (uint64, error) {
	resp, err := kv.Get(ctx, key, clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("etcdcluster: asking the cluster for its ID: %w", err)
	}
	if resp.Header == nil || resp.Header.ClusterId == 0 {
		return 0, ErrNoClusterID
	}
	return resp.Header.ClusterId, nil
}
