package etcdtest

import (
	"fmt"
	"strconv"

	"github.com/kvfence/kvfence/internal/etcdbin"
)

// RestoreOptions says how Restore rebuilds a member from a snapshot.
type RestoreOptions struct {
	// Name is the restored member's name; NewClusterIn starts dir/NAME as
	// member NAME (m0 for the first).
	Name string
	// RevisionBump raises the latest revision by this much and marks it
	// compacted, as etcd's restore guide asks; 0 leaves it.
	RevisionBump uint64
}

// Restore restores the snapshot file snap into the new data directory
// dataDir, as an operator does with etcdutl snapshot restore, with the
// etcd binary that runs the members. The restored member is alone in its
// cluster.
func Restore(snap, dataDir string, o RestoreOptions) error {
	bin, err := etcdbin.Binary()
	if err != nil {
		return err
	}
	// The peer URL is never dialled: a single member has no peers.
	args := []string{"snapshot", "restore", snap,
		"--data-dir", dataDir,
		"--name", o.Name,
		"--initial-cluster", o.Name + "=http://127.0.0.1:2380",
		"--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster-token", "etcdtest-restore",
	}
	if o.RevisionBump > 0 {
		args = append(args, "--bump-revision", strconv.FormatUint(o.RevisionBump, 10), "--mark-compacted")
	}
	if out, err := etcdbin.Cmd(bin, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("etcdtest: restore %s: %w\n%s", snap, err, out)
	}
	return nil
}
