// Package pki makes the certificates for trying a served receiver and for
// its tests: a CA, server certificates for DNS names and IP addresses, and
// client certificates whose one URI SAN is a SPIFFE ID. Keys are ECDSA
// P-256, which every TLS stack accepts.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
)

// Pair is a certificate with its private key.
type Pair struct {
	// Cert is the issued certificate.
	Cert *x509.Certificate
	// Key is the certificate's private key.
	Key crypto.Signer
}

// CertPEM returns the certificate in PEM.
func (p Pair) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.Cert.Raw})
}

// KeyPEM returns the private key in PKCS #8 PEM.
func (p Pair) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(p.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// TLS returns the pair as a tls.Certificate.
func (p Pair) TLS() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{p.Cert.Raw}, PrivateKey: p.Key, Leaf: p.Cert}
}

// Pool returns a pool that trusts p's certificate.
func (p Pair) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.Cert)
	return pool
}

// Options describes a certificate to issue.
type Options struct {
	// Name is the subject's common name, for people reading it.
	Name string
	// DNS are the DNS names a server certificate is valid for.
	DNS []string
	// IPs are the IP addresses a server certificate is valid for.
	IPs []net.IP
	// URIs are the URI SANs: a client certificate has exactly one, its
	// SPIFFE ID.
	URIs []string
	// Server and Client select the extended key usages.
	Server, Client bool
	// Validity is the lifetime from now; zero means 24 hours.
	Validity time.Duration
}

// NewCA returns a self-signed CA named name.
func NewCA(name string, validity time.Duration) (Pair, error) {
	return issue(nil, Options{Name: name, Validity: validity}, true)
}

// Issue returns a certificate signed by ca.
func Issue(ca Pair, opts Options) (Pair, error) {
	if ca.Cert == nil || ca.Key == nil {
		return Pair{}, errors.New("pki: no CA")
	}
	return issue(&ca, opts, false)
}

func issue(ca *Pair, o Options, isCA bool) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return Pair{}, err
	}
	if o.Validity <= 0 {
		o.Validity = 24 * time.Hour
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: o.Name},
		// An hour of slack for clocks that disagree a little.
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(o.Validity),
		BasicConstraintsValid: true,
		DNSNames:              o.DNS,
		IPAddresses:           o.IPs,
	}
	for _, s := range o.URIs {
		u, err := url.Parse(s)
		if err != nil {
			return Pair{}, fmt.Errorf("pki: URI SAN %q: %w", s, err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	if isCA {
		tmpl.IsCA = true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
		tmpl.MaxPathLenZero = true
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		if o.Server {
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		}
		if o.Client {
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		}
	}
	parent, signer := tmpl, crypto.Signer(key)
	if ca != nil {
		parent, signer = ca.Cert, ca.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return Pair{}, err
	}
	return Pair{Cert: cert, Key: key}, nil
}

// Load reads a certificate and its PKCS #8 private key from PEM.
func Load(certPEM, keyPEM []byte) (Pair, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return Pair{}, errors.New("pki: no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: %w", err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return Pair{}, errors.New("pki: no PEM PKCS #8 private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: %w", err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return Pair{}, errors.New("pki: the key cannot sign")
	}
	return Pair{Cert: cert, Key: signer}, nil
}
