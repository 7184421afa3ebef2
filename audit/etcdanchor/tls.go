package etcdanchor

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// maxPEMFile bounds what is read from a certificate, key or CA file.
const maxPEMFile = 1 << 20

// tlsConfig builds the client TLS configuration from o's files, or returns
// nil if o names none. A certificate without its key, or a key without its
// certificate, is refused, as is a key file that group or others may read:
// a client key that others can read lets them write the anchor.
func (o *Options) tlsConfig() (*tls.Config, error) {
	if o.CertFile == "" && o.KeyFile == "" && o.CAFile == "" {
		return nil, nil
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, fmt.Errorf("%w: a client certificate and its key go together: give both or neither", ErrBadTLS)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CertFile != "" {
		certPEM, err := readPEMFile(o.CertFile, false)
		if err != nil {
			return nil, err
		}
		keyPEM, err := readPEMFile(o.KeyFile, true)
		if err != nil {
			return nil, err
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%w: %s and %s: %v", ErrBadTLS, o.CertFile, o.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if o.CAFile != "" {
		caPEM, err := readPEMFile(o.CAFile, false)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrBadTLS, o.CAFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// readPEMFile reads a regular file of at most maxPEMFile bytes; a private
// key must not be readable by group or others.
func readPEMFile(path string, private bool) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTLS, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTLS, err)
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrBadTLS, path)
	case fi.Size() > maxPEMFile:
		return nil, fmt.Errorf("%w: %s is %d bytes, more than the %d-byte limit", ErrBadTLS, path, fi.Size(), maxPEMFile)
	case private && fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("%w: %s has mode %#o, want 0600 or stricter (chmod 600)", ErrBadTLS, path, fi.Mode().Perm())
	}
	data := make([]byte, fi.Size())
	if _, err := f.ReadAt(data, 0); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadTLS, path, err)
	}
	return data, nil
}

// TLSConfig returns the client TLS configuration that o's files describe,
// or nil if o names none, with the same checks as Open: for another client
// of etcd that takes the same files.
func (o *Options) TLSConfig() (*tls.Config, error) { return o.tlsConfig() }
