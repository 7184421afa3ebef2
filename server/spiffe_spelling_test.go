package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/server"
)

// issueRawURI issues a client certificate from the env's CA whose one URI
// SAN is exactly raw, byte for byte (x509.CreateCertificate would
// re-spell a *url.URL).
func (e *env) issueRawURI(raw string) pki.Pair {
	e.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		e.t.Fatal(err)
	}
	san, err := asn1.Marshal([]asn1.RawValue{{Class: asn1.ClassContextSpecific, Tag: 6, Bytes: []byte(raw)}})
	if err != nil {
		e.t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:    big.NewInt(time.Now().UnixNano()),
		Subject:         pkix.Name{CommonName: "worker"},
		NotBefore:       time.Now().Add(-time.Minute),
		NotAfter:        time.Now().Add(time.Hour),
		KeyUsage:        x509.KeyUsageDigitalSignature,
		ExtKeyUsage:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Critical: true, Value: san}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, e.ca.Cert, &key.PublicKey, e.ca.Key)
	if err != nil {
		e.t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		e.t.Fatal(err)
	}
	return pki.Pair{Cert: cert, Key: key}
}

// Ensure that a URI SAN which is not a SPIFFE ID in its one spelling (an
// upper-case scheme, an empty fragment) is refused, not normalised onto
// another identity: parsed by url.Parse and re-spelled, such a certificate
// would be served as the administrator "spiffe://example.org/ops/alice"
// although it never contains that string, so a CA that refuses to issue the
// administrator's ID by exact comparison would not stop it.
func TestSPIFFEID_OtherSpellingsRefused(t *testing.T) {
	// The parser on its own: each of these is refused by the SPIFFE ID
	// specification (scheme "spiffe" in lower case; no fragment).
	for _, raw := range []string{"SPIFFE://example.org/ops/alice", "spiffe://example.org/ops/alice#", "Spiffe://example.org/ops/alice#"} {
		if id, err := server.ParseSPIFFEID(raw); err == nil {
			t.Errorf("ParseSPIFFEID(%q) = %q, want an error: it is not a SPIFFE ID", raw, id)
		}
	}

	// End to end over mTLS: a certificate whose SAN is "SPIFFE://example.org/ops/alice#".
	e := newEnv(t)
	pair := e.issueRawURI("SPIFFE://example.org/ops/alice#")
	c := e.clientWith(&pair)
	resp := e.postJSON(c, api.PathHold, api.HoldRequest{Scopes: []string{scope}, Reason: "spelled"})
	if resp.status == http.StatusOK {
		evs := events(t, e.r)
		t.Errorf("a certificate whose URI SAN is %q, not a SPIFFE ID, was served as administrator %q: hold answered %d, recorded actor %q",
			"SPIFFE://example.org/ops/alice#", operator, resp.status, evs[len(evs)-1].Actor)
	} else if resp.status != http.StatusUnauthorized {
		t.Errorf("hold: %d %s, want 401", resp.status, resp.raw)
	}
}
