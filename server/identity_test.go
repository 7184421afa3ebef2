package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
)

// Ensure that the identity SPIFFECertificate keeps per connection is used
// only for the leaf it was read from: a request that presents another
// leaf on the same connection gets that leaf's own identity or refusal,
// never the one kept, and a refused leaf stays refused when asked again.
func TestSPIFFECertificate_ConnIdentityIsOfItsLeaf(t *testing.T) {
	ca, err := pki.NewCA("CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(uris ...string) *x509.Certificate {
		p, err := pki.Issue(ca, pki.Options{Name: "w", URIs: uris, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		return p.Cert
	}
	a := issue("spiffe://example.org/worker/a")
	b := issue("spiffe://example.org/worker/b")
	two := issue("spiffe://example.org/worker/a", "spiffe://example.org/worker/b")

	// One connection's context, as the server's ConnContext makes it.
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	ctx := ConnContext(context.Background(), tls.Server(p1, &tls.Config{}))
	auth := SPIFFECertificate{}
	for _, tc := range []struct {
		leaf   *x509.Certificate
		want   string
		refuse bool
	}{
		{leaf: a, want: "spiffe://example.org/worker/a"},
		{leaf: a, want: "spiffe://example.org/worker/a"},
		{leaf: b, want: "spiffe://example.org/worker/b"},
		{leaf: two, refuse: true},
		{leaf: two, refuse: true},
		{leaf: a, want: "spiffe://example.org/worker/a"},
	} {
		r := (&http.Request{TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{tc.leaf},
			VerifiedChains: [][]*x509.Certificate{{tc.leaf, ca.Cert}}}}).WithContext(ctx)
		got, err := auth.Authenticate(r)
		switch {
		case tc.refuse && !errors.Is(err, ErrUnauthenticated):
			t.Fatalf("leaf with two URI SANs: got %q, %v; want ErrUnauthenticated", got, err)
		case !tc.refuse && (err != nil || got != tc.want):
			t.Fatalf("got %q, %v; want %q", got, err, tc.want)
		}
		// The identity was kept, for this leaf: later requests on the
		// connection do not read the certificate again.
		if k := connInfoOf(ctx).identity.Load(); k == nil || k.leaf != tc.leaf {
			t.Fatalf("the connection keeps no identity for the leaf just presented")
		}
	}
}
