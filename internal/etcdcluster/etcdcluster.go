package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"

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

// Format writes a cluster ID as etcdctl does in its tables: lower-case
// hexadecimal, here always 16 digits.
func Format(id uint64) string { return fmt.Sprintf("%016x", id) }

// Parse reads a cluster ID in hexadecimal, as Format and etcdctl write it
// (at most 16 digits, no prefix or sign). Zero is not a cluster ID.
func Parse(s string) (uint64, error) {
	if s == "" || len(s) > 16 {
		return 0, fmt.Errorf("cluster ID %q: want 1 to 16 hexadecimal digits", s)
	}
	id, err := strconv.ParseUint(s, 16, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("cluster ID %q: want a non-zero hexadecimal number, as etcdctl endpoint status prints it", s)
	}
	return id, nil
}
