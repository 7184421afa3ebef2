package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/metrics"
	"github.com/kvfence/kvfence/server"
	"github.com/kvfence/kvfence/spiffesource"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ServeCommand runs a receiver as a service (docs/design.md §12): workers submit
// over mTLS, operators administer it over mTLS or a local unix socket, and
// Prometheus scrapes its metrics, all while it serves.
type ServeCommand struct{ m *Main }

// Timeouts and limits of the served HTTP connections. A submit waits for
// its group commit and anchor write, milliseconds on a healthy disk; the
// write timeout leaves room for a slow one without letting a stuck client
// hold a connection forever.
const (
	serveReadHeaderTimeout = 10 * time.Second
	serveReadTimeout       = 30 * time.Second
	serveWriteTimeout      = 60 * time.Second
	serveIdleTimeout       = 120 * time.Second
	serveMaxHeaderBytes    = 16 << 10
	// serveDrainTimeout bounds the wait for calls in flight at SIGTERM.
	serveDrainTimeout = 30 * time.Second
)

// serveJSON is what serve prints on stdout once it listens: the addresses,
// so that a script that asked for port 0 learns the port.
type serveJSON struct {
	Listen        string `json:"listen"`
	AdminSocket   string `json:"admin_socket"`
	MetricsListen string `json:"metrics_listen"`
	Receiver      string `json:"receiver"`
	AuditSeq      uint64 `json:"audit_seq"`
}

// uidList is a repeatable, comma-separated list of uids.
type uidList []uint32

func (l *uidList) String() string {
	var s []string
	for _, u := range *l {
		s = append(s, strconv.FormatUint(uint64(u), 10))
	}
	return strings.Join(s, ",")
}

func (l *uidList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		u, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return fmt.Errorf("uid %q: not a number", f)
		}
		*l = append(*l, uint32(u))
	}
	return nil
}

// envPrefix starts the name of every variable a serve flag falls back to.
const envPrefix = "KVFENCE_"

// envName is the variable that flag falls back to: KVFENCE_ and the flag's
// name upper-cased, dashes turned to underscores (--admin-socket is
// KVFENCE_ADMIN_SOCKET). Derived rather than listed, so that a flag added
// to serve has its variable without anyone remembering to add it.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// setFromEnv gives every flag of fs that the command line did not set the
// value of its variable (envName), when that variable is set and not
// empty; a flag on the command line wins, even when given as empty. The
// value goes through the flag's own parser, so a variable is held to what
// its flag accepts: a value the flag refuses is a usage error naming the
// variable, and nothing starts. KVFENCE_ADMIN, like a repeated --admin,
// may list several IDs, comma-separated (a SPIFFE ID has no comma), and
// KVFENCE_WITNESS and KVFENCE_WITNESS_PUB several NAME=VALUE pairs.
func setFromEnv(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		v := getenv(name)
		if err != nil || given[f.Name] || v == "" {
			return
		}
		vals := []string{v}
		if _, list := f.Value.(*namedValues); list || f.Name == "admin" {
			vals = strings.Split(v, ",")
		}
		for _, x := range vals {
			e := fs.Set(f.Name, x)
			if e == nil && x == "" {
				// "a,,b" or a trailing comma: refused here, where the
				// variable can still be named.
				e = errors.New("an empty item in the list")
			}
			if e != nil {
				err = &usageError{msg: fmt.Sprintf("kvfence %s: %s=%q (for --%s): %v", strings.TrimPrefix(fs.Name(), "kvfence "), name, v, f.Name, envValueError(f, e)),
					hint: fmt.Sprintf("unset %s or give --%s", name, f.Name)}
				return
			}
		}
	})
	return err
}

// envValueError says what f wants when it refused a value: the flag
// package reports a bad number or boolean only as "parse error".
func envValueError(f *flag.Flag, err error) error {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err
	}
	switch g.Get().(type) {
	case bool:
		return errors.New("want true or false")
	case int, int64, uint, uint64:
		return errors.New("want a whole number")
	case time.Duration:
		return errors.New("want a duration such as 30s")
	}
	return err
}

// serveFlags holds serve's own flags.
type serveFlags struct {
	listen, tlsCert, tlsKey, clientCA string
	admins                            stringList
	adminSocket                       string
	adminUIDs                         uidList
	adminGroup                        string
	maxConns, maxRecords              int
	metricsListen                     string
	perScope                          bool
	spiffeSocket                      string
	spiffeTimeout                     time.Duration
	logFormat                         logFormat
	logLevel                          logLevel
	logDecisions                      bool
}

// newServeFlags returns serve's flag set: the common flags and its own.
func newServeFlags() (*flag.FlagSet, *commonFlags, *serveFlags) {
	fs := newFlagSet("serve")
	cf := &commonFlags{name: "serve"}
	cf.register(fs, withDB|withKey)
	sf := &serveFlags{}
	fs.StringVar(&sf.listen, "listen", "", "")
	fs.StringVar(&sf.tlsCert, "tls-cert", "", "")
	fs.StringVar(&sf.tlsKey, "tls-key", "", "")
	fs.StringVar(&sf.clientCA, "client-ca", "", "")
	fs.Var(&sf.admins, "admin", "")
	fs.StringVar(&sf.adminSocket, "admin-socket", "", "")
	fs.Var(&sf.adminUIDs, "admin-uid", "")
	fs.StringVar(&sf.adminGroup, "admin-socket-group", "", "")
	fs.IntVar(&sf.maxConns, "max-connections", 0, "")
	fs.IntVar(&sf.maxRecords, "max-records", kvfence.DefaultMaxRecords, "")
	fs.StringVar(&sf.metricsListen, "metrics-listen", "", "")
	fs.BoolVar(&sf.perScope, "metrics-per-scope", false, "")
	fs.StringVar(&sf.spiffeSocket, "spiffe-socket", "", "")
	fs.DurationVar(&sf.spiffeTimeout, "spiffe-timeout", spiffesource.DefaultTimeout, "")
	sf.logFormat, sf.logLevel = "text", logLevel{slog.LevelInfo}
	fs.Var(&sf.logFormat, "log-format", "")
	fs.Var(&sf.logLevel, "log-level", "")
	fs.BoolVar(&sf.logDecisions, "log-decisions", false, "")
	return fs, cf, sf
}

// Run runs the command until its context is done (SIGTERM or SIGINT).
func (c *ServeCommand) Run(ctx context.Context, args []string) (err error) {
	fs, cf, sf := newServeFlags()
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	if err := setFromEnv(fs, c.m.Getenv); err != nil {
		return err
	}
	listen, tlsCert, tlsKey, clientCA := &sf.listen, &sf.tlsCert, &sf.tlsKey, &sf.clientCA
	admins, adminSocket, adminUIDs, adminGroup := sf.admins, &sf.adminSocket, sf.adminUIDs, &sf.adminGroup
	maxConns, maxRecords, metricsListen, perScope := &sf.maxConns, &sf.maxRecords, &sf.metricsListen, &sf.perScope
	cf.resolve(fs, c.m.Getenv)
	if err := cf.requireWriter(); err != nil {
		return err
	}
	if err := sf.checkCredentialFlags(fs); err != nil {
		return err
	}
	switch {
	case (*adminSocket == "") != (len(adminUIDs) == 0):
		return &usageError{msg: "kvfence serve: --admin-socket and --admin-uid go together", hint: "kvfence serve -h"}
	case len(admins) == 0 && *adminSocket == "":
		return &usageError{msg: "kvfence serve: no administrator: give --admin ID, or --admin-socket with --admin-uid",
			hint: "kvfence serve -h"}
	}
	for _, a := range admins {
		// Held to what the authenticator accepts from a certificate: an ID
		// it could never produce (a trailing space or slash, an upper-case
		// trust domain) would admit no one, silently.
		if _, err := parseSPIFFE(a); err != nil {
			return &usageError{msg: fmt.Sprintf("kvfence serve: --admin %q is not a SPIFFE ID: %v", a, err), hint: "--admin spiffe://example.org/ops/alice"}
		}
	}
	var sockOpts server.UnixSocketOptions
	if *adminGroup != "" {
		if *adminSocket == "" {
			return &usageError{msg: "kvfence serve: --admin-socket-group needs --admin-socket", hint: "kvfence serve -h"}
		}
		gid, err := lookupGroup(*adminGroup)
		if err != nil {
			return &usageError{msg: fmt.Sprintf("kvfence serve: --admin-socket-group: %v", err), hint: "a group name or gid"}
		}
		sockOpts.Group = &gid
	}
	conns, err := connectionCap(fs, *maxConns)
	if err != nil {
		return err
	}
	if *maxRecords < 1 {
		return &usageError{msg: fmt.Sprintf("kvfence serve: --max-records %d: must be at least 1", *maxRecords), hint: "kvfence serve -h"}
	}
	log := newServeLogger(c.m.Stderr, sf.logFormat, sf.logLevel)

	var certs serveCredentials
	var reload func() error // nil: SIGHUP has nothing to reload
	var trustDomain string
	if sf.spiffeSocket != "" {
		src, td, err := openSPIFFE(ctx, sf, admins, log)
		if err != nil {
			return err
		}
		defer src.Close()
		sc, err := server.NewSourceCredentials(src)
		if err != nil {
			return fmt.Errorf("--spiffe-socket: %w", err)
		}
		certs, trustDomain = sc, td
	} else {
		fc, err := server.LoadCredentials(*tlsCert, *tlsKey, *clientCA)
		if err != nil {
			return fmt.Errorf("--tls-cert/--tls-key/--client-ca: %w", err)
		}
		certs, reload = fc, fc.Reload
	}
	var obs *metrics.Metrics
	// requests stays a nil interface without metrics, not a nil *Metrics.
	var requests server.RequestObserver
	if *metricsListen != "" {
		version, revision := buildVersion()
		engine := "bbolt"
		if cf.etcd.on() {
			engine = "etcd"
		}
		obs = metrics.New(metrics.Options{PerScope: *perScope, Version: version, Revision: revision, Engine: engine,
			CertificateExpiry: certs.NotAfter})
		requests = obs
	}
	r, err := c.open(cf, obs, *maxRecords)
	if err != nil {
		return err
	}
	defer closeReceiver(r, &err)

	tlsHandler, err := server.New(server.Options{Receiver: r, Authenticator: server.SPIFFECertificate{Roots: certs, TrustDomain: trustDomain},
		Admins: admins, Logger: log.With("listener", "tls"), LogDecisions: sf.logDecisions, Requests: requests})
	if err != nil {
		return err
	}
	srvs := &servers{log: log}
	tlsSrv := newHTTPServer(tlsHandler, log)
	// The listener does the handshakes, within their own deadline, and
	// caps the connections; the server sees only completed ones.
	tlsSrv.ConnContext = server.ConnContext
	// Workers cannot take the last connections: an administrator's
	// certificate finds one free during a flood.
	lopts := server.ListenerOptions{MaxConnections: conns, TLS: certs.TLSConfig(), Logger: log.With("listener", "tls")}
	if len(admins) > 0 {
		lopts.Reserved, lopts.Privileged = server.AdminReserve(conns), server.AdminPeers(admins, trustDomain)
	}
	l, err := listenCapped("tcp", *listen, lopts)
	if err != nil {
		return err
	}
	srvs.add("tls", tlsSrv, l, func() error { return tlsSrv.Serve(l) })
	out := serveJSON{Listen: l.Addr().String(), Receiver: r.ID(), AuditSeq: r.Head().Seq}

	if *adminSocket != "" {
		ids := make([]string, len(adminUIDs))
		for i, u := range adminUIDs {
			ids[i] = server.UnixIdentity(u)
		}
		h, err := server.New(server.Options{Receiver: r, Authenticator: server.UnixPeer{UIDs: adminUIDs}, Admins: ids,
			Logger: log.With("listener", "admin-socket"), LogDecisions: sf.logDecisions, Requests: requests})
		if err != nil {
			srvs.close()
			return err
		}
		// A peer not on --admin-uid is disconnected as it is accepted,
		// so that it holds none of the socket's connection slots.
		sockOpts.UIDs = adminUIDs
		ul, err := server.ListenUnixSocket(*adminSocket, sockOpts)
		if err != nil {
			srvs.close()
			return err
		}
		sl, err := server.NewListener(ul, server.ListenerOptions{MaxConnections: server.AdminSocketMaxConnections,
			Logger: log.With("listener", "admin-socket")})
		if err != nil {
			ul.Close()
			srvs.close()
			return err
		}
		s := newHTTPServer(h, log)
		s.ConnContext = server.ConnContext
		srvs.add("admin-socket", s, sl, func() error { return s.Serve(sl) })
		out.AdminSocket = *adminSocket
	}
	if obs != nil {
		reg := prometheus.NewRegistry()
		if err := obs.Register(reg, r); err != nil {
			srvs.close()
			return err
		}
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}))
		probes, err := server.NewProbes(server.ProbeOptions{Receiver: r})
		if err != nil {
			srvs.close()
			return err
		}
		mux.Handle("GET /healthz", probes)
		mux.Handle("GET /readyz", probes)
		ml, err := listenCapped("tcp", *metricsListen, server.ListenerOptions{MaxConnections: server.MetricsMaxConnections,
			Logger: log.With("listener", "metrics")})
		if err != nil {
			srvs.close()
			return err
		}
		s := newHTTPServer(mux, log)
		srvs.add("metrics", s, ml, func() error { return s.Serve(ml) })
		out.MetricsListen = ml.Addr().String()
	}

	hup := c.m.Hangup
	if hup == nil {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGHUP)
		defer signal.Stop(ch)
		hup = ch
	}
	errc := srvs.start()
	log.Info("serving", "receiver", r.ID(), "listen", out.Listen, "admin_socket", out.AdminSocket,
		"metrics_listen", out.MetricsListen, "audit_seq", out.AuditSeq)
	if cf.json {
		writeJSON(c.m.Stdout, out)
	} else {
		fmt.Fprintf(c.m.Stdout, "serving receiver %s on %s\n", r.ID(), out.Listen)
	}
	for {
		select {
		case <-hup:
			if reload == nil {
				log.Info("SIGHUP: the certificate and client CA come from the Workload API, which rotates them; nothing to reload")
				continue
			}
			if err := reload(); err != nil {
				log.Error("reloading certificates failed; still serving the previous ones", "error", err)
			} else {
				log.Info("reloaded certificates and client CA; connections whose client certificate no longer verifies are refused and closed at their next request")
			}
			continue
		case err := <-errc:
			// A listener failed: stop the others and report it.
			log.Error("a listener failed; shutting down", "error", err)
			srvs.shutdown()
			return err
		case <-ctx.Done():
		}
		break
	}
	log.Info("shutting down: no new connections; finishing the calls in flight")
	if err := srvs.shutdown(); err != nil {
		return err
	}
	log.Info("stopped", "audit_seq", r.Head().Seq)
	return nil
}

// serveCredentials are the server's certificate and client CA, from files
// or from a Workload API.
type serveCredentials interface {
	server.ClientRoots
	TLSConfig() *tls.Config
	NotAfter() time.Time
}

// checkCredentialFlags requires --listen and one source of the server's
// credentials: --tls-cert, --tls-key and --client-ca, or --spiffe-socket.
// Both at once would leave it unclear which certificate workers see and
// which CA admits them, so they are refused, whether given as flags or as
// variables.
func (sf *serveFlags) checkCredentialFlags(fs *flag.FlagSet) error {
	if sf.spiffeSocket == "" {
		if isSet(fs, "spiffe-timeout") {
			return &usageError{msg: "kvfence serve: --spiffe-timeout goes with --spiffe-socket", hint: "kvfence serve -h"}
		}
		return require("serve", [2]string{"listen", sf.listen}, [2]string{"tls-cert", sf.tlsCert},
			[2]string{"tls-key", sf.tlsKey}, [2]string{"client-ca", sf.clientCA})
	}
	for _, f := range [][2]string{{"tls-cert", sf.tlsCert}, {"tls-key", sf.tlsKey}, {"client-ca", sf.clientCA}} {
		if f[1] != "" {
			return &usageError{msg: fmt.Sprintf("kvfence serve: --spiffe-socket and --%s (or %s) are two sources of the server's credentials: give one",
				f[0], envName(f[0])), hint: "drop --tls-cert, --tls-key and --client-ca to take the SVID and bundle from the Workload API"}
		}
	}
	if sf.spiffeTimeout <= 0 {
		return &usageError{msg: fmt.Sprintf("kvfence serve: --spiffe-timeout %s: must be positive", sf.spiffeTimeout), hint: "--spiffe-timeout 30s"}
	}
	return require("serve", [2]string{"listen", sf.listen})
}

// openSPIFFE connects to the Workload API at --spiffe-socket, waiting for
// the first SVID at most --spiffe-timeout, and returns it with the trust
// domain of its SVID, the only one whose callers are admitted. An --admin
// in another trust domain could never be admitted, so it is refused.
func openSPIFFE(ctx context.Context, sf *serveFlags, admins []string, log *slog.Logger) (*spiffesource.Source, string, error) {
	src, err := spiffesource.Open(ctx, spiffesource.Options{Address: sf.spiffeSocket, Timeout: sf.spiffeTimeout,
		Logger: log.With("spiffe_socket", sf.spiffeSocket)})
	if err != nil {
		return nil, "", fmt.Errorf("--spiffe-socket: %w", err)
	}
	id, err := src.ID()
	if err == nil {
		var td string
		if td, err = src.TrustDomain(); err == nil {
			for _, a := range admins {
				if server.TrustDomainOf(a) != td {
					src.Close()
					return nil, "", &usageError{msg: fmt.Sprintf("kvfence serve: --admin %q is not in trust domain %q of the Workload API's SVID %s: it could never be admitted", a, td, id),
						hint: "give administrators of trust domain " + td}
				}
			}
			log.Info("credentials from the Workload API", "spiffe_socket", sf.spiffeSocket, "svid", id, "trust_domain", td)
			return src, td, nil
		}
	}
	src.Close()
	return nil, "", fmt.Errorf("--spiffe-socket: %w", err)
}

// open opens the receiver for writing, with the observer when metrics are
// on. It checks the database against its anchor like every writer.
func (c *ServeCommand) open(cf *commonFlags, obs *metrics.Metrics, maxRecords int) (*kvfence.Receiver, error) {
	priv, err := loadPrivate(cf.key)
	if err != nil {
		return nil, err
	}
	pub, err := cf.loadPub()
	if err != nil {
		return nil, err
	}
	anchor, err := cf.anchorStore()
	if err != nil {
		return nil, err
	}
	opts := &kvfence.Options{LockTimeout: cf.lockTimeout, Key: priv, Anchor: anchor, MaxRecords: maxRecords}
	opts.WitnessFaults = cf.witness.faults
	if opts.Witnesses, opts.WitnessQuorum, err = cf.witness.load(cf.name); err != nil {
		return nil, err
	}
	if obs != nil {
		opts.Observer = obs
	}
	r, err := cf.openReceiver(opts)
	if err != nil {
		return nil, err
	}
	if err := checkPub(r, pub); err != nil {
		return nil, err
	}
	return r, nil
}

func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: serveReadHeaderTimeout, ReadTimeout: serveReadTimeout,
		WriteTimeout: serveWriteTimeout, IdleTimeout: serveIdleTimeout, MaxHeaderBytes: serveMaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
}

// listenCapped listens on addr behind a server.Listener with opts.
func listenCapped(network, addr string, opts server.ListenerOptions) (net.Listener, error) {
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	cl, err := server.NewListener(l, opts)
	if err != nil {
		l.Close()
		return nil, err
	}
	return cl, nil
}

// connectionCap returns --max-connections, checked against the descriptor
// limit, or the default that limit gives.
func connectionCap(fs *flag.FlagSet, n int) (int, error) {
	limit, err := server.DescriptorLimit()
	given := isSet(fs, "max-connections")
	switch {
	case err != nil && given && n >= 1:
		return n, nil // no limit to check it against on this system
	case err != nil:
		return 0, &usageError{msg: fmt.Sprintf("kvfence serve: %v; give --max-connections", err), hint: "kvfence serve -h"}
	case given:
		if err := server.CheckMaxConnections(n, limit); err != nil {
			return 0, &usageError{msg: fmt.Sprintf("kvfence serve: --max-connections: %v", err), hint: "kvfence serve -h", err: err}
		}
		return n, nil
	}
	d, err := server.DefaultMaxConnections(limit)
	if err != nil {
		return 0, &usageError{msg: fmt.Sprintf("kvfence serve: %v (ulimit -n)", err), hint: "kvfence serve -h", err: err}
	}
	return d, nil
}

// lookupGroup resolves a group name or a numeric gid.
func lookupGroup(g string) (uint32, error) {
	if n, err := strconv.ParseUint(g, 10, 32); err == nil {
		return uint32(n), nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(grp.Gid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("group %s has gid %q", g, grp.Gid)
	}
	return uint32(n), nil
}

// servers are the HTTP servers of one serve, started and stopped together.
type servers struct {
	log  *slog.Logger
	list []struct {
		name  string
		srv   *http.Server
		l     net.Listener
		serve func() error
	}
}

func (s *servers) add(name string, srv *http.Server, l net.Listener, serve func() error) {
	s.list = append(s.list, struct {
		name  string
		srv   *http.Server
		l     net.Listener
		serve func() error
	}{name, srv, l, serve})
}

// start serves every listener; the channel gets the first failure.
func (s *servers) start() <-chan error {
	errc := make(chan error, len(s.list))
	for _, e := range s.list {
		go func() {
			if err := e.serve(); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s listener: %w", e.name, err)
			}
		}()
	}
	return errc
}

// shutdown stops accepting on every listener at once and waits for the
// calls in flight to finish, up to serveDrainTimeout; then it closes what
// is left. A call cut off then gets no answer, never a decision it did
// not get: the receiver decides only what it committed.
func (s *servers) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), serveDrainTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var failed atomic.Bool
	for _, e := range s.list {
		wg.Go(func() {
			if err := e.srv.Shutdown(ctx); err != nil {
				failed.Store(true)
				s.log.Error("shutdown: calls still in flight; closing their connections", "listener", e.name, "error", err)
				e.srv.Close()
			}
		})
	}
	wg.Wait()
	if failed.Load() {
		return errors.New("serve: not every call in flight finished within the drain timeout")
	}
	return nil
}

// close closes listeners that were never served.
func (s *servers) close() {
	for _, e := range s.list {
		e.l.Close()
	}
}

// Usage prints the command's help.
func (c *ServeCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence serve --listen HOST:PORT (--tls-cert F --tls-key F --client-ca F |
                      --spiffe-socket unix:///PATH [--spiffe-timeout D])
                     --admin ID [--admin ID ...]
                     [--admin-socket PATH --admin-uid UID[,UID...]
                      [--admin-socket-group G]]
                     [--max-connections N] [--max-records N]
                     [--metrics-listen HOST:PORT [--metrics-per-scope]]
                     [--log-format text|json] [--log-level L] [--log-decisions]
                     [common arguments]

Runs the receiver as a service until SIGTERM or SIGINT. Workers submit
over HTTPS with TLS 1.3 and a client certificate issued by --client-ca;
the caller's identity is the certificate's one SPIFFE ID URI SAN (a
certificate without exactly one is refused with 401), never anything in
the request. Grants name executors by that identity.

Administrators (--admin, by SPIFFE ID; or, on the admin socket, the uids
in --admin-uid, as unix:uid:N) may create scopes and targets, activate,
hold, and read status, targets, receipts and events; each change records
the administrator as its actor. Anyone else gets 403.

Once listening, prints the addresses (with --json: {"listen",
"admin_socket","metrics_listen","receiver","audit_seq"}); logs go to
stderr. SIGHUP reloads --tls-cert, --tls-key and --client-ca (a reload
that fails keeps the previous ones); after it, a request on an open
connection whose client certificate no longer verifies against the client
CA, or has expired, is refused with 401 and its connection closed. SIGTERM
stops accepting, finishes the calls in flight (up to 30s), closes the
receiver and exits 0.

Connections are capped so that peers cannot take the descriptors the
receiver needs for its anchor and the admin socket: at most
--max-connections TLS connections (the rest wait in the kernel's backlog),
32 on the admin socket and 32 on the metrics listener; a TLS connection
that has not completed its handshake 5s after it was accepted is closed.

Every argument below, and every common one, may instead come from the
environment: KVFENCE_ and the flag's name in capitals, dashes as
underscores (--listen is KVFENCE_LISTEN, --admin-socket is
KVFENCE_ADMIN_SOCKET, --metrics-per-scope is KVFENCE_METRICS_PER_SCOPE;
KVFENCE_ADMIN takes IDs separated by commas). A flag on the command line
wins over its variable; an empty variable counts as unset; a value the
flag would refuse is a usage error naming the variable.

Arguments:

	--listen HOST:PORT
	    Where workers and administrators connect over TLS.
	--tls-cert F, --tls-key F
	    The server's certificate and key (PEM).
	--client-ca F
	    The CA certificates (PEM) that client certificates must chain to.
	--spiffe-socket unix:///PATH
	    Instead of --tls-cert, --tls-key and --client-ca: take the
	    server's X.509-SVID and the trust bundle of its trust domain from
	    this SPIFFE Workload API (a SPIRE agent). The agent's rotations
	    take effect from the next handshake, with no SIGHUP; when the
	    bundle drops a CA, a request on an open connection whose client
	    certificate no longer verifies is refused with 401 and its
	    connection closed, as after a reload. Only callers of the SVID's
	    trust domain are admitted (no federation), and every --admin must
	    be in it. Giving it with any of the three file flags is an error.
	--spiffe-timeout D
	    How long to wait at start for the first SVID (default 30s); an
	    agent that is not there, or has no SVID for this workload, then
	    makes serve fail rather than wait forever.
	--admin ID
	    A SPIFFE ID admitted to the administrative endpoints; repeat.
	--admin-socket PATH
	    Also serve on a unix socket (mode 0600) for local administration.
	    Its directory is created 0700 if missing; an existing one must be
	    a directory (not a symbolic link) owned by the service's user and
	    not writable by group or others.
	--admin-uid UID[,UID...]
	    The peer uids admitted on the admin socket (SO_PEERCRED). A
	    connection from any other uid is closed as it is accepted,
	    without an answer.
	--admin-socket-group G
	    A group (name or gid) that may reach the admin socket: socket 0660
	    and a new directory 0750, both of group G. Only the uids in
	    --admin-uid are admitted; the group only lets them connect.
	--max-connections N
	    The most TLS connections open at once (default: the descriptor
	    limit, RLIMIT_NOFILE, minus 256, at most 4096). A larger N, one
	    that leaves fewer than 256 descriptors, is refused.
	--max-records N
	    The most state records (control, grant, target and receipt
	    records together) the receiver keeps fingerprints of, to decide
	    only on records it verified or wrote (default 8388608: 1,000,000
	    scopes with a grant, a target and a receipt each, twice over;
	    about 50 bytes of memory per record). A store holding more is
	    refused at start, and a call that would create more is refused
	    with record_limit, having written nothing.
	--metrics-listen HOST:PORT
	    Serve Prometheus metrics at /metrics, plain HTTP, on this address,
	    and the probes /healthz (200 while serving) and /readyz (200 when
	    the receiver is open, its anchor was checked at open, its last
	    anchor write succeeded and none has been in progress for over
	    10s; 503 and a one-line reason otherwise).
	--metrics-per-scope
	    Add per-scope epoch and held gauges (one series per scope).
	--log-format text|json
	    Log lines as key=value text (default) or one JSON object each.
	--log-level debug|info|warn|error
	    The least severe level logged (default info).
	--log-decisions
	    Log one line per submit decision, at info: caller, scope, epoch,
	    grant, action, target, outcome, reason and audit seq; never the
	    request's bytes or a denial's detail. Without it, only
	    administrative changes (one line each: actor, scopes, epochs
	    before and after, reason, hold id, grant) and faults are logged.
`+usageKey+usageDB+usageJSON)
}
