package server_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/server"
)

// Ensure that the default cap leaves DescriptorReserve descriptors below
// the limit, at most MaxConnectionsCeiling, and that a chosen cap that
// would eat into the reserve is refused.
func TestConnectionLimits(t *testing.T) {
	for _, tc := range []struct {
		limit uint64
		want  int // 0: an error
	}{
		{4096, 4096 - server.DescriptorReserve},
		{1024, 1024 - server.DescriptorReserve},
		{1 << 20, server.MaxConnectionsCeiling},
		{^uint64(0), server.MaxConnectionsCeiling},
		{server.DescriptorReserve + 16, 16},
		{server.DescriptorReserve + 15, 0},
		{64, 0},
	} {
		got, err := server.DefaultMaxConnections(tc.limit)
		if got != tc.want || (tc.want == 0) != errors.Is(err, server.ErrConnectionLimit) {
			t.Errorf("DefaultMaxConnections(%d) = %d, %v; want %d", tc.limit, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		n     int
		limit uint64
		ok    bool
	}{
		{1, 4096, true},
		{4096 - server.DescriptorReserve, 4096, true},
		{4096 - server.DescriptorReserve + 1, 4096, false},
		{10000, 4096, false},
		{0, 4096, false},
		{-1, 4096, false},
		{1, 100, false},
	} {
		err := server.CheckMaxConnections(tc.n, tc.limit)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, server.ErrConnectionLimit)) {
			t.Errorf("CheckMaxConnections(%d, %d) = %v, want ok %v", tc.n, tc.limit, err, tc.ok)
		}
	}
}

// Ensure that workers who hold every connection they may cannot keep an
// administrator out: with connections reserved for administrators, a
// worker's connection beyond the others' share is closed after its
// handshake, and an administrator's is accepted while the workers' slots
// are full. Without the reserve the same administrator waits behind the
// workers, which is what the reserve is for.
func TestListener_ReservesConnectionsForAdmins(t *testing.T) {
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := pki.Issue(ca, pki.Options{Name: "receiver", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	const admin, worker = "spiffe://example.org/ops/alice", "spiffe://example.org/agent/worker-a"
	clientCfg := func(id string) *tls.Config {
		c, err := pki.Issue(ca, pki.Options{Name: "client", URIs: []string{id}, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{c.TLS()}}
	}
	adminCfg, workerCfg := clientCfg(admin), clientCfg(worker)
	for _, reserved := range []int{1, 0} {
		t.Run(fmt.Sprintf("reserved %d", reserved), func(t *testing.T) {
			opts := server.ListenerOptions{MaxConnections: 3, Logger: slog.New(slog.DiscardHandler),
				TLS: &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{srvCert.TLS()},
					ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}}
			if reserved > 0 {
				opts.Reserved, opts.Privileged = reserved, server.AdminPeers([]string{admin}, "")
			}
			l := listen(t, opts)
			// At the cap the listener does not accept, so a handshake
			// there waits in the backlog: dials give up after a while.
			tryDial := func(cfg *tls.Config) (*tls.Conn, error) {
				c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second, Deadline: time.Now().Add(2 * time.Second)}, "tcp", l.Addr().String(), cfg)
				if err == nil {
					t.Cleanup(func() { c.Close() })
				}
				return c, err
			}
			dial := func(cfg *tls.Config) *tls.Conn {
				c, err := tryDial(cfg)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			accept := func() net.Conn {
				select {
				case c := <-acceptAsync(l):
					t.Cleanup(func() { c.Close() })
					return c
				case <-time.After(2 * time.Second):
					return nil
				}
			}
			// The workers fill every connection they may have.
			for i := range 3 - reserved {
				dial(workerCfg)
				if accept() == nil {
					t.Fatalf("worker connection %d was not accepted", i+1)
				}
			}
			if reserved > 0 {
				// One more worker is closed once its handshake is done.
				extra := dial(workerCfg)
				extra.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := extra.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("a worker beyond the others' share was kept: read %v", err)
				}
				if n := l.Others(); n != 3-reserved {
					t.Fatalf("Others() = %d, want %d", n, 3-reserved)
				}
			}
			var got net.Conn
			if _, err := tryDial(adminCfg); err == nil {
				got = accept()
			}
			if reserved > 0 && got == nil {
				t.Fatal("an administrator's connection was not accepted while the workers' slots were full")
			}
			if reserved == 0 && got != nil {
				t.Fatal("without a reserve an administrator got past workers holding every connection; the test shows nothing")
			}
		})
	}
	for _, tc := range []server.ListenerOptions{
		{MaxConnections: 4, Reserved: 4, TLS: &tls.Config{}, Privileged: func(*tls.ConnectionState) bool { return true }},
		{MaxConnections: 4, Reserved: 1, TLS: &tls.Config{}},
		{MaxConnections: 4, Reserved: 1, Privileged: func(*tls.ConnectionState) bool { return true }},
		{MaxConnections: 4, Reserved: -1},
	} {
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if l, err := server.NewListener(inner, tc); err == nil {
			l.Close()
			t.Errorf("options %+v were accepted", tc)
		} else {
			inner.Close()
		}
	}
}

// Ensure that AdminReserve keeps AdminConnectionReserve connections, at
// most a quarter of the cap.
func TestAdminReserve(t *testing.T) {
	for _, tc := range []struct{ conns, want int }{
		{4096, server.AdminConnectionReserve}, {64, server.AdminConnectionReserve}, {16, 4}, {3, 0}, {1, 0},
	} {
		if got := server.AdminReserve(tc.conns); got != tc.want {
			t.Errorf("AdminReserve(%d) = %d, want %d", tc.conns, got, tc.want)
		}
	}
}
