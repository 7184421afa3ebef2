package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// httpsExecutor is the SPIFFE ID of the bench worker's client certificate,
// which the served receiver takes as the caller.
const httpsExecutor = "spiffe://bench.example/worker"

// httpsCell is kvfence_submit through the served receiver: each operation
// is client.Submit over loopback TLS 1.3 with a client certificate, to a
// server.Handler over the same durable receiver, with connections reused.
// The difference from kvfence_submit is what serving costs: TLS, HTTP,
// the handler and the client, on the same fenced write.
type httpsCell struct {
	*submitCell
	// h is the handler over the receiver as currently opened: setup
	// reopens it, and the listener keeps serving across that.
	h   atomic.Pointer[server.Handler]
	srv *http.Server
	cl  *client.Client
}

func openSubmitHTTPS(ctx context.Context, dir string, writers int) (cell, error) {
	sc, err := openSubmit(ctx, dir, writers)
	if err != nil {
		return nil, err
	}
	c := &httpsCell{submitCell: sc.(*submitCell)}
	c.submitCell.executor = httpsExecutor
	if err := c.listen(); err != nil {
		c.submitCell.close()
		return nil, err
	}
	return c, nil
}

// listen starts the TLS server and the client, with certificates made for
// this run.
func (c *httpsCell) listen() error {
	ca, err := pki.NewCA("bench CA", time.Hour)
	if err != nil {
		return err
	}
	srvCert, err := pki.Issue(ca, pki.Options{Name: "bench receiver", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		return err
	}
	cliCert, err := pki.Issue(ca, pki.Options{Name: "bench worker", URIs: []string{httpsExecutor}, Client: true})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	c.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.h.Load().ServeHTTP(w, r) }),
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{srvCert.TLS()},
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()},
		ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
		// As kvfence serve sets it: what the handler keeps per connection
		// lives there.
		ConnContext: server.ConnContext,
	}
	if err := c.rebind(); err != nil {
		l.Close()
		return err
	}
	go c.srv.ServeTLS(l, "", "")
	c.cl, err = client.New("https://"+l.Addr().String(), &tls.Config{MinVersion: tls.VersionTLS13,
		RootCAs: ca.Pool(), Certificates: []tls.Certificate{cliCert.TLS()}})
	return err
}

// rebind points the handler at the receiver as currently opened.
func (c *httpsCell) rebind() error {
	h, err := server.New(server.Options{Receiver: c.f.r, Authenticator: server.SPIFFECertificate{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	c.h.Store(h)
	return nil
}

func (c *httpsCell) prepare(ctx context.Context, from, n int64) error {
	if err := c.submitCell.prepare(ctx, from, n); err != nil {
		return err
	}
	return c.rebind()
}

func (c *httpsCell) op(ctx context.Context, _ int, i int64) error {
	k := i - c.base
	env := c.envs[k]
	c.envs[k] = nil
	res, err := c.cl.Submit(ctx, env)
	if err != nil {
		return err
	}
	if res.Outcome != kvfence.Applied {
		return fmt.Errorf("operation %d: %s %s: %s", i, res.Outcome, res.Reason, res.Detail)
	}
	return nil
}

func (c *httpsCell) close() error {
	c.cl.Close()
	err := c.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, c.submitCell.close())
}
