package main

import (
	"fmt"
	"io"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/kvfence/kvfence/internal/etcddev"
)

// runSnapshot runs "snapshot restore FILE" with etcdutl's flags of that
// command.
func runSnapshot(args []string, stderr io.Writer) error {
	r, err := etcddev.ParseRestore(args, stderr)
	if err != nil {
		return err
	}
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        r.File,
		Name:                r.Name,
		OutputDataDir:       r.DataDir,
		PeerURLs:            r.PeerURLs,
		InitialCluster:      r.InitialCluster,
		InitialClusterToken: r.ClusterToken,
		SkipHashCheck:       r.SkipHashCheck,
		RevisionBump:        r.RevisionBump,
		MarkCompacted:       r.MarkCompacted,
	})
	if err != nil {
		return fmt.Errorf("snapshot restore: %w", err)
	}
	return nil
}
