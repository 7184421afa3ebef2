package server

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// ClientRoots is the source of the CA certificates that client certificates
// must chain to, for SPIFFECertificate to check connections made before
// the roots last changed.
type ClientRoots interface {
	// ClientRoots returns the current roots and a generation that changes
	// whenever they do.
	ClientRoots() (*Roots, uint64)
}

// Roots is one set of client CA certificates.
type Roots struct {
	pool *x509.CertPool
	raw  map[[32]byte]struct{} // SHA-256 of each certificate's DER
}

// NewRoots returns the roots in certs.
func NewRoots(certs []*x509.Certificate) *Roots {
	r := &Roots{pool: x509.NewCertPool(), raw: map[[32]byte]struct{}{}}
	for _, c := range certs {
		r.pool.AddCert(c)
		r.raw[sha256.Sum256(c.Raw)] = struct{}{}
	}
	return r
}

// Pool returns the roots as a pool, for tls.Config.ClientCAs.
func (r *Roots) Pool() *x509.CertPool { return r.pool }

// has reports whether c is one of the roots, byte for byte.
func (r *Roots) has(c *x509.Certificate) bool {
	_, ok := r.raw[sha256.Sum256(c.Raw)]
	return ok
}

// Credentials are a TLS server's certificate and key and the CA that client
// certificates must chain to, read from PEM files and replaced together by
// Reload, so that a handshake uses either the old set or the new one,
// never a mix. They are ClientRoots: a SPIFFECertificate with them refuses,
// after a reload, requests on connections whose client certificate the new
// CA did not issue.
type Credentials struct {
	certFile, keyFile, caFile string
	cur                       atomic.Pointer[credentials]
}

// credentials is one generation of Credentials.
type credentials struct {
	cert     tls.Certificate
	notAfter time.Time
	roots    *Roots
	gen      uint64
}

// LoadCredentials reads the server's certificate and key and the client CA
// from their files.
func LoadCredentials(certFile, keyFile, caFile string) (*Credentials, error) {
	c := &Credentials{certFile: certFile, keyFile: keyFile, caFile: caFile}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the files again and, if all of them are usable, makes them
// current: from then on, handshakes use them, and requests on connections
// whose client certificate no longer verifies are refused. A reload that
// fails changes nothing.
func (c *Credentials) Reload() error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("server certificate %s, key %s: %w", c.certFile, c.keyFile, err)
	}
	b, err := os.ReadFile(c.caFile)
	if err != nil {
		return fmt.Errorf("client CA: %w", err)
	}
	var cas []*x509.Certificate
	for len(b) > 0 {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" || len(blk.Headers) != 0 {
			continue
		}
		ca, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return fmt.Errorf("client CA %s: %w", c.caFile, err)
		}
		cas = append(cas, ca)
	}
	if len(cas) == 0 {
		return fmt.Errorf("client CA %s: no PEM certificate in it", c.caFile)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("server certificate %s: %w", c.certFile, err)
		}
	}
	next := &credentials{cert: cert, notAfter: leaf.NotAfter, roots: NewRoots(cas)}
	for {
		old := c.cur.Load()
		if old != nil {
			next.gen = old.gen + 1
		}
		if c.cur.CompareAndSwap(old, next) {
			return nil
		}
	}
}

// ClientRoots returns the current client CA and its generation.
func (c *Credentials) ClientRoots() (*Roots, uint64) {
	m := c.cur.Load()
	return m.roots, m.gen
}

// NotAfter returns the expiry of the server certificate that handshakes
// present now: after a Reload, the new one's. It is read for the
// certificate expiry metric.
func (c *Credentials) NotAfter() time.Time {
	return c.cur.Load().notAfter
}

// TLSConfig returns the server's TLS configuration: TLS 1.3 at least, and
// a client certificate required and verified against the client CA. Every
// handshake asks for the current credentials, so a reload takes effect
// from the next handshake on.
func (c *Credentials) TLSConfig() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAndVerifyClientCert,
		NextProtos: []string{"h2", "http/1.1"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		m := c.cur.Load()
		cfg := base.Clone()
		cfg.GetConfigForClient = nil
		cfg.Certificates = []tls.Certificate{m.cert}
		cfg.ClientCAs = m.roots.pool
		return cfg, nil
	}
	return base
}
