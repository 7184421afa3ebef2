package server_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/server"
)

// Ensure that reloads racing requests on open HTTP/2 connections are safe
// (the race detector watches) and end right: while the client CA flips
// between one that issued the workers' certificates and one that did not,
// requests are answered 200 or 401, never anything else, and once the last
// reload removed the workers' CA, no request on any connection made before
// it is answered 200.
func TestCredentials_ReloadRacesRequests(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	other, err := pki.NewCA("other CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serverCert, err := pki.Issue(e.ca, pki.Options{Name: "receiver", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	key, err := serverCert.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name+".tmp"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, name+".tmp"), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("server.crt", serverCert.CertPEM())
	write("server.key", key)
	write("ca.crt", e.ca.CertPEM())
	creds, err := server.LoadCredentials(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := server.NewListener(inner, server.ListenerOptions{MaxConnections: 64, TLS: creds.TLSConfig()})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e.handler(server.SPIFFECertificate{Roots: creds}, operator), ConnContext: server.ConnContext,
		ErrorLog: slogDiscard()}
	go srv.Serve(l)
	defer srv.Close()

	const workers = 6
	var final atomic.Bool // set once the last reload has happened
	var stop atomic.Bool
	var wg sync.WaitGroup
	var oks, refusals atomic.Int64
	for i := range workers {
		cert, err := pki.Issue(e.ca, pki.Options{Name: "w", URIs: []string{fmt.Sprintf("%s-%d", workerA, i)}, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool(),
			Certificates: []tls.Certificate{cert.TLS()}, MinVersion: tls.VersionTLS13}}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		wg.Go(func() {
			for !stop.Load() {
				after := final.Load()
				resp, err := do(c, http.MethodGet, "https://"+l.Addr().String()+api.PathHealthz, "", nil)
				switch {
				case err != nil:
					// A closed connection, or a handshake the current CA
					// refused: expected whenever the CA excludes them.
				case resp.status == http.StatusOK:
					if after {
						t.Errorf("200 after the last reload removed the CA")
						return
					}
					oks.Add(1)
				case resp.status == http.StatusUnauthorized:
					refusals.Add(1)
				default:
					t.Errorf("answer %d %s", resp.status, resp.raw)
					return
				}
			}
		})
	}
	for i := range 40 {
		if i%2 == 0 {
			write("ca.crt", other.CertPEM())
		} else {
			write("ca.crt", e.ca.CertPEM())
		}
		if err := creds.Reload(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	write("ca.crt", other.CertPEM())
	if err := creds.Reload(); err != nil {
		t.Fatal(err)
	}
	final.Store(true)
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if oks.Load() == 0 || refusals.Load() == 0 {
		t.Fatalf("%d answered, %d refused: the race did not run", oks.Load(), refusals.Load())
	}
}
