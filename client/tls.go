package client

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// Errors of LoadTLS.
var (
	// ErrNoCA means LoadTLS was given no CA file: the receiver's
	// certificate would then go unverified, which the client never does.
	ErrNoCA = errors.New("client: a CA file is required to verify the receiver's certificate")
	// ErrNoCertificate means LoadTLS was given no client certificate or
	// key file, without which the receiver admits no call.
	ErrNoCertificate = errors.New("client: a client certificate and key file are required")
	// ErrTLSFile means a certificate, key or CA file could not be parsed.
	ErrTLSFile = errors.New("client: unparsable TLS file")
)

// LoadTLS returns the TLS configuration of a worker or operator that
// talks to a receiver over mTLS: the client certificate and key from
// certFile and keyFile (PEM), the receiver's certificate verified against
// the CA certificates in caFile (PEM, every block a certificate), and TLS
// 1.3 at least. A missing file is an error that names it and wraps the
// os error (fs.ErrNotExist); a file that does not parse wraps ErrTLSFile.
// Nothing is ever left unverified: no CA file is ErrNoCA.
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, ErrNoCA
	}
	if certFile == "" || keyFile == "" {
		return nil, ErrNoCertificate
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("client: certificate file: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("client: key file: %w", err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("client: CA file: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate %s and key %s: %v", ErrTLSFile, certFile, keyFile, err)
	}
	pool, err := caPool(caPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: CA file %s: %v", ErrTLSFile, caFile, err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, Certificates: []tls.Certificate{cert}}, nil
}

// caPool parses every PEM block of b as a certificate. Unlike
// x509.CertPool.AppendCertsFromPEM it refuses a block it cannot use
// rather than skipping it, so that a damaged CA bundle is not silently
// trusted for less than the operator meant.
func caPool(b []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	// pem.Decode skips a block it cannot decode (a damaged END line, a
	// truncated body) as if it were text between blocks: every BEGIN line
	// must have given a block.
	begins := bytes.Count(b, []byte("-----BEGIN "))
	n := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is %q, not a CERTIFICATE", n+1, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %v", n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("no PEM certificate in it")
	}
	if n != begins {
		return nil, fmt.Errorf("%d PEM blocks begin but only %d decode: a block is damaged", begins, n)
	}
	return pool, nil
}
