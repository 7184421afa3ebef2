// Command kvfence-etcd is a standalone etcd server built from the etcd
// module that kvfence itself requires, so that a machine with only Go can
// run real etcd clusters. Its flags are etcd's own (kvfence-etcd --help,
// which names dev-cluster first), with two subcommands of its own:
//
//	kvfence-etcd dev-cluster --dir DIR [--members 3] [--port 2379]
//
// starts a local cluster on loopback, its data and logs in DIR, prints the
// client endpoints on one line and runs until interrupted. Run again on the
// same DIR, it restarts the same cluster. It is for trying kvfence on etcd
// and for tests, not for production: members talk plain HTTP on 127.0.0.1.
//
//	kvfence-etcd snapshot restore FILE --data-dir DIR [etcdutl's flags]
//
// is etcdutl's snapshot restore, with its flags, so that tests restore a
// member's snapshot with the etcd version that runs it, without linking
// etcd's server.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == devCommand {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := runDevCluster(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "kvfence-etcd:", err)
			var ue *usageError
			if errors.As(err, &ue) {
				os.Exit(2)
			}
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == snapshotCommand {
		if err := runSnapshot(os.Args[2:], os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "kvfence-etcd:", err)
			var ue *usageError
			if errors.As(err, &ue) {
				os.Exit(2)
			}
			os.Exit(1)
		}
		return
	}
	helpPreamble(os.Args[1:], os.Stdout)
	etcdmain.Main(os.Args)
}

// helpPreamble writes, when args ask for help, what this binary adds to
// etcd: its subcommands, which etcd's own help, printed after
// it, cannot mention. It reports whether it wrote anything.
func helpPreamble(args []string, w io.Writer) bool {
	if len(args) != 1 {
		return false
	}
	switch args[0] {
	case "-h", "-help", "--help":
	default:
		return false
	}
	fmt.Fprint(w, `kvfence-etcd is etcd, built from the etcd module kvfence requires, with one
subcommands of its own:

  kvfence-etcd dev-cluster --dir DIR [--members 3] [--port 2379]
	starts a local cluster on loopback (plain HTTP, for trying kvfence on
	etcd and for tests, not for production), its data and logs in DIR,
	prints the client endpoints on one line and runs until interrupted;
	run again on the same DIR, it restarts the same cluster.
	kvfence-etcd dev-cluster -h lists its flags.

  kvfence-etcd snapshot restore FILE --data-dir DIR [flags]
	is etcdutl's snapshot restore, of the same etcd version;
	kvfence-etcd snapshot restore -h lists its flags.

Every other command line is etcd's own:

`)
	return true
}
