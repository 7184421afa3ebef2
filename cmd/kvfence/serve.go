package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/metrics"
	"github.com/kvfence/kvfence/server"
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

// Run runs the command until its context is done (SIGTERM or SIGINT).
func (c *ServeCommand) Run(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("serve")
	cf := commonFlags{name: "serve"}
	cf.register(fs, withDB|withKey)
	listen := fs.String("listen", "", "")
	tlsCert := fs.String("tls-cert", "", "")
	tlsKey := fs.String("tls-key", "", "")
	clientCA := fs.String("client-ca", "", "")
	var admins stringList
	fs.Var(&admins, "admin", "")
	adminSocket := fs.String("admin-socket", "", "")
	var adminUIDs uidList
	fs.Var(&adminUIDs, "admin-uid", "")
	metricsListen := fs.String("metrics-listen", "", "")
	perScope := fs.Bool("metrics-per-scope", false, "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := cf.requireWriter(); err != nil {
		return err
	}
	if err := require("serve", [2]string{"listen", *listen}, [2]string{"tls-cert", *tlsCert},
		[2]string{"tls-key", *tlsKey}, [2]string{"client-ca", *clientCA}); err != nil {
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
		if !strings.HasPrefix(a, "spiffe://") {
			return &usageError{msg: fmt.Sprintf("kvfence serve: --admin %q is not a SPIFFE ID", a), hint: "--admin spiffe://example.org/ops/alice"}
		}
	}
	log := slog.New(slog.NewTextHandler(c.m.Stderr, nil))

	certs := &certStore{certFile: *tlsCert, keyFile: *tlsKey, caFile: *clientCA}
	if err := certs.load(); err != nil {
		return err
	}
	var obs *metrics.Metrics
	if *metricsListen != "" {
		obs = metrics.New(metrics.Options{PerScope: *perScope})
	}
	r, err := c.open(&cf, obs)
	if err != nil {
		return err
	}
	defer closeReceiver(r, &err)

	tlsHandler, err := server.New(server.Options{Receiver: r, Authenticator: server.SPIFFECertificate{}, Admins: admins,
		Logger: log.With("listener", "tls")})
	if err != nil {
		return err
	}
	srvs := &servers{log: log}
	tlsSrv := newHTTPServer(tlsHandler, log)
	tlsSrv.TLSConfig = certs.config()
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srvs.add("tls", tlsSrv, l, func() error { return tlsSrv.ServeTLS(l, "", "") })
	out := serveJSON{Listen: l.Addr().String(), Receiver: r.ID(), AuditSeq: r.Head().Seq}

	if *adminSocket != "" {
		ids := make([]string, len(adminUIDs))
		for i, u := range adminUIDs {
			ids[i] = server.UnixIdentity(u)
		}
		h, err := server.New(server.Options{Receiver: r, Authenticator: server.UnixPeer{UIDs: adminUIDs}, Admins: ids,
			Logger: log.With("listener", "admin-socket")})
		if err != nil {
			srvs.close()
			return err
		}
		sl, err := listenAdminSocket(*adminSocket)
		if err != nil {
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
		ml, err := net.Listen("tcp", *metricsListen)
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
			if err := certs.load(); err != nil {
				log.Error("reloading certificates failed; still serving the previous ones", "error", err)
			} else {
				log.Info("reloaded certificates and client CA")
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

// open opens the receiver for writing, with the observer when metrics are
// on. It checks the database against its anchor like every writer.
func (c *ServeCommand) open(cf *commonFlags, obs *metrics.Metrics) (*kvfence.Receiver, error) {
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
	opts := &kvfence.Options{LockTimeout: cf.lockTimeout, Key: priv, Anchor: anchor}
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

// listenAdminSocket listens on a unix socket at path with mode 0600. A
// socket file left by a previous run is removed: this process holds the
// database's exclusive lock, so no other serve of this receiver is using
// it. Any other file at path is refused.
func listenAdminSocket(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("--admin-socket %s exists and is not a socket; refusing to replace it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// Between Listen and Chmod the socket has the umask's mode; a peer
	// that connects then is still admitted only by its uid.
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
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

// certStore holds the server certificate and the client CA, read from
// their files and replaced atomically on reload, so that a handshake uses
// either the old set or the new one, never a mix.
type certStore struct {
	certFile, keyFile, caFile string
	cur                       atomic.Pointer[tlsMaterial]
}

type tlsMaterial struct {
	cert tls.Certificate
	pool *x509.CertPool
}

// load reads the files and, if all of them are usable, makes them current.
func (s *certStore) load() error {
	cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	pem, err := os.ReadFile(s.caFile)
	if err != nil {
		return fmt.Errorf("--client-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("--client-ca %s: no PEM certificate in it", s.caFile)
	}
	s.cur.Store(&tlsMaterial{cert: cert, pool: pool})
	return nil
}

// config returns the server's TLS configuration: TLS 1.3 at least, and a
// client certificate required and verified against the current client CA.
// Every handshake asks for the current material, so a reload takes effect
// from the next connection on.
func (s *certStore) config() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAndVerifyClientCert,
		NextProtos: []string{"h2", "http/1.1"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		m := s.cur.Load()
		cfg := base.Clone()
		cfg.GetConfigForClient = nil
		cfg.Certificates = []tls.Certificate{m.cert}
		cfg.ClientCAs = m.pool
		return cfg, nil
	}
	return base
}

// Usage prints the command's help.
func (c *ServeCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence serve --listen HOST:PORT --tls-cert F --tls-key F --client-ca F
                     --admin ID [--admin ID ...]
                     [--admin-socket PATH --admin-uid UID[,UID...]]
                     [--metrics-listen HOST:PORT [--metrics-per-scope]]
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
that fails keeps the previous ones). SIGTERM stops accepting, finishes the
calls in flight (up to 30s), closes the receiver and exits 0.

Arguments:

	--listen HOST:PORT
	    Where workers and administrators connect over TLS.
	--tls-cert F, --tls-key F
	    The server's certificate and key (PEM).
	--client-ca F
	    The CA certificates (PEM) that client certificates must chain to.
	--admin ID
	    A SPIFFE ID admitted to the administrative endpoints; repeat.
	--admin-socket PATH
	    Also serve on a unix socket (mode 0600) for local administration.
	--admin-uid UID[,UID...]
	    The peer uids admitted on the admin socket (SO_PEERCRED).
	--metrics-listen HOST:PORT
	    Serve Prometheus metrics at /metrics, plain HTTP, on this address.
	--metrics-per-scope
	    Add per-scope epoch and held gauges (one series per scope).
`+usageKey+usageDB+usageJSON)
}
