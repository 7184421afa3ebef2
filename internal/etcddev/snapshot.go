package etcddev

import (
	"flag"
	"io"
	"strings"
)

// SnapshotCommand is the subcommand that restores a snapshot, as etcdutl
// snapshot restore does.
const SnapshotCommand = "snapshot"

// Restore is a parsed "snapshot restore" command line, with etcdutl's
// flags of that command and its defaults.
type Restore struct {
	// File is the snapshot to restore.
	File string
	// DataDir is the member data directory to create (--data-dir).
	DataDir string
	// Name is the restored member's name (--name).
	Name string
	// InitialCluster is the restored cluster's membership
	// (--initial-cluster).
	InitialCluster string
	// ClusterToken is the restored cluster's token
	// (--initial-cluster-token).
	ClusterToken string
	// PeerURLs are the member's peer URLs
	// (--initial-advertise-peer-urls, comma-separated).
	PeerURLs []string
	// SkipHashCheck ignores the snapshot's integrity hash, which a
	// copied database file lacks (--skip-hash-check).
	SkipHashCheck bool
	// RevisionBump raises the latest revision by this much
	// (--bump-revision).
	RevisionBump uint64
	// MarkCompacted marks the latest revision compacted; it goes with
	// RevisionBump (--mark-compacted).
	MarkCompacted bool
}

// ParseRestore parses the arguments after "snapshot": "restore FILE
// --data-dir DIR [flags]", the file before or after the flags as etcdutl
// takes it. Every command line it cannot act on is a *UsageError.
func ParseRestore(args []string, stderr io.Writer) (Restore, error) {
	if len(args) == 0 || args[0] != "restore" {
		return Restore{}, &UsageError{Msg: "usage: kvfence-etcd snapshot restore FILE --data-dir DIR [flags]"}
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
	rest := args[1:]
	var file string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		file, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return Restore{}, &UsageError{Msg: err.Error()}
	}
	if file == "" && fs.NArg() == 1 {
		file = fs.Arg(0)
	} else if fs.NArg() != 0 {
		return Restore{}, &UsageError{Msg: "snapshot restore takes exactly one snapshot file"}
	}
	if file == "" || *dataDir == "" {
		return Restore{}, &UsageError{Msg: "snapshot restore needs a snapshot file and --data-dir"}
	}
	if (*bump > 0) != *compacted {
		return Restore{}, &UsageError{Msg: "--mark-compacted goes with --bump-revision > 0, and only with it"}
	}
	return Restore{
		File: file, DataDir: *dataDir, Name: *name,
		InitialCluster: *cluster, ClusterToken: *token, PeerURLs: strings.Split(*peers, ","),
		SkipHashCheck: *skipHash, RevisionBump: *bump, MarkCompacted: *compacted,
	}, nil
}
