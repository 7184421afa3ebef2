// Package spiffetest runs a SPIFFE Workload API for tests: a gRPC server
// on a unix socket that hands out the X.509-SVIDs and bundles a test sets,
// and streams every change to its watchers, as a SPIRE agent does when it
// rotates them. Like SPIRE, it refuses a call without the
// "workload.spiffe.io: true" metadata header.
package spiffetest

import (
	"context"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvfence/kvfence/internal/pki"
	"github.com/spiffe/go-spiffe/v2/proto/spiffe/workload"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// WorkloadAPI is a running Workload API.
type WorkloadAPI struct {
	// UnimplementedSpiffeWorkloadAPIServer answers the calls other than
	// FetchX509SVID with Unimplemented.
	workload.UnimplementedSpiffeWorkloadAPIServer
	// Addr is its address, unix:///PATH.
	Addr string
	// Path is its socket's path.
	Path string

	mu      sync.Mutex
	resp    *workload.X509SVIDResponse
	changed chan struct{} // closed and replaced at every Set
}

// Start serves a Workload API with no SVID until Set; it stops when the
// test ends.
func Start(t testing.TB) *WorkloadAPI {
	t.Helper()
	w, stop, err := Serve()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return w
}

// Serve is Start outside a test: it returns the function that stops the
// Workload API and removes its socket.
func Serve() (*WorkloadAPI, func(), error) {
	// A unix socket path is limited to about 100 bytes, which t.TempDir
	// may exceed.
	dir, err := os.MkdirTemp("", "wlapi")
	if err != nil {
		return nil, nil, err
	}
	p := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", p)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	w := &WorkloadAPI{Addr: "unix://" + p, Path: p, changed: make(chan struct{})}
	s := grpc.NewServer()
	workload.RegisterSpiffeWorkloadAPIServer(s, w)
	go s.Serve(l)
	return w, func() { s.Stop(); os.RemoveAll(dir) }, nil
}

// SVID is one X.509-SVID to hand out.
type SVID struct {
	// ID is its SPIFFE ID.
	ID string
	// Pair is its certificate, issued for ID, and key.
	Pair pki.Pair
}

// Issue returns an X.509-SVID for id, for both client and server use, from
// ca.
func Issue(t testing.TB, ca pki.Pair, id string) SVID {
	t.Helper()
	p, err := pki.Issue(ca, pki.Options{Name: "svid", URIs: []string{id}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	return SVID{ID: id, Pair: p}
}

// Set makes svid and the trust bundle of its trust domain the current
// X.509 context, and sends it to every watcher.
func (w *WorkloadAPI) Set(t testing.TB, svid SVID, bundle ...*x509.Certificate) {
	t.Helper()
	if err := w.SetX509(svid, bundle...); err != nil {
		t.Fatal(err)
	}
}

// SetX509 is Set outside a test.
func (w *WorkloadAPI) SetX509(svid SVID, bundle ...*x509.Certificate) error {
	key, err := x509.MarshalPKCS8PrivateKey(svid.Pair.Key)
	if err != nil {
		return err
	}
	var b []byte
	for _, c := range bundle {
		b = append(b, c.Raw...)
	}
	resp := &workload.X509SVIDResponse{Svids: []*workload.X509SVID{{SpiffeId: svid.ID, X509Svid: svid.Pair.Cert.Raw,
		X509SvidKey: key, Bundle: b}}}
	w.mu.Lock()
	w.resp = resp
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
	return nil
}

// checkHeader refuses a call without the security header, with the code
// and message SPIRE uses.
func checkHeader(ctx context.Context) error {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok || len(md["workload.spiffe.io"]) != 1 || md["workload.spiffe.io"][0] != "true" {
		return status.Error(codes.InvalidArgument, "security header missing from request")
	}
	return nil
}

// FetchX509SVID streams the current X.509 context and every later one.
func (w *WorkloadAPI) FetchX509SVID(_ *workload.X509SVIDRequest, stream workload.SpiffeWorkloadAPI_FetchX509SVIDServer) error {
	if err := checkHeader(stream.Context()); err != nil {
		return err
	}
	for {
		w.mu.Lock()
		resp, changed := w.resp, w.changed
		w.mu.Unlock()
		if resp != nil {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}
