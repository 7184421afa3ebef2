package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/audit/etcdanchor"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/clusterid"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// anchorEtcdPrefix marks an --anchor value as an etcd address. Anything
// that begins with "etcd:" is taken as one, so that a mistyped address is
// refused instead of naming a file.
const anchorEtcdPrefix = "etcd:"

// anchorEtcdFlags are the TLS files of an etcd anchor and the operator's
// statement of its cluster.
type anchorEtcdFlags struct {
	cert, key, ca string
	// user and passwordFile authenticate to the anchor's cluster with
	// etcd auth, as etcdFlags' do to the receiver's.
	user, passwordFile string
	// clusterText is --anchor-etcd-cluster-id; clusterID is it parsed by
	// check (0: not given).
	clusterText string
	clusterID   uint64
	store       *etcdanchor.Store // opened by open, reused after
}

func (a *anchorEtcdFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.cert, "anchor-etcd-cert", "", "")
	fs.StringVar(&a.key, "anchor-etcd-key", "", "")
	fs.StringVar(&a.ca, "anchor-etcd-ca", "", "")
	fs.StringVar(&a.clusterText, "anchor-etcd-cluster-id", "", "")
	fs.StringVar(&a.user, "anchor-etcd-user", "", "")
	fs.StringVar(&a.passwordFile, "anchor-etcd-password-file", "", "")
}

// isEtcdAnchor reports whether an --anchor value names an etcd key.
func isEtcdAnchor(anchor string) bool { return strings.HasPrefix(anchor, anchorEtcdPrefix) }

// check refuses, as usage errors of command cmd, an etcd anchor address
// that ParseAddress does not accept, TLS flags without an etcd anchor, and
// a client certificate without its key or the reverse.
func (a *anchorEtcdFlags) check(cmd, anchor string) error {
	if !isEtcdAnchor(anchor) {
		if a.cert != "" || a.key != "" || a.ca != "" || a.clusterText != "" || a.user != "" || a.passwordFile != "" {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --anchor-etcd-cert, --anchor-etcd-key, --anchor-etcd-ca, --anchor-etcd-cluster-id, "+
				"--anchor-etcd-user and --anchor-etcd-password-file go with --anchor etcd://...", cmd),
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
	if (a.user == "") != (a.passwordFile == "") {
		return &usageError{msg: fmt.Sprintf("kvfence %s: --anchor-etcd-user and --anchor-etcd-password-file go together", cmd),
			hint: "pass both, or neither"}
	}
	a.clusterID = 0
	if a.clusterText != "" {
		id, err := clusterid.Parse(a.clusterText)
		if err != nil {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --anchor-etcd-cluster-id: %v", cmd, err),
				hint: "etcdctl --endpoints ANCHOR_MEMBER endpoint status -w table prints the anchor cluster's ID"}
		}
		a.clusterID = id
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
	password := ""
	if a.passwordFile != "" {
		if password, err = keyfile.LoadPassword(a.passwordFile); err != nil {
			return nil, &usageError{msg: fmt.Sprintf("kvfence %s: --anchor-etcd-password-file: %v", cmd, err),
				hint: "a file of one line, mode 0600, that only the receiver's user can read"}
		}
	}
	s, err := etcdanchor.Open(addr, &etcdanchor.Options{CertFile: a.cert, KeyFile: a.key, CAFile: a.ca,
		Username: a.user, Password: password})
	if errors.Is(err, etcdanchor.ErrAuthOff) {
		return nil, authOffErr(cmd, "--anchor", "--anchor-etcd-user", a.user, err)
	}
	if err != nil {
		return nil, fmt.Errorf("kvfence %s: --anchor: %w", cmd, err)
	}
	// A stated cluster holds every answer, from the first: init, the
	// ledger (which records none) and a receiver's open alike.
	s.ExpectCluster(a.clusterID)
	a.store = s
	return s, nil
}

// checkApart refuses, as a usage error of command cmd, an etcd anchor that
// answers as the same etcd cluster as the store e (kvfence.CheckApart):
// host names, members and proxies spell one cluster in many ways, its ID
// in one. A cluster that does not say its ID is an error, never "apart".
// It runs before anything is written.
func (a *anchorEtcdFlags) checkApart(cmd string, e engine.Engine) error {
	if a.store == nil {
		return nil
	}
	if err := kvfence.CheckApart(e, a.store); err != nil {
		return anchorNotApart(cmd, err)
	}
	return nil
}

// anchorNotApart gives kvfence.ErrAnchorNotApart its exit code (a usage
// error: the command line names one cluster twice) and hint.
func anchorNotApart(cmd string, err error) error {
	if !errors.Is(err, kvfence.ErrAnchorNotApart) {
		return fmt.Errorf("kvfence %s: %w", cmd, err)
	}
	return &usageError{msg: fmt.Sprintf("kvfence %s: --anchor: %v", cmd, err), err: err,
		hint: "keep the anchor on a separately administered etcd cluster (or in a file on another volume): " +
			"restored together with the receiver's own cluster, it would vouch for the restored state"}
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
	--anchor-etcd-user NAME, --anchor-etcd-password-file FILE
	    etcd auth on the anchor's cluster: the user and a file holding its
	    password on one line (both or neither; the file not readable by
	    group or others). Default to $KVFENCE_ANCHOR_ETCD_USER and
	    $KVFENCE_ANCHOR_ETCD_PASSWORD_FILE ($KVFENCE_LEDGER_ANCHOR_ETCD_USER
	    and $KVFENCE_LEDGER_ANCHOR_ETCD_PASSWORD_FILE for the ledger). A
	    user given for a cluster whose auth is off is refused (exit 2).
	--anchor-etcd-cluster-id ID
	    The anchor cluster's ID in hexadecimal, as etcdctl endpoint status
	    prints it. Init records the anchor's cluster, and every command
	    refuses another cluster answering at the anchor's address (exit 4)
	    and an anchor on the receiver's own --etcd cluster, however it is
	    spelled (exit 2). A receiver initialised before that record
	    existed is refused on an etcd anchor (exit 2) until this flag
	    names the cluster; given, it must agree with the record, and
	    every answer from another cluster is refused (exit 4), init's and
	    the ledger's included.
`
