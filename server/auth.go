package server

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Authenticator computes the caller's identity from the channel a request
// came over, never from the request itself: its headers, query and body
// are the caller's to choose. The handler calls it once per request, at the
// edge, and passes the identity down as a value. An embedding service may
// plug in its own, for example one that checks certificates against a
// SPIFFE Workload API trust bundle.
//
// Authenticate returns an error wrapping ErrUnauthenticated (answered 401)
// or ErrForbidden (403) when the channel carries no admitted identity; any
// other error is a fault (500). Nothing is decided or recorded for a
// request that fails here.
type Authenticator interface {
	Authenticate(r *http.Request) (string, error)
}

// SPIFFECertificate authenticates a caller by the verified client
// certificate of its TLS connection: the identity is the certificate's
// SPIFFE ID, its one URI SAN "spiffe://trust-domain/path". A certificate
// with no URI SAN, with more than one, or whose URI is not a valid SPIFFE
// ID, is refused, as is a connection without a certificate that the TLS
// layer verified (the server must use tls.RequireAndVerifyClientCert, or
// VerifyClientCertIfGiven, against the trust bundle).
type SPIFFECertificate struct{}

// Authenticate returns the SPIFFE ID of the request's verified client
// certificate.
func (SPIFFECertificate) Authenticate(r *http.Request) (string, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return "", fmt.Errorf("%w: no client certificate", ErrUnauthenticated)
	}
	// PeerCertificates is what the client sent; only VerifiedChains says
	// that the TLS layer checked it against the trust bundle.
	if len(r.TLS.VerifiedChains) == 0 {
		return "", fmt.Errorf("%w: the client certificate was not verified", ErrUnauthenticated)
	}
	leaf := r.TLS.PeerCertificates[0]
	if len(leaf.URIs) != 1 {
		return "", fmt.Errorf("%w: the client certificate has %d URI SANs, want exactly one SPIFFE ID",
			ErrUnauthenticated, len(leaf.URIs))
	}
	id, err := ParseSPIFFEID(leaf.URIs[0])
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	return id, nil
}

// maxSPIFFEIDLen is the SPIFFE specification's limit on an ID's length.
const maxSPIFFEIDLen = 2048

// ParseSPIFFEID checks that u is a SPIFFE ID as the SPIFFE-ID
// specification defines it, and returns it as a string: scheme "spiffe", a
// trust domain of lower-case letters, digits, ".", "-" and "_" with no
// port or user info, and a path of non-empty segments of letters, digits,
// ".", "-" and "_" other than "." and "..", with no trailing slash, query
// or fragment and no percent-encoding, at most 2048 bytes in all. The
// check is strict because the string becomes an executor name that grants
// compare byte for byte: two spellings of one ID would be two identities.
func ParseSPIFFEID(u *url.URL) (string, error) {
	switch {
	case u == nil:
		return "", fmt.Errorf("no URI")
	case u.Scheme != "spiffe":
		return "", fmt.Errorf("URI SAN %q is not a SPIFFE ID (scheme %q)", u.Redacted(), u.Scheme)
	case u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" ||
		u.RawFragment != "" || u.RawPath != "":
		return "", fmt.Errorf("SPIFFE ID %q has an opaque part, user info, a query, a fragment or percent-encoding", u.Redacted())
	case u.Host == "":
		return "", fmt.Errorf("SPIFFE ID %q has no trust domain", u.String())
	}
	for _, c := range u.Host {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return "", fmt.Errorf("SPIFFE ID %q: trust domain has %q (a port, upper case or another character)", u.String(), c)
		}
	}
	if u.Path != "" {
		if u.Path[0] != '/' {
			return "", fmt.Errorf("SPIFFE ID %q: path does not start with /", u.String())
		}
		// SplitSeq walks the segments without allocating a slice of them:
		// this runs on every request.
		for seg := range strings.SplitSeq(u.Path[1:], "/") {
			if seg == "" || seg == "." || seg == ".." {
				return "", fmt.Errorf("SPIFFE ID %q: empty, . or .. path segment", u.String())
			}
			for _, c := range seg {
				if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
					return "", fmt.Errorf("SPIFFE ID %q: path has %q", u.String(), c)
				}
			}
		}
	}
	s := u.String()
	if len(s) > maxSPIFFEIDLen {
		return "", fmt.Errorf("SPIFFE ID is %d bytes, over %d", len(s), maxSPIFFEIDLen)
	}
	return s, nil
}
