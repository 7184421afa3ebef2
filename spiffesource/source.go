// Package spiffesource takes a kvfence server's or client's X.509
// credentials from a SPIFFE Workload API, such as a SPIRE agent's
// (docs/design.md §12): the X.509-SVID, its key and the trust bundle,
// rotated by the agent while the process runs, with no reload and no files.
//
// A Source is a server.CredentialSource, for server.NewSourceCredentials;
// its ClientTLS is the TLS configuration of a client.Client that checks the
// receiver's SPIFFE ID. It lives apart from server and client so that only
// a program that uses a Workload API links go-spiffe and gRPC.
//
// The server trusts, as client CA, the bundle of its own SVID's trust
// domain only; federated bundles are not used. Callers are still
// identified by server.SPIFFECertificate, with TrustDomain set to
// Source.TrustDomain.
package spiffesource

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
)

// DefaultTimeout bounds Open's wait for the first X.509-SVID when
// Options.Timeout is zero. An agent that is up answers in milliseconds; one
// that is still attesting the workload may take seconds; one that is not
// there never answers, and a service must then fail, not hang.
const DefaultTimeout = 30 * time.Second

// Errors of Open and ClientTLS.
var (
	// ErrAddress means the Workload API address is not unix:///PATH with
	// an absolute, clean path.
	ErrAddress = errors.New("spiffesource: the Workload API address must be unix:///ABSOLUTE/PATH")
	// ErrUnavailable means no X.509-SVID came from the Workload API
	// within the timeout: the agent is not there, refuses this workload,
	// or has no SVID for it.
	ErrUnavailable = errors.New("spiffesource: no X.509-SVID from the Workload API")
	// ErrServerID means the expected server ID is not a SPIFFE ID.
	ErrServerID = errors.New("spiffesource: the server's expected ID is not a SPIFFE ID")
)

// Options configures Open.
type Options struct {
	// Address is the Workload API's unix socket, unix:///PATH. Required.
	Address string
	// Timeout bounds the wait for the first X.509-SVID; zero means
	// DefaultTimeout.
	Timeout time.Duration
	// Logger receives the Workload API's failures while the Source
	// follows it, such as the agent going away; the Source keeps the
	// last credentials it had and retries. Nil discards them.
	Logger *slog.Logger
}

// Source is a live connection to a Workload API: the current X.509-SVID
// and trust bundle, updated as the agent rotates them. It is safe for
// concurrent use.
type Source struct {
	x   *workloadapi.X509Source
	mu  sync.Mutex // serialises building a snapshot
	cur atomic.Pointer[snapshot]
}

// snapshot is the credentials of one X.509 context the agent sent.
type snapshot struct {
	svid   *x509svid.SVID
	bundle *x509bundle.Bundle
	cert   *tls.Certificate
	roots  []*x509.Certificate
	gen    uint64
}

// Open connects to the Workload API at opts.Address and waits, at most
// opts.Timeout, for its first X.509-SVID and trust bundle. ctx bounds only
// that wait; the Source keeps following updates until Close.
func Open(ctx context.Context, opts Options) (*Source, error) {
	if err := checkAddress(opts.Address); err != nil {
		return nil, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	wait, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wl := &watchLog{log: opts.Logger}
	x, err := workloadapi.NewX509Source(wait, workloadapi.WithClientOptions(workloadapi.WithAddr(opts.Address),
		workloadapi.WithLogger(wl)))
	if err != nil {
		// go-spiffe retries an unreachable socket until the context ends;
		// its error then says only that the context ended, and why it
		// failed is in its log.
		if wait.Err() != nil {
			return nil, fmt.Errorf("%w at %s within %s: %w%s", ErrUnavailable, opts.Address, timeout, err, wl.lastError())
		}
		return nil, fmt.Errorf("%w at %s: %w", ErrUnavailable, opts.Address, err)
	}
	s := &Source{x: x}
	if _, err := s.snapshot(); err != nil {
		x.Close()
		return nil, fmt.Errorf("%w at %s: %w", ErrUnavailable, opts.Address, err)
	}
	return s, nil
}

// watchLog is go-spiffe's logger: it keeps the last error, for Open's,
// and passes failures on to the Logger of Options.
type watchLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	last string
}

func (w *watchLog) Debugf(string, ...any) {}
func (w *watchLog) Infof(string, ...any)  {}

func (w *watchLog) Warnf(format string, args ...any) { w.record(format, args) }

func (w *watchLog) Errorf(format string, args ...any) { w.record(format, args) }

func (w *watchLog) record(format string, args []any) {
	msg := fmt.Sprintf(format, args...)
	w.mu.Lock()
	w.last = msg
	w.mu.Unlock()
	if w.log != nil {
		w.log.Warn("SPIFFE Workload API", "error", msg)
	}
}

// lastError returns "; last error: ..." if go-spiffe logged one.
func (w *watchLog) lastError() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == "" {
		return ""
	}
	return "; last error: " + w.last
}

// checkAddress accepts unix:///PATH only. go-spiffe also takes tcp://, a
// socket that any host on the network can reach and that proves nothing
// about who answers; the credentials it hands out are the service's own.
func checkAddress(addr string) error {
	u, err := url.Parse(addr)
	if err != nil {
		return fmt.Errorf("%w: %q: %w", ErrAddress, addr, err)
	}
	if u.Scheme != "unix" || u.Host != "" || u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
		!path.IsAbs(u.Path) || path.Clean(u.Path) != u.Path {
		return fmt.Errorf("%w: %q", ErrAddress, addr)
	}
	return nil
}

// Close stops following the Workload API. Handshakes that need the
// Source fail from then on.
func (s *Source) Close() error { return s.x.Close() }

// snapshot returns the credentials of the X.509 context the Source holds
// now, building them if the agent sent a new one.
func (s *Source) snapshot() (*snapshot, error) {
	svid, bundle, err := s.read()
	if err != nil {
		return nil, err
	}
	if c := s.cur.Load(); c != nil && c.svid == svid && c.bundle == bundle {
		return c, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.cur.Load()
	if old != nil && old.svid == svid && old.bundle == bundle {
		return old, nil
	}
	roots := bundle.X509Authorities()
	if len(roots) == 0 {
		return nil, fmt.Errorf("the trust bundle of %s is empty", svid.ID.TrustDomain())
	}
	der := make([][]byte, len(svid.Certificates))
	for i, c := range svid.Certificates {
		der[i] = c.Raw
	}
	next := &snapshot{svid: svid, bundle: bundle, roots: roots,
		cert: &tls.Certificate{Certificate: der, PrivateKey: svid.PrivateKey, Leaf: svid.Certificates[0]}}
	if old != nil {
		next.gen = old.gen + 1
	}
	s.cur.Store(next)
	return next, nil
}

// read returns the SVID and its trust domain's bundle from one X.509
// context. go-spiffe replaces both together but hands them out one at a
// time, each time from a fresh parse: an SVID read unchanged before and
// after the bundle means no update came in between.
func (s *Source) read() (*x509svid.SVID, *x509bundle.Bundle, error) {
	for {
		svid, err := s.x.GetX509SVID()
		if err != nil {
			return nil, nil, err
		}
		bundle, err := s.x.GetX509BundleForTrustDomain(svid.ID.TrustDomain())
		if err != nil {
			return nil, nil, err
		}
		again, err := s.x.GetX509SVID()
		if err != nil {
			return nil, nil, err
		}
		if again == svid {
			return svid, bundle, nil
		}
	}
}

// Credentials returns the current X.509-SVID as a certificate with its
// key, its trust domain's bundle as the client CA, and a generation that
// grows with every update from the agent. It makes the Source a
// server.CredentialSource.
func (s *Source) Credentials() (*tls.Certificate, []*x509.Certificate, uint64, error) {
	c, err := s.snapshot()
	if err != nil {
		return nil, nil, 0, err
	}
	return c.cert, c.roots, c.gen, nil
}

// ID returns the SPIFFE ID of the current X.509-SVID.
func (s *Source) ID() (string, error) {
	c, err := s.snapshot()
	if err != nil {
		return "", err
	}
	return c.svid.ID.String(), nil
}

// TrustDomain returns the trust domain of the current X.509-SVID, for
// server.SPIFFECertificate.TrustDomain.
func (s *Source) TrustDomain() (string, error) {
	c, err := s.snapshot()
	if err != nil {
		return "", err
	}
	return c.svid.ID.TrustDomain().Name(), nil
}

// ClientTLS returns the TLS configuration of a client that presents the
// Source's current X.509-SVID and admits only a server whose X.509-SVID
// has the one SPIFFE ID serverID and verifies against the current bundle
// of serverID's trust domain (go-spiffe's verification: one URI SAN, a
// leaf that is no CA). Both follow rotations, handshake by handshake. Use
// it as client.Options.TLS.
func (s *Source) ClientTLS(serverID string) (*tls.Config, error) {
	id, err := spiffeid.FromString(serverID)
	if err != nil || id.String() != serverID || id.Path() == "" {
		return nil, fmt.Errorf("%w: %q", ErrServerID, serverID)
	}
	cfg := tlsconfig.MTLSClientConfig(s.x, s.x, tlsconfig.AuthorizeID(id))
	cfg.MinVersion = tls.VersionTLS13
	return cfg, nil
}
