package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/audit/etcdanchor"
)

// anchorEtcdPrefix marks an --anchor value as an etcd address. Anything
// that begins with "etcd:" is taken as one, so that a mistyped address is
// refused instead of naming a file.
const anchorEtcdPrefix = "etcd:"

// anchorEtcdFlags are the TLS files of an etcd anchor.
type anchorEtcdFlags struct {
	cert, key, ca string
	store         audit.AnchorStore // opened by anchorStore, reused after
}

func (a *anchorEtcdFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.cert, "anchor-etcd-cert", "", "")
	fs.StringVar(&a.key, "anchor-etcd-key", "", "")
	fs.StringVar(&a.ca, "anchor-etcd-ca", "", "")
}

// isEtcdAnchor reports whether an --anchor value names an etcd key.
func isEtcdAnchor(anchor string) bool { return strings.HasPrefix(anchor, anchorEtcdPrefix) }

// check refuses, as usage errors of command cmd, an etcd anchor address
// that ParseAddress does not accept, TLS flags without an etcd anchor, and
// a client certificate without its key or the reverse.
func (a *anchorEtcdFlags) check(cmd, anchor string) error {
	if !isEtcdAnchor(anchor) {
		if a.cert != "" || a.key != "" || a.ca != "" {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --anchor-etcd-cert, --anchor-etcd-key and --anchor-etcd-ca go with --anchor etcd://...", cmd),
				hint: "drop them, or pass --anchor etcd://HOST:PORT[,HOST:PORT]/KEY"}
		}
		return nil
	}
	if _, err := etcdanchor.ParseAddress(anchor); err != nil {
		return &usageError{msg: fmt.Sprintf("kvfence %s: --anchor: %v", cmd, err),
			hint: "an etcd anchor is etcd://HOST:PORT[,HOST:PORT]/KEY, e.g. etcd://127.0.0.1:2379/kvfence/anchor"}
	}
	if (a.cert == "") != (a.key == "") {
		return &usageError{msg: fmt.Sprintf("kvfence %s: --anchor-etcd-cert and --anchor-etcd-key go together", cmd),
			hint: "pass both, or neither"}
	}
	return nil
}

// open returns the anchor that an --anchor value names: a file, or a key
// on an etcd cluster, connected (not yet contacted) with the TLS files
// given.
func (a *anchorEtcdFlags) open(cmd, anchor string) (audit.AnchorStore, error) {
	if !isEtcdAnchor(anchor) {
		return audit.FileAnchor{Path: anchor}, nil
	}
	if a.store != nil {
		return a.store, nil
	}
	addr, err := etcdanchor.ParseAddress(anchor)
	if err != nil {
		return nil, &usageError{msg: fmt.Sprintf("kvfence %s: --anchor: %v", cmd, err)}
	}
	s, err := etcdanchor.Open(addr, &etcdanchor.Options{CertFile: a.cert, KeyFile: a.key, CAFile: a.ca})
	if err != nil {
		return nil, fmt.Errorf("kvfence %s: --anchor: %w", cmd, err)
	}
	a.store = s
	return s, nil
}

// checkEtcdAnchor checks --anchor and its etcd TLS flags.
func (c *commonFlags) checkEtcdAnchor() error { return c.anchorEtcd.check(c.name, c.anchor) }

// anchorStore returns the anchor that --anchor names.
func (c *commonFlags) anchorStore() (audit.AnchorStore, error) {
	return c.anchorEtcd.open(c.name, c.anchor)
}

// usageAnchorEtcd documents the etcd anchor's flags.
const usageAnchorEtcd = `	--anchor etcd://HOST:PORT[,HOST:PORT]/KEY
	    The anchor in KEY of an etcd cluster instead of a file (KEY with its
	    leading slash), written by compare-and-swap. Keep that cluster apart
	    from the receiver's own storage: restored together, both would roll
	    back together.
	--anchor-etcd-cert FILE, --anchor-etcd-key FILE, --anchor-etcd-ca FILE
	    TLS for the anchor's cluster: a client certificate and its key
	    (both or neither; the key not readable by group or others), and the
	    CA that the members' certificates chain to. Any of them makes
	    every connection TLS.
`
