package spiffesource_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/internal/spiffetest"
)

// Ensure that a misbehaving agent never gets a caller admitted that the
// receiver's trust domain does not vouch for: after it rotates the
// receiver to an SVID and bundle of another trust domain, that domain's
// callers are refused and the open connection of a caller whose CA left
// is refused; after it sends an empty bundle, handshakes fail rather than
// go on without client verification; and a receiver whose agent rotated
// it to an expired SVID is refused by a ClientTLS client.
func TestRedteam21_AgentMisbehaves(t *testing.T) {
	ca, otherCA := newCA(t, "CA"), newCA(t, "other CA")
	agent := spiffetest.Start(t)
	agent.Set(t, spiffetest.Issue(t, ca, receiverID), ca.Cert)
	s := serveFromAgent(t, agent)
	cfgA, _ := workerTLS(t, ca, workerA, ca.Cert)
	a := newWorker(t, cfgA)
	if st, _, err := a.get(s); err != nil || st != http.StatusOK {
		t.Fatalf("worker A: %d %v", st, err)
	}

	// The agent moves the receiver to another trust domain.
	_, _, g, _ := s.src.Credentials()
	agent.Set(t, spiffetest.Issue(t, otherCA, "spiffe://other.org/kvfence/receiver"), otherCA.Cert)
	waitRotated(t, s.src, g)
	intruder, err := pki.Issue(otherCA, pki.Options{Name: "c", URIs: []string{"spiffe://other.org/agent/worker-a"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(t, &tls.Config{Certificates: []tls.Certificate{intruder.TLS()}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if st, _, err := w.get(s); err == nil && st == http.StatusOK {
		t.Fatal("a caller of the agent's new trust domain was admitted by a receiver started in another")
	}
	if st, _, err := a.get(s); err == nil && st == http.StatusOK {
		t.Fatal("worker A's open connection was admitted after its CA left the bundle")
	}

	// The agent sends an SVID with an empty bundle.
	agent.Set(t, spiffetest.Issue(t, ca, receiverID))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, _, _, err := s.src.Credentials(); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the source took an empty bundle")
		}
	}
	for name, cfg := range map[string]*tls.Config{
		"no client certificate": {InsecureSkipVerify: true, MinVersion: tls.VersionTLS13},
		"worker A":              cfgA,
		"other trust domain":    {Certificates: []tls.Certificate{intruder.TLS()}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13},
	} {
		if st, _, err := newWorker(t, cfg).get(s); err == nil {
			t.Errorf("%s: HTTP %d while the agent gave no bundle; want the handshake refused", name, st)
		}
	}

	// The agent rotates the receiver to an expired SVID.
	agent.Set(t, spiffetest.SVID{ID: receiverID, Pair: expiredSVID(t, ca, receiverID)}, ca.Cert)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, _, _, err := s.src.Credentials(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the source did not take the expired SVID")
		}
	}
	if st, _, err := newWorker(t, cfgA).get(s); err == nil {
		t.Fatalf("a ClientTLS client accepted a receiver with an expired SVID: HTTP %d", st)
	}
}

// expiredSVID returns an X.509-SVID for id from ca that expired a minute
// ago.
func expiredSVID(t *testing.T, ca pki.Pair, id string) pki.Pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()), NotBefore: now.Add(-time.Hour), NotAfter: now.Add(-time.Minute),
		BasicConstraintsValid: true, URIs: []*url.URL{u}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return pki.Pair{Cert: cert, Key: key}
}
