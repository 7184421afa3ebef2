package spiffesource_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/internal/spiffetest"
	"github.com/kvfence/kvfence/server"
	"github.com/kvfence/kvfence/spiffesource"
)

// A server and a client that take their credentials from a Workload API.
// Here one stands in for the SPIRE agent; in production the address is
// the agent's socket, such as unix:///run/spire/agent.sock.
func Example() {
	ca, _ := pki.NewCA("example.org CA", time.Hour)
	svid, _ := pki.Issue(ca, pki.Options{URIs: []string{"spiffe://example.org/kvfence/receiver"}, Server: true, Client: true})
	agent, stop, _ := spiffetest.Serve()
	defer stop()
	agent.SetX509(spiffetest.SVID{ID: "spiffe://example.org/kvfence/receiver", Pair: svid}, ca.Cert)

	ctx := context.Background()
	src, err := spiffesource.Open(ctx, spiffesource.Options{Address: agent.Addr, Timeout: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer src.Close()

	// The server: every handshake uses the current SVID and bundle, and
	// SPIFFECertificate revokes open connections the bundle stops
	// vouching for. server.New takes auth as its Authenticator.
	creds, _ := server.NewSourceCredentials(src)
	td, _ := src.TrustDomain()
	auth := server.SPIFFECertificate{Roots: creds, TrustDomain: td}
	inner, _ := net.Listen("tcp", "127.0.0.1:0")
	l, _ := server.NewListener(inner, server.ListenerOptions{MaxConnections: 8, TLS: creds.TLSConfig()})
	srv := &http.Server{ConnContext: server.ConnContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := auth.Authenticate(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, id)
	})}
	go srv.Serve(l)
	defer srv.Close()

	// The client admits only the receiver's SPIFFE ID; a worker passes
	// cfg to client.NewWith as client.Options.TLS.
	cfg, _ := src.ClientTLS("spiffe://example.org/kvfence/receiver")
	tr := &http.Transport{TLSClientConfig: cfg}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://" + l.Addr().String() + "/")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("the server saw %s\n", b)
	// Output: the server saw spiffe://example.org/kvfence/receiver
}
