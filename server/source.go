package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNoCredentials means a CredentialSource has no certificate or client
// CA to give: a handshake that needs them is refused, never served with
// none.
var ErrNoCredentials = errors.New("server: the credential source has no certificate or client CA")

// CredentialSource supplies a server's certificate and client CA from
// somewhere other than files, such as a SPIFFE Workload API (package
// spiffesource), which rotates them on its own schedule.
type CredentialSource interface {
	// Credentials returns the current certificate with its private key,
	// the CA certificates that client certificates must chain to, and a
	// generation that grows whenever either changes. The caller does not
	// modify what it returns.
	Credentials() (*tls.Certificate, []*x509.Certificate, uint64, error)
}

// SourceCredentials are Credentials whose certificate and client CA come
// from a CredentialSource and change when it rotates them, with no reload:
// every handshake asks the source, so a new certificate or client CA is
// used from the next handshake on. They are ClientRoots: a
// SPIFFECertificate with them refuses, once the client CA has changed,
// requests on connections whose client certificate it no longer issues,
// exactly as after a reload of file Credentials. A rotation of the
// server's certificate alone leaves the roots' generation as it was, so
// open connections are not checked again for it.
//
// When the source fails (its agent went away, it was closed), handshakes
// are refused with its error, and open connections are held to the last
// client CA it gave.
type SourceCredentials struct {
	src CredentialSource
	mu  sync.Mutex // serialises building a new generation
	cur atomic.Pointer[sourceGen]
}

// sourceGen is one generation of SourceCredentials.
type sourceGen struct {
	srcGen   uint64 // the source's generation it was built from
	cert     *tls.Certificate
	roots    *Roots
	rootsGen uint64 // changes only when the roots do
}

// NewSourceCredentials returns the credentials of src, which must have a
// certificate and a client CA now.
func NewSourceCredentials(src CredentialSource) (*SourceCredentials, error) {
	c := &SourceCredentials{src: src}
	if _, err := c.current(); err != nil {
		return nil, err
	}
	return c, nil
}

// current returns the generation matching the source's current
// credentials, building it if the source moved on.
func (c *SourceCredentials) current() (*sourceGen, error) {
	cert, cas, gen, err := c.src.Credentials()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoCredentials, err)
	}
	if cert == nil || len(cert.Certificate) == 0 || len(cas) == 0 {
		return nil, fmt.Errorf("%w: it gave %d certificates and %d CA certificates", ErrNoCredentials,
			certCount(cert), len(cas))
	}
	if g := c.cur.Load(); g != nil && g.srcGen >= gen {
		// A caller that read an older generation than one already built
		// gets the newer one: generations never go back.
		return g, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.cur.Load()
	if old != nil && old.srcGen >= gen {
		return old, nil
	}
	next := &sourceGen{srcGen: gen, cert: cert, roots: NewRoots(cas)}
	if old != nil {
		next.rootsGen = old.rootsGen
		if !maps.Equal(old.roots.raw, next.roots.raw) {
			next.rootsGen++
		} else {
			next.roots = old.roots
		}
	}
	c.cur.Store(next)
	return next, nil
}

func certCount(c *tls.Certificate) int {
	if c == nil {
		return 0
	}
	return len(c.Certificate)
}

// ClientRoots returns the current client CA and its generation, or, when
// the source fails, the last client CA it gave.
func (c *SourceCredentials) ClientRoots() (*Roots, uint64) {
	g, err := c.current()
	if err != nil {
		g = c.cur.Load()
	}
	return g.roots, g.rootsGen
}

// TLSConfig returns the server's TLS configuration: TLS 1.3 at least, and
// a client certificate required and verified against the client CA. Every
// handshake asks the source for its current certificate and client CA; a
// handshake while the source has none is refused.
func (c *SourceCredentials) TLSConfig() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAndVerifyClientCert,
		NextProtos: []string{"h2", "http/1.1"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		g, err := c.current()
		if err != nil {
			return nil, err
		}
		cfg := base.Clone()
		cfg.GetConfigForClient = nil
		cfg.Certificates = []tls.Certificate{*g.cert}
		cfg.ClientCAs = g.roots.pool
		return cfg, nil
	}
	return base
}

// NotAfter returns the expiry of the certificate the source gave last; the
// zero time when it gave none that parses. A rotated SVID moves it.
func (c *SourceCredentials) NotAfter() time.Time {
	g, err := c.current()
	if err != nil {
		g = c.cur.Load()
	}
	if g == nil || g.cert == nil {
		return time.Time{}
	}
	leaf := g.cert.Leaf
	if leaf == nil {
		var perr error
		if leaf, perr = x509.ParseCertificate(g.cert.Certificate[0]); perr != nil {
			return time.Time{}
		}
	}
	return leaf.NotAfter
}
