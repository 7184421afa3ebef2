package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kvfence/kvfence/audit/etcdanchor"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// Environment fallbacks of the etcd flags.
const (
	envEtcd             = "KVFENCE_ETCD"
	envEtcdPrefix       = "KVFENCE_ETCD_PREFIX"
	envEtcdUser         = "KVFENCE_ETCD_USER"
	envEtcdPasswordFile = "KVFENCE_ETCD_PASSWORD_FILE"
)

// etcdDialTimeout bounds connecting to a member of --etcd.
const etcdDialTimeout = 5 * time.Second

// etcdFlags select an etcd cluster: --etcd URL[,URL…], its TLS files and
// the etcd user to authenticate as.
type etcdFlags struct {
	urls, cert, key, ca string
	// user and passwordFile are --etcd-user and --etcd-password-file: the
	// password is read from a private file, never taken from a flag's
	// value, where every user of the machine could read it.
	user, passwordFile string
	maxTxnOps          int      // --etcd-max-txn-ops: the cluster's --max-txn-ops
	endpoints          []string // checked URLs, set by check
}

func (e *etcdFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.urls, "etcd", "", "")
	fs.StringVar(&e.cert, "etcd-cert", "", "")
	fs.StringVar(&e.key, "etcd-key", "", "")
	fs.StringVar(&e.ca, "etcd-ca", "", "")
	fs.StringVar(&e.user, "etcd-user", "", "")
	fs.StringVar(&e.passwordFile, "etcd-password-file", "", "")
	fs.IntVar(&e.maxTxnOps, "etcd-max-txn-ops", etcdengine.DefaultMaxTxnOps, "")
}

// on reports whether --etcd was given.
func (e *etcdFlags) on() bool { return e.urls != "" }

// check parses --etcd into endpoints and refuses, as usage errors, a URL
// that is not http:// or https:// with HOST:PORT and nothing else, plain
// http with TLS files (nothing falls back to plain text), TLS files
// without --etcd, and a certificate without its key or the reverse.
func (e *etcdFlags) check(cmd string) error {
	usage := func(format string, args ...any) error {
		return &usageError{msg: fmt.Sprintf("kvfence "+cmd+": "+format, args...),
			hint: "--etcd http://127.0.0.1:2379[,http://HOST:PORT...], or https:// with --etcd-ca"}
	}
	tls := e.cert != "" || e.key != "" || e.ca != ""
	auth := e.user != "" || e.passwordFile != ""
	if !e.on() {
		if tls {
			return usage("--etcd-cert, --etcd-key and --etcd-ca go with --etcd")
		}
		if auth {
			return usage("--etcd-user and --etcd-password-file go with --etcd")
		}
		return nil
	}
	if (e.cert == "") != (e.key == "") {
		return usage("--etcd-cert and --etcd-key go together")
	}
	if (e.user == "") != (e.passwordFile == "") {
		return usage("--etcd-user and --etcd-password-file go together")
	}
	if e.maxTxnOps < etcdengine.DefaultMaxTxnOps || e.maxTxnOps > maxEtcdTxnOps {
		return usage("--etcd-max-txn-ops %d: want the cluster's --max-txn-ops, from %d (etcd's default) to %d",
			e.maxTxnOps, etcdengine.DefaultMaxTxnOps, maxEtcdTxnOps)
	}
	var hosts []string
	scheme := ""
	for u := range strings.SplitSeq(e.urls, ",") {
		s, hp, ok := strings.Cut(u, "://")
		if !ok || (s != "http" && s != "https") {
			return usage("--etcd %q: want http://HOST:PORT or https://HOST:PORT", u)
		}
		if strings.ContainsAny(hp, "/?#") {
			return usage("--etcd %q: a URL names only the scheme and HOST:PORT", u)
		}
		if scheme != "" && s != scheme {
			return usage("--etcd mixes http:// and https://")
		}
		scheme = s
		hosts = append(hosts, hp)
	}
	if scheme == "http" && tls {
		return usage("--etcd http://... with TLS files: use https://")
	}
	// The endpoints follow the etcd anchor's rules: HOST:PORT only, no
	// path, user information or duplicates.
	if _, err := etcdanchor.ParseAddress(etcdanchor.Scheme + strings.Join(hosts, ",") + "/k"); err != nil {
		return usage("--etcd %q: %v", e.urls, strings.TrimPrefix(err.Error(), etcdanchor.ErrBadAddress.Error()+": "))
	}
	e.endpoints = nil
	for _, hp := range hosts {
		e.endpoints = append(e.endpoints, scheme+"://"+hp)
	}
	return nil
}

// client connects to the checked endpoints. Without --etcd-user it does
// not contact the cluster (the first request does); with it, it
// authenticates first, within the dial timeout, and then refuses a
// cluster whose auth is off (etcdauth.ErrAuthOff), on which etcd's client
// would go on without the user.
func (e *etcdFlags) client(cmd string) (*clientv3.Client, error) {
	tlsCfg, err := (&etcdanchor.Options{CertFile: e.cert, KeyFile: e.key, CAFile: e.ca}).TLSConfig()
	if err != nil {
		return nil, fmt.Errorf("kvfence %s: --etcd: %w", cmd, err)
	}
	if tlsCfg == nil && strings.HasPrefix(e.endpoints[0], "https://") {
		// https:// without files: the system's CAs, no client certificate.
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	password := ""
	if e.passwordFile != "" {
		if password, err = keyfile.LoadPassword(e.passwordFile); err != nil {
			return nil, &usageError{msg: fmt.Sprintf("kvfence %s: --etcd-password-file: %v", cmd, err),
				hint: "a file of one line, mode 0600, that only the receiver's user can read"}
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.endpoints, DialTimeout: etcdDialTimeout, TLS: tlsCfg,
		Username: e.user, Password: password, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("kvfence %s: --etcd: %w", cmd, err)
	}
	if e.user != "" {
		if err := requireAuth(cli); err != nil {
			cli.Close()
			return nil, authOffErr(cmd, "--etcd", "--etcd-user", e.user, err)
		}
	}
	cli.KV = timeoutKV{KV: cli.KV, d: etcdRequestTimeout}
	return cli, nil
}

// usageEtcdTLS documents the TLS and auth flags of --etcd.
const usageEtcdTLS = `	--etcd-cert FILE, --etcd-key FILE, --etcd-ca FILE
	    TLS for --etcd https://...: a client certificate and its key (both
	    or neither; the key not readable by group or others), and the CA
	    that the members' certificates chain to (default: the system's).
	--etcd-user NAME, --etcd-password-file FILE
	    etcd auth: the user to authenticate as and a file holding its
	    password on one line (both or neither; the file not readable by
	    group or others, at most 1024 bytes). Default to $KVFENCE_ETCD_USER
	    and $KVFENCE_ETCD_PASSWORD_FILE ($KVFENCE_LEDGER_ETCD_USER and
	    $KVFENCE_LEDGER_ETCD_PASSWORD_FILE for the ledger). A user given
	    for a cluster whose auth is off is refused (exit 2): etcd's client
	    would go on without it.
	    deploy/etcd/README.md gives the roles that leave workers read-only.
	--etcd-max-txn-ops N
	    The cluster's --max-txn-ops (default 128, etcd's): one transaction
	    holds at most that many operations, which bounds how many scopes
	    hold --all and a recovery cover at once. A value above the
	    cluster's makes large transactions fail at etcd, with nothing
	    written.
`

// maxEtcdTxnOps bounds --etcd-max-txn-ops.
const maxEtcdTxnOps = 1 << 20

// maxEtcdPrefix bounds --etcd-prefix.
const maxEtcdPrefix = 256

// storeBuckets are the bucket names of the receiver (kvfence/records.go)
// and the ledger (ledger/records.go). The etcd engine keeps bucket b's key
// k at PREFIX b "/" k, so a prefix that has one of them as a segment can lie
// inside another receiver's bucket (/kvfence/control/ inside the control
// bucket of /kvfence/), where each one's writes are the other's records.
var storeBuckets = map[string]bool{"meta": true, "control": true, "grants": true, "targets": true, "receipts": true,
	"holds": true, "effects": true, "audit": true, "checkpoints": true, "tree": true, "approvals": true, "actions": true, "claims": true,
	"receivers": true, "containments": true}

// checkEtcdPrefix refuses a prefix that is not /SEGMENT/[SEGMENT/...] of
// letters, digits, '.', '_' and '-': every key of the receiver goes below
// it, and "/" alone would put them among everything else on the cluster. A
// segment may not be a bucket name (storeBuckets), so that no two prefixes
// this command accepts overlap each other's records.
func checkEtcdPrefix(p string) error {
	if len(p) > maxEtcdPrefix {
		return fmt.Errorf("%d bytes, more than %d", len(p), maxEtcdPrefix)
	}
	if !strings.HasPrefix(p, "/") || !strings.HasSuffix(p, "/") || len(p) < 3 {
		return fmt.Errorf("want /NAME/ or /NAME/NAME/..., e.g. %s", etcdengine.DefaultPrefix)
	}
	for seg := range strings.SplitSeq(p[1:len(p)-1], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("empty, . or .. segment")
		}
		if storeBuckets[seg] {
			return fmt.Errorf("segment %q is the name of a bucket of the receiver or the ledger: under another receiver's prefix it would "+
				"be that receiver's bucket, and its keys that receiver's records", seg)
		}
		for _, r := range seg {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
				return fmt.Errorf("%q is not allowed: letters, digits, '.', '_' and '-' only", r)
			}
		}
	}
	return nil
}

// checkStore checks how the receiver's store is named, before anything is
// opened: --db or --etcd (not both), a good --etcd and --etcd-prefix, and
// an etcd anchor on none of --etcd's endpoints, since the anchor must live
// apart from what it guards (docs/design.md §13).
func (c *commonFlags) checkStore() error {
	if c.db != "" && c.etcd.on() {
		return &usageError{msg: fmt.Sprintf("kvfence %s: --db and --etcd both name the receiver's store (flags or %s, %s)", c.name, envDB, envEtcd),
			hint: "give one of them"}
	}
	if err := c.etcd.check(c.name); err != nil {
		return err
	}
	if !c.etcd.on() {
		if c.etcdPrefixSet {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --etcd-prefix goes with --etcd", c.name), hint: "kvfence " + c.name + " -h"}
		}
		return nil
	}
	if err := checkEtcdPrefix(c.etcdPrefix); err != nil {
		return &usageError{msg: fmt.Sprintf("kvfence %s: --etcd-prefix %q: %v", c.name, c.etcdPrefix, err), hint: "kvfence " + c.name + " -h"}
	}
	if isEtcdAnchor(c.anchor) {
		if a, err := etcdanchor.ParseAddress(c.anchor); err == nil {
			for _, hp := range a.Endpoints {
				for _, ep := range c.etcd.endpoints {
					if strings.EqualFold(ep[strings.Index(ep, "://")+3:], hp) {
						return &usageError{msg: fmt.Sprintf("kvfence %s: --anchor is on %s, a member of --etcd: the anchor must be on a separate cluster", c.name, hp),
							hint: "an anchor restored with the receiver's own cluster would vouch for the restored state"}
					}
				}
			}
		}
	}
	return nil
}

// openEngine connects to --etcd and returns the engine on --etcd-prefix.
func (c *commonFlags) openEngine() (engine.Engine, error) {
	cli, err := c.etcd.client(c.name)
	if err != nil {
		return nil, err
	}
	e, err := etcdengine.New(cli, &etcdengine.Options{Prefix: c.etcdPrefix, MaxTxnOps: c.etcd.maxTxnOps, Reserved: c.reserved})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("kvfence %s: %w", c.name, err)
	}
	// The anchor, opened first, must not be on this cluster: checked
	// before the engine is handed to anything that could write.
	if err := c.anchorEtcd.checkApart(c.name, e); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// openReceiver opens the receiver in --db, or on --etcd.
func (c *commonFlags) openReceiver(opts *kvfence.Options) (*kvfence.Receiver, error) {
	opts.AnchorClusterID = c.anchorEtcd.clusterID
	d, err := c.kube.dispatchers(c.name)
	if err != nil {
		return nil, err
	}
	opts.Dispatchers = d
	if !c.etcd.on() {
		return kvfence.Open(c.db, opts)
	}
	e, err := c.openEngine()
	if err != nil {
		return nil, err
	}
	return kvfence.OpenEngine(e, opts) // owns e, closes it on failure
}

// storeName names the receiver's store for output: the file, or the etcd
// prefix and endpoints.
func (c *commonFlags) storeName() string {
	if !c.etcd.on() {
		return c.db
	}
	return "etcd " + c.etcdPrefix + " on " + strings.Join(c.etcd.endpoints, ",")
}

// usageEtcd documents the flags that put the receiver on etcd.
const usageEtcd = `	--etcd URL[,URL...]
	    The receiver on an etcd cluster instead of --db (not both):
	    http://HOST:PORT or https://HOST:PORT of its members. Defaults to
	    $KVFENCE_ETCD. Each request is bounded by 10s. A commit whose
	    outcome is unknown (a timeout, a lost leader) exits 1 saying so:
	    retry the same command (a submit is answered from its receipt);
	    writers that kept conflicting exit 5.
	--etcd-prefix PREFIX
	    The receiver's keys on that cluster (default /kvfence/; defaults
	    to $KVFENCE_ETCD_PREFIX). Several receiver processes may share one.
	    No segment may be a bucket name (meta, control, grants, targets,
	    receipts, audit, checkpoints, approvals, actions, claims): such a
	    prefix could lie inside another receiver's bucket.
` + usageEtcdTLS
