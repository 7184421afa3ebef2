package server

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
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
	// Authenticate returns the identity of r's caller.
	Authenticate(r *http.Request) (string, error)
}

// SPIFFECertificate authenticates a caller by the verified client
// certificate of its TLS connection: the identity is the certificate's
// SPIFFE ID, its one URI SAN "spiffe://trust-domain/path". A certificate
// with no URI SAN, with more than one, or whose URI is not a valid SPIFFE
// ID, is refused, as is one that is a CA or may sign certificates or CRLs
// (an X.509-SVID leaf is neither), and a connection without a certificate
// that the TLS layer verified (the server must use tls.RequireAndVerifyClientCert, or
// VerifyClientCertIfGiven, against the trust bundle).
//
// A connection outlives the handshake that verified its certificate, and
// an HTTP/2 connection that stays busy never times out. So a request on a
// connection whose verified chain has expired since is refused with
// ErrConnectionRevoked (and the handler closes the connection); with
// Roots, so is one whose chain no longer verifies against the current
// roots, after the server reloaded its client CA.
//
// With the server's ConnContext, the SPIFFE ID is read from a
// connection's certificate once, at its first request, and kept with
// that certificate; expiry, the roots and the trust domain are still
// checked on every request.
type SPIFFECertificate struct {
	// Roots, when set, are the client CA the server verifies handshakes
	// against, such as its Credentials. A connection is checked against
	// the current roots at its first request after they changed; the
	// verdict is kept per connection and generation, so other requests do
	// not verify the chain again. The server must use ConnContext.
	Roots ClientRoots
	// TrustDomain, when set, is the one trust domain admitted: a
	// certificate whose SPIFFE ID is in another is refused, even if it
	// chains to the client CA. A SPIFFE trust bundle vouches only for
	// the IDs of its own trust domain, so a server whose client CA is
	// its trust domain's bundle (SourceCredentials over a Workload API)
	// sets it to that trust domain.
	TrustDomain string
}

// Authenticate returns the SPIFFE ID of the request's verified client
// certificate.
func (a SPIFFECertificate) Authenticate(r *http.Request) (string, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return "", fmt.Errorf("%w: no client certificate", ErrUnauthenticated)
	}
	// PeerCertificates is what the client sent; only VerifiedChains says
	// that the TLS layer checked it against the trust bundle.
	if len(r.TLS.VerifiedChains) == 0 {
		return "", fmt.Errorf("%w: the client certificate was not verified", ErrUnauthenticated)
	}
	if err := a.checkChain(r); err != nil {
		return "", err
	}
	id, err := connLeafIdentity(r, r.TLS.PeerCertificates[0])
	if err != nil {
		return "", err
	}
	if td := TrustDomainOf(id); a.TrustDomain != "" && td != a.TrustDomain {
		return "", fmt.Errorf("%w: the client's SPIFFE ID is in trust domain %q, not %q", ErrUnauthenticated, td, a.TrustDomain)
	}
	return id, nil
}

// leafIdentity is what leafSPIFFEID found for one leaf certificate.
type leafIdentity struct {
	leaf *x509.Certificate
	id   string
	err  error
}

// connLeafIdentity returns leafSPIFFEID(leaf), computed once per
// connection when the server sets ConnContext: a TLS connection's
// certificate is fixed at its handshake, and reading and checking the
// SPIFFE ID again was a share of what serving each call cost. The answer
// is kept with the leaf it is of, and used only for that same leaf. What
// can change while a connection lasts (expiry, the roots, the trust
// domain admitted) is checked on every request all the same.
func connLeafIdentity(r *http.Request, leaf *x509.Certificate) (string, error) {
	ci := connInfoOf(r.Context())
	if ci == nil {
		return leafSPIFFEID(leaf)
	}
	if c := ci.identity.Load(); c != nil && c.leaf == leaf {
		return c.id, c.err
	}
	id, err := leafSPIFFEID(leaf)
	ci.identity.Store(&leafIdentity{leaf: leaf, id: id, err: err})
	return id, err
}

// leafSPIFFEID returns the SPIFFE ID of a client certificate that may
// stand for a workload: its one URI SAN, in the one spelling
// ParseSPIFFEID accepts, of a leaf that is no CA.
func leafSPIFFEID(leaf *x509.Certificate) (string, error) {
	// The identity is read from the certificate's own bytes: the parsed
	// leaf.URIs went through url.Parse, which lower-cases the scheme and
	// drops an empty fragment, so two certificates with different names
	// could otherwise yield one identity.
	uris, err := rawURISANs(leaf)
	if err != nil {
		return "", fmt.Errorf("%w: the client certificate's SANs: %w", ErrUnauthenticated, err)
	}
	if len(uris) != 1 || len(leaf.URIs) != 1 {
		return "", fmt.Errorf("%w: the client certificate has %d URI SANs, want exactly one SPIFFE ID",
			ErrUnauthenticated, len(uris))
	}
	// An X.509-SVID leaf is no CA and signs neither certificates nor
	// CRLs (X509-SVID specification, leaf validation): a CA certificate
	// that chains to the client CA names whoever holds a CA's key, not
	// the workload its URI names.
	if leaf.IsCA || leaf.KeyUsage&(x509.KeyUsageCertSign|x509.KeyUsageCRLSign) != 0 {
		return "", fmt.Errorf("%w: the client certificate is a CA or may sign certificates or CRLs, which an X.509-SVID may not",
			ErrUnauthenticated)
	}
	id, err := ParseSPIFFEID(uris[0])
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	return id, nil
}

// chainVerdict is what one check of a connection's client certificate
// against one generation of roots found.
type chainVerdict struct {
	roots    ClientRoots // where the roots came from
	gen      uint64
	err      error     // nil if a chain verifies
	notAfter time.Time // the earliest expiry on the chain that verifies
}

// checkChain refuses a request on a connection whose client certificate
// chain has expired, or, with Roots, no longer verifies against them.
func (a SPIFFECertificate) checkChain(r *http.Request) error {
	now := time.Now()
	if a.Roots == nil {
		return checkExpiry(chainsExpiry(r.TLS.VerifiedChains), now)
	}
	ci := connInfoOf(r.Context())
	if ci == nil {
		// Without the connection, a revoked one could not be closed, and
		// every request would verify its chain again: a configuration
		// fault, answered 500.
		return errors.New("server: SPIFFECertificate.Roots needs the server's ConnContext set to server.ConnContext")
	}
	return checkVerdict(ci, r.TLS, a.Roots, now)
}

// checkVerdict checks the connection's client certificate against the
// current roots of src, verifying it again only if they changed since the
// connection's last verdict.
func checkVerdict(ci *connInfo, cs *tls.ConnectionState, src ClientRoots, now time.Time) error {
	roots, gen := src.ClientRoots()
	v := ci.verdict.Load()
	if v == nil || v.roots != src || v.gen != gen {
		v = verifyChain(cs, roots, gen, now)
		v.roots = src
		ci.verdict.Store(v)
	}
	if v.err != nil {
		return v.err
	}
	return checkExpiry(v.notAfter, now)
}

// recheckChain checks again, as Authenticate did, a request's connection
// that SPIFFECertificate with Roots admitted. A request whose body was
// still arriving during a reload is refused if its connection is no
// longer trusted. Other requests pass.
func recheckChain(r *http.Request) error {
	ci := connInfoOf(r.Context())
	if ci == nil || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil
	}
	v := ci.verdict.Load()
	if v == nil {
		return nil
	}
	return checkVerdict(ci, r.TLS, v.roots, time.Now())
}

// verifyChain checks a connection's client certificate against roots. A
// chain verified at the handshake that ends in one of roots still
// verifies, bar expiry, which the caller checks on every request; any
// other is verified again, as crypto/tls verifies a client's chain.
func verifyChain(cs *tls.ConnectionState, roots *Roots, gen uint64, now time.Time) *chainVerdict {
	var kept [][]*x509.Certificate
	for _, ch := range cs.VerifiedChains {
		if len(ch) > 0 && roots.has(ch[len(ch)-1]) {
			kept = append(kept, ch)
		}
	}
	if len(kept) > 0 {
		return &chainVerdict{gen: gen, notAfter: chainsExpiry(kept)}
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	chains, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots.Pool(), Intermediates: inter,
		CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return &chainVerdict{gen: gen, err: fmt.Errorf("%w: %w: it does not verify against the current client CA: %v",
			ErrUnauthenticated, ErrConnectionRevoked, err)}
	}
	return &chainVerdict{gen: gen, notAfter: chainsExpiry(chains)}
}

// chainsExpiry returns when the last of chains to stay valid expires: the
// latest, over chains, of each chain's earliest NotAfter.
func chainsExpiry(chains [][]*x509.Certificate) time.Time {
	var latest time.Time
	for _, ch := range chains {
		var first time.Time
		for i, c := range ch {
			if i == 0 || c.NotAfter.Before(first) {
				first = c.NotAfter
			}
		}
		if first.After(latest) {
			latest = first
		}
	}
	return latest
}

// checkExpiry refuses a chain that expired before now.
func checkExpiry(notAfter, now time.Time) error {
	if now.After(notAfter) {
		return fmt.Errorf("%w: %w: the client certificate chain expired at %s", ErrUnauthenticated,
			ErrConnectionRevoked, notAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// oidSubjectAltName is the subject alternative name extension (RFC 5280
// §4.2.1.6).
var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// rawURISANs returns the uniformResourceIdentifier names of cert's subject
// alternative name extension exactly as encoded.
func rawURISANs(cert *x509.Certificate) ([]string, error) {
	var uris []string
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		in := cryptobyte.String(ext.Value)
		var names cryptobyte.String
		if !in.ReadASN1(&names, cbasn1.SEQUENCE) || !in.Empty() {
			return nil, errors.New("malformed subject alternative names")
		}
		for !names.Empty() {
			var name cryptobyte.String
			var tag cbasn1.Tag
			if !names.ReadAnyASN1(&name, &tag) {
				return nil, errors.New("malformed subject alternative name")
			}
			// uniformResourceIdentifier is [6] IMPLICIT IA5String.
			if tag == cbasn1.Tag(6).ContextSpecific() {
				uris = append(uris, string(name))
			}
		}
	}
	return uris, nil
}

// TrustDomainOf returns the trust domain of a SPIFFE ID that
// ParseSPIFFEID accepted: "example.org" for "spiffe://example.org/a/b".
func TrustDomainOf(id string) string {
	td, _, _ := strings.Cut(strings.TrimPrefix(id, "spiffe://"), "/")
	return td
}

// maxSPIFFEIDLen is the SPIFFE specification's limit on an ID's length.
const maxSPIFFEIDLen = 2048

// ParseSPIFFEID checks that s is a SPIFFE ID as the SPIFFE-ID
// specification defines it, in its one spelling, and returns it: scheme
// "spiffe" in lower case, a trust domain of lower-case letters, digits,
// ".", "-" and "_" with no port or user info, and a path of non-empty
// segments of letters, digits, ".", "-" and "_" other than "." and "..",
// with no trailing slash, query or fragment (not even an empty one) and no
// percent-encoding, at most 2048 bytes in all. The check is strict because
// the string becomes an executor name that grants compare byte for byte:
// two spellings of one ID would be two identities, or one identity for two
// names.
func ParseSPIFFEID(s string) (string, error) {
	if len(s) > maxSPIFFEIDLen {
		return "", fmt.Errorf("SPIFFE ID is %d bytes, over %d", len(s), maxSPIFFEIDLen)
	}
	if !strings.HasPrefix(s, "spiffe://") || strings.ContainsAny(s, "?#%") {
		return "", fmt.Errorf("URI SAN %q is not a SPIFFE ID in its one spelling", s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("URI SAN %q: %w", s, err)
	}
	switch {
	case u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" ||
		u.RawFragment != "" || u.RawPath != "":
		return "", fmt.Errorf("SPIFFE ID %q has an opaque part, user info, a query, a fragment or percent-encoding", s)
	case u.Host == "":
		return "", fmt.Errorf("SPIFFE ID %q has no trust domain", s)
	}
	for _, c := range u.Host {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return "", fmt.Errorf("SPIFFE ID %q: trust domain has %q (a port, upper case or another character)", s, c)
		}
	}
	if u.Path != "" {
		if u.Path[0] != '/' {
			return "", fmt.Errorf("SPIFFE ID %q: path does not start with /", s)
		}
		// SplitSeq walks the segments without allocating a slice of them:
		// this runs on every request.
		for seg := range strings.SplitSeq(u.Path[1:], "/") {
			if seg == "" || seg == "." || seg == ".." {
				return "", fmt.Errorf("SPIFFE ID %q: empty, . or .. path segment", s)
			}
			for _, c := range seg {
				if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
					return "", fmt.Errorf("SPIFFE ID %q: path has %q", s, c)
				}
			}
		}
	}
	// Whatever url.Parse normalises, the string must be its own canonical
	// form.
	if u.String() != s {
		return "", fmt.Errorf("SPIFFE ID %q is not in canonical form (%q)", s, u.String())
	}
	return s, nil
}
