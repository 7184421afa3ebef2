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
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/etcdmain"

	"github.com/kvfence/kvfence/internal/etcddev"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == etcddev.DevCommand {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := etcddev.RunDevCluster(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "kvfence-etcd:", err)
			var ue *etcddev.UsageError
			if errors.As(err, &ue) {
				os.Exit(2)
			}
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == etcddev.SnapshotCommand {
		if err := runSnapshot(os.Args[2:], os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "kvfence-etcd:", err)
			var ue *etcddev.UsageError
			if errors.As(err, &ue) {
				os.Exit(2)
			}
			os.Exit(1)
		}
		return
	}
	etcddev.HelpPreamble(os.Args[1:], os.Stdout)
	etcdmain.Main(os.Args)
}
