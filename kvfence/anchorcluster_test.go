package kvfence

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/kvfence/kvfence/audit"
)

// clusterFileAnchor is an anchor file that says it is on the cluster id,
// or fails to say (err), standing in for an anchor on etcd.
type clusterFileAnchor struct {
	audit.FileAnchor
	id       uint64
	err      error
	expected *uint64
}

func (a clusterFileAnchor) ClusterID(context.Context) (uint64, error) { return a.id, a.err }
func (a clusterFileAnchor) ExpectCluster(id uint64)                   { *a.expected = id }

// Ensure that Init records the anchor's cluster, that Open accepts only
// that cluster and holds the anchor to it, that a cluster that does not
// say its ID is refused, and that a receiver that records no cluster (an
// anchor file at init) opens on an anchor on a cluster only when the
// caller states that cluster: a missing record is never "any cluster".
func TestAnchorClusterRecord(t *testing.T) {
	dir := t.TempDir()
	path, file := filepath.Join(dir, "r.db"), audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}
	var expected uint64
	at := func(id uint64, err error) clusterFileAnchor {
		expected = 0
		return clusterFileAnchor{FileAnchor: file, id: id, err: err, expected: &expected}
	}
	if err := Init(path, &InitOptions{ReceiverID: "r", Key: testKey, Anchor: at(5, nil)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		anchor clusterFileAnchor
		want   uint64
		err    error
	}{
		{"recorded cluster", at(5, nil), 0, nil},
		{"another cluster", at(6, nil), 0, ErrAnchorClusterChanged},
		{"another cluster stated", at(6, nil), 6, ErrAnchorClusterChanged},
		{"a stated cluster that is not the anchor's", at(5, nil), 6, ErrAnchorClusterChanged},
		{"no answer", at(0, errors.New("unreachable")), 0, nil},
	} {
		r, err := Open(path, &Options{Key: testKey, Anchor: tc.anchor, AnchorClusterID: tc.want})
		switch {
		case tc.name == "no answer":
			if err == nil {
				r.Close()
				t.Fatalf("%s: opened", tc.name)
			}
		case tc.err == nil:
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			r.Close()
			if expected != tc.anchor.id {
				t.Fatalf("%s: the anchor was held to cluster %d, want %d", tc.name, expected, tc.anchor.id)
			}
		case !errors.Is(err, tc.err) || !IsIntegrityError(err):
			if r != nil {
				r.Close()
			}
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.err)
		}
	}

	// A receiver whose anchor was a file at init records no cluster.
	path2, file2 := filepath.Join(dir, "r2.db"), audit.FileAnchor{Path: filepath.Join(dir, "r2.anchor")}
	if err := Init(path2, &InitOptions{ReceiverID: "r2", Key: testKey, Anchor: file2}); err != nil {
		t.Fatal(err)
	}
	on := clusterFileAnchor{FileAnchor: file2, id: 9, expected: &expected}
	if _, err := Open(path2, &Options{Key: testKey, Anchor: on}); !errors.Is(err, ErrAnchorClusterUnrecorded) {
		t.Fatalf("no record, no stated cluster: %v", err)
	}
	if _, err := Open(path2, &Options{Key: testKey, Anchor: on, AnchorClusterID: 8, ReadOnly: true}); !errors.Is(err, ErrAnchorClusterChanged) {
		t.Fatalf("no record, another stated cluster: %v", err)
	}
	r, err := Open(path2, &Options{Key: testKey, Anchor: on, AnchorClusterID: 9})
	if err != nil {
		t.Fatalf("no record, the anchor's cluster stated: %v", err)
	}
	r.Close()
	if r, err := Open(path2, &Options{Key: testKey, Anchor: file2}); err != nil {
		t.Fatalf("the anchor file: %v", err)
	} else {
		r.Close()
	}
}
