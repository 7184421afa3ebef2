package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/spiffesource"
)

// remoteFlags are the flags of a command that can talk to a running
// receiver instead of opening its file (docs/design.md §12).
type remoteFlags struct {
	server, tlsCert, tlsKey, tlsCA string
	// serverUID is --server-uid as given; serverUIDs is it parsed.
	serverUID  string
	serverUIDs []uint32
	// spiffeSocket and serverID take the client's credentials from a
	// Workload API instead of the --tls-* files; src is the Workload API
	// connection dial opened, closed by release.
	spiffeSocket, serverID string
	src                    *spiffesource.Source
}

func (rf *remoteFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&rf.server, "server", "", "")
	fs.StringVar(&rf.tlsCert, "tls-cert", "", "")
	fs.StringVar(&rf.tlsKey, "tls-key", "", "")
	fs.StringVar(&rf.tlsCA, "tls-ca", "", "")
	fs.StringVar(&rf.serverUID, "server-uid", "", "")
	fs.StringVar(&rf.spiffeSocket, "spiffe-socket", "", "")
	fs.StringVar(&rf.serverID, "server-id", "", "")
}

// on reports whether --server was given.
func (rf *remoteFlags) on() bool { return rf.server != "" }

// check refuses flags that do not go with the mode: with --server, the
// file flags (--db, --anchor, --key, --pub, --lock-timeout), since the
// receiver's files belong to the process serving it; without it, the TLS
// flags. Their environment fallbacks are ignored with --server.
//
// keep names file flags that the command takes with --server too (backup's
// --pub, the operator's own copy of the key that checks the answer).
func (rf *remoteFlags) check(fs *flag.FlagSet, cmd string, keep ...string) error {
	if !rf.on() {
		for _, f := range []string{"tls-cert", "tls-key", "tls-ca", "server-uid", "spiffe-socket", "server-id"} {
			if isSet(fs, f) {
				return &usageError{msg: fmt.Sprintf("kvfence %s: --%s goes with --server", cmd, f), hint: "kvfence " + cmd + " -h"}
			}
		}
		return nil
	}
	for _, f := range []string{"db", "anchor", "anchor-etcd-cert", "anchor-etcd-key", "anchor-etcd-ca", "etcd", "etcd-prefix", "etcd-cert", "etcd-key", "etcd-ca", "etcd-max-txn-ops", "key", "pub", "lock-timeout",
		"witness", "witness-pub", "witness-quorum", "witness-ca"} {
		if isSet(fs, f) && !slices.Contains(keep, f) {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --%s does not go with --server: the server opens the receiver", cmd, f),
				hint: "drop --" + f}
		}
	}
	for _, f := range []string{"kubeconfig", "kube-context", "kube-in-cluster"} {
		if isSet(fs, f) {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --%s does not go with --server: the server reaches Kubernetes through its own identity (its kvfence serve --kubeconfig)", cmd, f),
				hint: "drop --" + f}
		}
	}
	switch {
	case strings.HasPrefix(rf.server, "https://") && (rf.spiffeSocket != "" || rf.serverID != ""):
		if rf.tlsCert != "" || rf.tlsKey != "" || rf.tlsCA != "" {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --spiffe-socket and --tls-cert, --tls-key, --tls-ca are two sources of your credentials: give one", cmd),
				hint: "drop the --tls-* flags to take your SVID and bundle from the Workload API"}
		}
		if rf.spiffeSocket == "" || rf.serverID == "" {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --spiffe-socket and --server-id go together: the receiver is admitted only by its SPIFFE ID", cmd),
				hint: "--server-id spiffe://example.org/kvfence/receiver"}
		}
		if _, err := parseSPIFFE(rf.serverID); err != nil {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --server-id %q is not a SPIFFE ID: %v", cmd, rf.serverID, err),
				hint: "--server-id spiffe://example.org/kvfence/receiver"}
		}
		if isSet(fs, "server-uid") {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --server-uid goes with --server unix://...: an https receiver is identified by its certificate", cmd)}
		}
	case strings.HasPrefix(rf.server, "https://"):
		if rf.tlsCert == "" || rf.tlsKey == "" || rf.tlsCA == "" {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --server https://... needs --tls-cert, --tls-key and --tls-ca", cmd),
				hint: "kvfence cert -h, to make them"}
		}
		if isSet(fs, "server-uid") {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --server-uid goes with --server unix://...: an https receiver is identified by its certificate", cmd)}
		}
	case strings.HasPrefix(rf.server, "unix://"):
		if rf.tlsCert != "" || rf.tlsKey != "" || rf.tlsCA != "" || rf.spiffeSocket != "" || rf.serverID != "" {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --server unix://... takes no TLS or SPIFFE flags: the socket identifies you by uid", cmd)}
		}
		if isSet(fs, "server-uid") {
			uid, err := strconv.ParseUint(rf.serverUID, 10, 32)
			if err != nil {
				return &usageError{msg: fmt.Sprintf("kvfence %s: --server-uid %q is not a uid", cmd, rf.serverUID),
					hint: "give the numeric uid the receiver runs as: id -u USER"}
			}
			rf.serverUIDs = []uint32{uint32(uid)}
		}
	default:
		return &usageError{msg: fmt.Sprintf("kvfence %s: --server %q: want https://HOST:PORT or unix:///PATH", cmd, rf.server)}
	}
	return nil
}

// dial returns a client for --server; release closes what it opened
// besides.
func (rf *remoteFlags) dial() (*client.Client, error) {
	var cfg *tls.Config
	switch {
	case strings.HasPrefix(rf.server, "https://") && rf.spiffeSocket != "":
		src, err := spiffesource.Open(context.Background(), spiffesource.Options{Address: rf.spiffeSocket})
		if err != nil {
			return nil, fmt.Errorf("--spiffe-socket: %w", err)
		}
		if cfg, err = src.ClientTLS(rf.serverID); err != nil {
			src.Close()
			return nil, fmt.Errorf("--server-id: %w", err)
		}
		rf.src = src
	case strings.HasPrefix(rf.server, "https://"):
		cert, err := tls.LoadX509KeyPair(rf.tlsCert, rf.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		pem, err := os.ReadFile(rf.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", rf.tlsCA)
		}
		cfg = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, Certificates: []tls.Certificate{cert}}
	}
	cl, err := client.NewWith(rf.server, client.Options{TLS: cfg, ServerUIDs: rf.serverUIDs})
	if err != nil {
		rf.release()
	}
	return cl, err
}

// release closes the Workload API connection dial opened, if any.
func (rf *remoteFlags) release() {
	if rf.src != nil {
		rf.src.Close()
		rf.src = nil
	}
}

const usageServer = `	--server URL
	    Talk to a running "kvfence serve" instead of opening the database:
	    https://HOST:PORT (with --tls-cert, --tls-key and --tls-ca, or
	    --spiffe-socket and --server-id) or unix:///PATH (the admin socket). --db, --anchor and --key are then
	    not taken, and their environment variables are ignored.
	--tls-cert F, --tls-key F, --tls-ca F
	    Your client certificate and key, and the CA of the server's
	    certificate, for --server https://.
	--spiffe-socket unix:///PATH, --server-id ID
	    For --server https://, instead of the --tls-* files: take your
	    X.509-SVID and trust bundle from this SPIFFE Workload API (a
	    SPIRE agent; the first SVID is awaited at most 30s), and admit
	    the receiver only if its SVID has the SPIFFE ID --server-id.
	--server-uid UID
	    For --server unix://: the uid the receiver runs as. Nothing is
	    sent unless the process serving the socket, and the socket
	    file's owner, have this uid (default: your own uid or root).
`

// either runs remote against --server when it is given, and otherwise
// local against the receiver's file, opened for writing or for
// observation, and closed before it returns.
func either[T any](cf *commonFlags, rf *remoteFlags, write bool, warn func(string), local func(*kvfence.Receiver) (T, error),
	remote func(*client.Client) (T, error)) (res T, err error) {
	if rf.on() {
		cl, err := rf.dial()
		if err != nil {
			return res, err
		}
		defer rf.release()
		defer cl.Close()
		return remote(cl)
	}
	var r *kvfence.Receiver
	if write {
		r, err = cf.openWriter(warn)
	} else {
		r, err = cf.openObserver(warn)
	}
	if err != nil {
		return res, err
	}
	defer closeReceiver(r, &err)
	return local(r)
}
