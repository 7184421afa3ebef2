package server_test

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/server"
)

// listen returns a capped listener on loopback.
func listen(t *testing.T, opts server.ListenerOptions) *server.Listener {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := server.NewListener(inner, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// acceptAsync accepts in the background.
func acceptAsync(l net.Listener) <-chan net.Conn {
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			ch <- c
		}
	}()
	return ch
}

// Ensure that the listener never has more connections open than its cap:
// at the cap, Accept returns nothing until one is closed, and then the
// waiting connection.
func TestListener_CapHoldsAcceptUntilAClose(t *testing.T) {
	l := listen(t, server.ListenerOptions{MaxConnections: 2})
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	var got []net.Conn
	for range 2 {
		select {
		case c := <-acceptAsync(l):
			got = append(got, c)
		case <-time.After(5 * time.Second):
			t.Fatal("Accept below the cap did not return")
		}
	}
	third := acceptAsync(l)
	select {
	case <-third:
		t.Fatal("Accept returned a third connection beyond the cap of 2")
	case <-time.After(300 * time.Millisecond):
	}
	if n := l.Open(); n != 2 {
		t.Fatalf("Open() = %d, want 2", n)
	}
	got[0].Close()
	got[0].Close() // a second Close frees nothing more
	select {
	case c := <-third:
		defer c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return after a connection closed")
	}
	if n := l.Open(); n != 2 {
		t.Fatalf("Open() = %d, want 2", n)
	}
}

// Ensure that a TLS connection that has not completed its handshake by
// the deadline is closed, whether it sends nothing or trickles bytes to
// keep it alive, that its slot is freed, and that Accept never returns it.
func TestListener_HandshakeDeadline(t *testing.T) {
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.Issue(ca, pki.Options{Name: "receiver", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 400 * time.Millisecond
	l := listen(t, server.ListenerOptions{MaxConnections: 4, HandshakeTimeout: timeout,
		TLS: &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert.TLS()}}})
	accepted := acceptAsync(l)
	for _, tc := range []struct {
		name    string
		trickle bool
	}{{"silent", false}, {"trickling", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			if tc.trickle {
				// A ClientHello's record header, one byte at a time.
				go func() {
					for _, b := range []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03} {
						if _, err := c.Write([]byte{b}); err != nil {
							return
						}
						time.Sleep(timeout / 8)
					}
				}()
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = io.Copy(io.Discard, c)
			if took := time.Since(start); err != nil || took > timeout+2*time.Second {
				t.Fatalf("the server closed the connection after %v (%v), want about %v", took, err, timeout)
			}
		})
	}
	for deadline := time.Now().Add(5 * time.Second); l.Open() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Open() = %d after the handshakes failed, want 0", l.Open())
		}
	}
	select {
	case c := <-accepted:
		t.Fatalf("Accept returned a connection whose handshake failed: %v", c.RemoteAddr())
	default:
	}
}

// fakeListener fails Accept with errs, in turn, then blocks until closed.
type fakeListener struct {
	errs   []error
	calls  atomic.Int32
	closed chan struct{}
}

func (f *fakeListener) Accept() (net.Conn, error) {
	n := int(f.calls.Add(1))
	if n <= len(f.errs) {
		return nil, f.errs[n-1]
	}
	<-f.closed
	return nil, net.ErrClosed
}

func (f *fakeListener) Close() error   { close(f.closed); return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

// Ensure that accept failures that may clear (EMFILE) are retried with a
// growing pause, not in a tight loop, and that any other failure ends
// Accept with its error.
func TestListener_AcceptErrors(t *testing.T) {
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	f := &fakeListener{closed: make(chan struct{})}
	for range 1000 {
		f.errs = append(f.errs, emfile)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	l, err := server.NewListener(f, server.ListenerOptions{MaxConnections: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	// 5, 10, 20, 40, 80, 160 ms of pauses fit in 500 ms: about 7 calls, not
	// hundreds.
	if n := f.calls.Load(); n < 2 || n > 12 {
		t.Fatalf("%d accept calls in 500ms of EMFILE, want a few with backoff", n)
	}
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}

	fatal := errors.New("listener broken")
	f = &fakeListener{closed: make(chan struct{}), errs: []error{emfile, fatal}}
	l, err = server.NewListener(f, server.ListenerOptions{MaxConnections: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Accept(); !errors.Is(err, fatal) {
		t.Fatalf("Accept: %v, want the listener's own error", err)
	}
}
