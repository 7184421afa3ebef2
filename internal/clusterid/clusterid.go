// Package clusterid writes and reads cluster IDs as text, as etcdctl
// shows them. It has no dependencies, so that the receiver, which does
// not link the etcd client, can record and compare an anchor's cluster.
package clusterid

import (
	"fmt"
	"strconv"
)

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
