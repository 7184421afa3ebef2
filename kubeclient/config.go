package kubeclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// MaxFileSize bounds every file this package reads: a kubeconfig, a token
// file, a certificate authority, a client certificate or key.
const MaxFileSize = 4 << 20

// TokenFileRefresh is how old a token file's last reading may be before
// a request reads it again.
const TokenFileRefresh = time.Minute

// CertFileRefresh is how old the last reading of client certificate files
// may be before a request reads them again.
const CertFileRefresh = 5 * time.Minute

// ErrInvalidConfig means a Config or a kubeconfig file is malformed or
// incomplete: the error says which field.
var ErrInvalidConfig = errors.New("kubeclient: invalid configuration")

// ErrUnsupported means a kubeconfig asks for something this package does
// not do (the package doc lists them); the error names it.
var ErrUnsupported = errors.New("kubeclient: unsupported")

// ErrNotInCluster means InCluster ran outside a pod: the environment does
// not name the API server.
var ErrNotInCluster = errors.New("kubeclient: not running in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT unset)")

// ErrCredential means a credential could not be had: a token file that is
// empty or unreadable, or an exec plugin that failed or answered
// something malformed.
var ErrCredential = errors.New("kubeclient: no credential")

// Config is how to reach an API server, and as whom.
type Config struct {
	// Host is the API server's URL: https, a host and an optional port,
	// and optionally a path that every request's path is put under (a
	// server behind a proxy that routes by path). Required.
	Host string
	// TLSServerName is the name the server's certificate must carry when
	// it is not Host's host.
	TLSServerName string
	// CAData is PEM of the certificate authorities that the server's
	// certificate must chain to; empty means the system's roots.
	CAData []byte
	// CertData and KeyData are the client certificate and its key (PEM),
	// both or neither.
	CertData, KeyData []byte
	// CertFile and KeyFile are files holding the client certificate and
	// its key (PEM), both or neither, and not with CertData: read again
	// when their last reading is CertFileRefresh old, and when they have
	// changed the client's connections are closed, so that the next
	// request presents the new certificate.
	CertFile, KeyFile string
	// BearerToken is sent as "Authorization: Bearer".
	BearerToken string
	// BearerTokenFile is a file holding the bearer token, read again when
	// its last reading is TokenFileRefresh old.
	BearerTokenFile string
	// Exec is a credential plugin that gives a token, a client
	// certificate, or both.
	Exec *ExecConfig
	// ProxyURL is the proxy to reach the server through; empty means the
	// environment's (HTTPS_PROXY and NO_PROXY).
	ProxyURL string
	// DisableCompression asks the server not to compress responses.
	DisableCompression bool
	// UserAgent is sent as User-Agent, if not empty.
	UserAgent string
	// WrapTransport, if not nil, wraps the transport that carries the
	// requests beneath the credentials (it sees them set), for tests and
	// instrumentation.
	WrapTransport func(http.RoundTripper) http.RoundTripper

	// now is the clock of expiry and refresh; nil is time.Now.
	now func() time.Time
}

// BaseURL returns Host parsed and checked: https, a host, no user
// information, query or fragment.
func (c *Config) BaseURL() (*url.URL, error) {
	if c.Host == "" {
		return nil, fmt.Errorf("%w: no server", ErrInvalidConfig)
	}
	u, err := url.Parse(c.Host)
	if err != nil {
		return nil, fmt.Errorf("%w: server %q: %v", ErrInvalidConfig, c.Host, err)
	}
	switch {
	case u.Scheme != "https":
		return nil, fmt.Errorf("%w: server %q: the scheme must be https (credentials never travel in clear)", ErrInvalidConfig, c.Host)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("%w: server %q names no host", ErrInvalidConfig, c.Host)
	case u.User != nil:
		return nil, fmt.Errorf("%w: server %q carries user information", ErrInvalidConfig, c.Host)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, fmt.Errorf("%w: server %q carries a query or a fragment", ErrInvalidConfig, c.Host)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// HTTPClient returns a client that sends every request over TLS to the
// server's certificate, with the credentials of c. The client follows no
// redirects (it returns the redirect), since a redirect would carry the
// credentials elsewhere. Requests must be to c's server; the client does
// not check their host.
func (c *Config) HTTPClient() (*http.Client, error) {
	if _, err := c.BaseURL(); err != nil {
		return nil, err
	}
	creds, err := c.credentials()
	if err != nil {
		return nil, err
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLSServerName}
	if len(c.CAData) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.CAData) {
			return nil, fmt.Errorf("%w: the certificate authority data holds no PEM certificate", ErrInvalidConfig)
		}
		tlsConf.RootCAs = pool
	}
	if creds.hasCert() {
		tlsConf.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return creds.certificate(cri.Context())
		}
	}
	proxy := http.ProxyFromEnvironment
	if c.ProxyURL != "" {
		p, err := url.Parse(c.ProxyURL)
		if err != nil || p.Host == "" || (p.Scheme != "http" && p.Scheme != "https" && p.Scheme != "socks5") {
			return nil, fmt.Errorf("%w: proxy-url %q is not an http, https or socks5 URL", ErrInvalidConfig, c.ProxyURL)
		}
		proxy = http.ProxyURL(p)
	}
	conns := &connTracker{conns: map[*trackedConn]struct{}{}}
	if creds.exec != nil {
		creds.exec.rotated = conns.closeAll
	}
	creds.rotated = conns.closeAll
	var rt http.RoundTripper = &http.Transport{
		Proxy:               proxy,
		DialContext:         conns.dial((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext),
		TLSClientConfig:     tlsConf,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  c.DisableCompression,
	}
	if c.WrapTransport != nil {
		rt = c.WrapTransport(rt)
	}
	rt = &authTransport{next: rt, creds: creds, userAgent: c.UserAgent}
	return &http.Client{
		Transport: rt,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}, nil
}

// credentials checks that c names its credentials once and returns them.
func (c *Config) credentials() (*credentials, error) {
	now := c.now
	if now == nil {
		now = time.Now
	}
	cr := &credentials{token: c.BearerToken, tokenFile: c.BearerTokenFile, now: now}
	tokens := 0
	for _, set := range []bool{c.BearerToken != "", c.BearerTokenFile != "", c.Exec != nil} {
		if set {
			tokens++
		}
	}
	if tokens > 1 {
		return nil, fmt.Errorf("%w: more than one of a token, a token file and an exec plugin", ErrInvalidConfig)
	}
	if strings.ContainsAny(c.BearerToken, "\r\n") {
		return nil, fmt.Errorf("%w: the token holds a line break", ErrInvalidConfig)
	}
	if (len(c.CertData) > 0) != (len(c.KeyData) > 0) || (c.CertFile != "") != (c.KeyFile != "") {
		return nil, fmt.Errorf("%w: a client certificate needs its key, and a key its certificate", ErrInvalidConfig)
	}
	if c.CertFile != "" {
		if len(c.CertData) > 0 || c.Exec != nil {
			return nil, fmt.Errorf("%w: client certificate files with another client certificate or an exec plugin", ErrInvalidConfig)
		}
		cr.certFile, cr.keyFile = c.CertFile, c.KeyFile
		// Read now, so that bad files are refused when the client is made.
		if err := cr.refreshCertFiles(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
	}
	if len(c.CertData) > 0 {
		if c.Exec != nil {
			return nil, fmt.Errorf("%w: both a client certificate and an exec plugin", ErrInvalidConfig)
		}
		cert, err := tls.X509KeyPair(c.CertData, c.KeyData)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate: %v", ErrInvalidConfig, err)
		}
		cr.cert = &cert
	}
	if c.Exec != nil {
		p, err := newExecPlugin(c.Exec, c)
		if err != nil {
			return nil, err
		}
		cr.exec = p
	}
	return cr, nil
}

// credentials are a Config's, shared by its client's requests.
type credentials struct {
	token     string
	cert      *tls.Certificate
	exec      *execPlugin
	tokenFile string
	now       func() time.Time

	mu       sync.Mutex
	fileRead time.Time
	fileTok  string

	// certFile and keyFile, if set, are read again every CertFileRefresh
	// into cert (under mu), with their bytes as last read; rotated is
	// called when they changed.
	certFile, keyFile string
	certRead          time.Time
	certPEM, keyPEM   []byte
	rotated           func()
}

func (c *credentials) hasCert() bool { return c.cert != nil || c.exec != nil || c.certFile != "" }

// refreshCertFiles reads the client certificate files again if their last
// reading is CertFileRefresh old; a certificate that changed replaces the
// old one and the client's connections are closed. A failed reading is an
// error, not the old certificate.
func (c *credentials) refreshCertFiles() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert != nil && c.now().Sub(c.certRead) < CertFileRefresh {
		return nil
	}
	certPEM, err := readFile(c.certFile)
	if err != nil {
		return fmt.Errorf("%w: client certificate file: %v", ErrCredential, err)
	}
	keyPEM, err := readFile(c.keyFile)
	if err != nil {
		return fmt.Errorf("%w: client key file: %v", ErrCredential, err)
	}
	c.certRead = c.now()
	if c.cert != nil && bytes.Equal(certPEM, c.certPEM) && bytes.Equal(keyPEM, c.keyPEM) {
		return nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("%w: client certificate files %s and %s: %v", ErrCredential, c.certFile, c.keyFile, err)
	}
	changed := c.cert != nil
	c.cert, c.certPEM, c.keyPEM = &cert, certPEM, keyPEM
	if changed && c.rotated != nil {
		c.rotated()
	}
	return nil
}

// certificate returns the client certificate to present: the static one,
// the plugin's, or none (an empty one, which TLS sends as no certificate).
func (c *credentials) certificate(ctx context.Context) (*tls.Certificate, error) {
	if c.certFile != "" {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.cert, nil
	}
	if c.cert != nil {
		return c.cert, nil
	}
	cred, err := c.exec.get(ctx)
	if err != nil {
		return nil, err
	}
	if cred.cert == nil {
		return &tls.Certificate{}, nil
	}
	return cred.cert, nil
}

// bearer returns the token to send, if any, and the plugin credential it
// came from (nil if none), which a 401 invalidates.
func (c *credentials) bearer(ctx context.Context) (string, *execCredential, error) {
	switch {
	case c.token != "":
		return c.token, nil, nil
	case c.tokenFile != "":
		tok, err := c.readTokenFile()
		return tok, nil, err
	case c.exec != nil:
		cred, err := c.exec.get(ctx)
		if err != nil {
			return "", nil, err
		}
		return cred.token, cred, nil
	}
	return "", nil, nil
}

func (c *credentials) readTokenFile() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fileTok != "" && c.now().Sub(c.fileRead) < TokenFileRefresh {
		return c.fileTok, nil
	}
	b, err := readFile(c.tokenFile)
	if err != nil {
		return "", fmt.Errorf("%w: token file: %v", ErrCredential, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, "\r\n") {
		return "", fmt.Errorf("%w: token file %s holds no single-line token", ErrCredential, c.tokenFile)
	}
	c.fileTok, c.fileRead = tok, c.now()
	return tok, nil
}

// authTransport sets the credentials' token and the user agent on every
// request, and invalidates a plugin's credential the server refused.
type authTransport struct {
	next      http.RoundTripper
	creds     *credentials
	userAgent string
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, cred, err := t.creds.bearer(req.Context())
	if err == nil && t.creds.certFile != "" {
		// Before the request, so that a new certificate's connection
		// closing does not cut this one.
		err = t.creds.refreshCertFiles()
	}
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	r := req.Clone(req.Context())
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	if t.userAgent != "" {
		r.Header.Set("User-Agent", t.userAgent)
	}
	resp, err := t.next.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusUnauthorized && t.creds.exec != nil {
		// The next request runs the plugin again (the credential may
		// have been revoked before its expiry); this one's answer
		// stands, since it is not retried.
		t.creds.exec.invalidate(cred)
	}
	return resp, err
}

// connTracker keeps the connections a client dialled, so that they can
// be closed when its client certificate changes.
type connTracker struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

// dial returns dial, keeping the connections it makes.
func (t *connTracker) dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, t: t}
		t.mu.Lock()
		t.conns[tc] = struct{}{}
		t.mu.Unlock()
		return tc, nil
	}
}

// closeAll closes every connection still open; a request in flight on
// one fails.
func (t *connTracker) closeAll() {
	t.mu.Lock()
	conns := make([]*trackedConn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// trackedConn is a connection that leaves its tracker when closed.
type trackedConn struct {
	net.Conn
	t *connTracker
}

func (c *trackedConn) Close() error {
	c.t.mu.Lock()
	delete(c.t.conns, c)
	c.t.mu.Unlock()
	return c.Conn.Close()
}

// readFile reads at most MaxFileSize bytes of path; a larger file is an
// error.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	n, err := io.Copy(&b, io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if n > MaxFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, MaxFileSize)
	}
	return b.Bytes(), nil
}
