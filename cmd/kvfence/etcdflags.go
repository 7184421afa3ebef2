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
)

// Environment fallbacks of the etcd flags.
const (
	envEtcd       = "KVFENCE_ETCD"
	envEtcdPrefix = "KVFENCE_ETCD_PREFIX"
)

// etcdDialTimeout bounds connecting to a member of --etcd.
const etcdDialTimeout = 5 * time.Second

// etcdFlags select an etcd cluster: --etcd URL[,URL…] and its TLS files.
type etcdFlags struct {
	urls, cert, key, ca string
	endpoints           []string // checked URLs, set by check
}

func (e *etcdFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.urls, "etcd", "", "")
	fs.StringVar(&e.cert, "etcd-cert", "", "")
	fs.StringVar(&e.key, "etcd-key", "", "")
	fs.StringVar(&e.ca, "etcd-ca", "", "")
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
	if !e.on() {
		if tls {
			return usage("--etcd-cert, --etcd-key and --etcd-ca go with --etcd")
		}
		return nil
	}
	if (e.cert == "") != (e.key == "") {
		return usage("--etcd-cert and --etcd-key go together")
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

// client connects to the checked endpoints. It does not contact the
// cluster: the first request does.
func (e *etcdFlags) client(cmd string) (*clientv3.Client, error) {
	tlsCfg, err := (&etcdanchor.Options{CertFile: e.cert, KeyFile: e.key, CAFile: e.ca}).TLSConfig()
	if err != nil {
		return nil, fmt.Errorf("kvfence %s: --etcd: %w", cmd, err)
	}
	if tlsCfg == nil && strings.HasPrefix(e.endpoints[0], "https://") {
		// https:// without files: the system's CAs, no client certificate.
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.endpoints, DialTimeout: etcdDialTimeout, TLS: tlsCfg,
		Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("kvfence %s: --etcd: %w", cmd, err)
	}
	return cli, nil
}

// usageEtcdTLS documents the TLS flags of --etcd.
const usageEtcdTLS = `	--etcd-cert FILE, --etcd-key FILE, --etcd-ca FILE
	    TLS for --etcd https://...: a client certificate and its key (both
	    or neither; the key not readable by group or others), and the CA
	    that the members' certificates chain to (default: the system's).
`
