package main

import "fmt"

// usageEtcdSee stands in a command's help for the flags that put the
// receiver, or its anchor, on etcd: about forty lines that most readers
// of one command's help do not need, kept under "kvfence help etcd".
const usageEtcdSee = `	--etcd-* flags: see kvfence help etcd
	    The receiver on an etcd cluster instead of --db, and the anchor
	    in an etcd key instead of a file, with their prefix and TLS.
`

// helpEtcd prints the etcd flags that every command taking --db or
// --anchor accepts.
func (m *Main) helpEtcd() {
	fmt.Fprint(m.Stdout, `Usage: kvfence <command> [--etcd URL[,URL...] [--etcd-prefix P] [TLS]]
                         [--anchor etcd://HOST:PORT/KEY [anchor TLS]] ...

Every command that takes --db (init, scope, target, activate, hold, grant
extend, submit, status, observe, verify-chain, admission new, recover,
audit archive, serve) can keep the receiver on an etcd cluster instead,
and every command that takes --anchor can keep the anchor in an etcd key
instead of a file. The ledger's own --etcd is described in kvfence help
ledger.

Receiver on etcd:

`+usageEtcd+`
Anchor on etcd:

`+usageAnchorEtcd)
}
