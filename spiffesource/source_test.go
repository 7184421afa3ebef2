package spiffesource_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/internal/spiffetest"
	"github.com/kvfence/kvfence/spiffesource"
)

// Ensure that an address other than unix:///ABSOLUTE/CLEAN/PATH is refused
// at once with ErrAddress: a tcp:// Workload API proves nothing about who
// answers, and a relative or unclean path depends on where the service
// happens to run.
func TestOpen_Address(t *testing.T) {
	for _, addr := range []string{
		"",
		"/run/spire/agent.sock",
		"tcp://127.0.0.1:8081",
		"unix://run/spire/agent.sock",
		"unix:run/spire/agent.sock",
		"unix:///run/spire/../agent.sock",
		"unix:///run/spire/agent.sock/",
		"unix:///run/spire/agent.sock?x=1",
		"unix:///run/spire/agent.sock#x",
		"unix://user@/run/spire/agent.sock",
	} {
		t.Run(addr, func(t *testing.T) {
			start := time.Now()
			_, err := spiffesource.Open(context.Background(), spiffesource.Options{Address: addr, Timeout: 3 * time.Second})
			if !errors.Is(err, spiffesource.ErrAddress) {
				t.Fatalf("Open(%q): %v, want ErrAddress", addr, err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("refused after %s: it waited for the agent", d)
			}
		})
	}
}

// Ensure that Open gives up with ErrUnavailable, naming the address and
// the timeout, when no agent listens on the socket or the agent has no
// SVID for the workload, instead of waiting forever as go-spiffe would.
func TestOpen_Unavailable(t *testing.T) {
	silent := spiffetest.Start(t) // answers, but never with an SVID
	ca, err := pki.NewCA("CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	noBundle := spiffetest.Start(t)
	noBundle.Set(t, spiffetest.Issue(t, ca, "spiffe://example.org/w"))
	missing := filepath.Join(t.TempDir(), "missing.sock")
	for _, tc := range []struct{ name, addr, want string }{
		{"no socket", "unix://" + missing, "within 300ms: context deadline exceeded; last error: " +
			"Failed to watch the Workload API: rpc error: code = Unavailable"},
		{"no SVID", silent.Addr, "at " + silent.Addr + " within 300ms"},
		{"empty bundle", noBundle.Addr, "the trust bundle of example.org is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := spiffesource.Open(context.Background(), spiffesource.Options{Address: tc.addr, Timeout: 300 * time.Millisecond})
			if !errors.Is(err, spiffesource.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v, want ErrUnavailable and %q", err, tc.want)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("gave up after %s, want about the 300ms timeout", d)
			}
			t.Log(err)
		})
	}
}

// Ensure that the generation grows with each X.509 context the agent
// sends, and that the certificate and client CA are the new ones.
func TestSource_Credentials(t *testing.T) {
	ca, err := pki.NewCA("trust domain CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	agent := spiffetest.Start(t)
	first := spiffetest.Issue(t, ca, "spiffe://example.org/receiver")
	agent.Set(t, first, ca.Cert)
	src, err := spiffesource.Open(context.Background(), spiffesource.Options{Address: agent.Addr, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	cert, roots, gen, err := src.Credentials()
	if err != nil || !cert.Leaf.Equal(first.Pair.Cert) || len(roots) != 1 || !roots[0].Equal(ca.Cert) {
		t.Fatalf("first: %v, %v", err, roots)
	}
	if id, err := src.ID(); err != nil || id != first.ID {
		t.Fatalf("ID: %q, %v", id, err)
	}
	if td, err := src.TrustDomain(); err != nil || td != "example.org" {
		t.Fatalf("TrustDomain: %q, %v", td, err)
	}
	other, err := pki.NewCA("next CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	second := spiffetest.Issue(t, other, "spiffe://example.org/receiver")
	agent.Set(t, second, ca.Cert, other.Cert)
	cert2, roots2, gen2 := waitRotated(t, src, gen)
	if !cert2.Leaf.Equal(second.Pair.Cert) || len(roots2) != 2 {
		t.Fatalf("after the rotation: %s, %d roots", cert2.Leaf.SerialNumber, len(roots2))
	}
	if gen2 <= gen {
		t.Fatalf("generation %d after %d", gen2, gen)
	}
}

// Ensure that ClientTLS refuses an expected server ID that is not a
// SPIFFE ID in its one spelling.
func TestSource_ClientTLSServerID(t *testing.T) {
	src := openAgent(t, "spiffe://example.org/w")
	for _, id := range []string{"", "example.org/receiver", "spiffe://example.org", "spiffe://Example.org/receiver",
		"spiffe://example.org/receiver/", "https://example.org/receiver"} {
		if _, err := src.ClientTLS(id); !errors.Is(err, spiffesource.ErrServerID) {
			t.Errorf("ClientTLS(%q): %v, want ErrServerID", id, err)
		}
	}
	if _, err := src.ClientTLS("spiffe://example.org/receiver"); err != nil {
		t.Fatal(err)
	}
}

// openAgent starts a Workload API that hands out an SVID for id and opens
// a Source on it.
func openAgent(t *testing.T, id string) *spiffesource.Source {
	t.Helper()
	ca, err := pki.NewCA("CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	agent := spiffetest.Start(t)
	agent.Set(t, spiffetest.Issue(t, ca, id), ca.Cert)
	src, err := spiffesource.Open(context.Background(), spiffesource.Options{Address: agent.Addr, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}
