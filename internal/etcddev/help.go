package etcddev

import (
	"fmt"
	"io"
)

// HelpPreamble writes, when args ask for help, what this binary adds to
// etcd: its subcommands, which etcd's own help, printed after
// it, cannot mention. It reports whether it wrote anything.
func HelpPreamble(args []string, w io.Writer) bool {
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
