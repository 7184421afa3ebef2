package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// snapshotCommand is the subcommand that restores a snapshot, as etcdutl
// snapshot restore does.
const snapshotCommand = "snapshot"

// runSnapshot runs "snapshot restore FILE" with etcdutl's flags of that
// command.
func runSnapshot(args []string, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "restore" {
		return &usageError{msg: "usage: kvfence-etcd snapshot restore FILE --data-dir DIR [flags]"}
	}
	fs := flag.NewFlagSet("snapshot restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "", "the output data directory (required)")
	name := fs.String("name", "default", "the member's name")
	cluster := fs.String("initial-cluster", "default=http://localhost:2380", "the initial cluster of the restored member")
	token := fs.String("initial-cluster-token", "etcd-cluster", "the initial cluster token")
	peers := fs.String("initial-advertise-peer-urls", "http://localhost:2380", "the member's peer URLs, comma-separated")
	skipHash := fs.Bool("skip-hash-check", false, "ignore the snapshot's integrity hash (a copied database file has none)")
	bump := fs.Uint64("bump-revision", 0, "how much to raise the latest revision")
	compacted := fs.Bool("mark-compacted", false, "mark the latest revision compacted (required with --bump-revision)")
	// The file may come before the flags, as etcdutl takes it.
	rest := args[1:]
	var file string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		file, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return &usageError{msg: err.Error()}
	}
	if file == "" && fs.NArg() == 1 {
		file = fs.Arg(0)
	} else if fs.NArg() != 0 {
		return &usageError{msg: "snapshot restore takes exactly one snapshot file"}
	}
	if file == "" || *dataDir == "" {
		return &usageError{msg: "snapshot restore needs a snapshot file and --data-dir"}
	}
	if (*bump > 0) != *compacted {
		return &usageError{msg: "--mark-compacted goes with --bump-revision > 0, and only with it"}
	}
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        file,
		Name:                *name,
		OutputDataDir:       *dataDir,
		PeerURLs:            strings.Split(*peers, ","),
		InitialCluster:      *cluster,
		InitialClusterToken: *token,
		SkipHashCheck:       *skipHash,
		RevisionBump:        *bump,
		MarkCompacted:       *compacted,
	})
	if err != nil {
		return fmt.Errorf("snapshot restore: %w", err)
	}
	return nil
}
