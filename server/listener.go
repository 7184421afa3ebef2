package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultHandshakeTimeout bounds a TLS handshake when
// ListenerOptions.HandshakeTimeout is zero. A client on a working network
// completes TLS 1.3 in a few round trips; a connection that has not done
// so by then holds a descriptor and a connection slot for nothing.
const DefaultHandshakeTimeout = 5 * time.Second

// Accept backoff: a failed accept, such as one that found the process's
// descriptors exhausted (EMFILE), is retried after a pause that doubles
// from the first to the last value, as net/http does, instead of
// spinning on an error that will not clear at once.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// ListenerOptions configures NewListener.
type ListenerOptions struct {
	// MaxConnections is how many accepted connections may be open at
	// once, counted from accept until the connection is closed. At the
	// cap, the listener stops accepting (without polling) until one
	// closes; new connections wait in the kernel's backlog meanwhile.
	// Required: at least 1.
	MaxConnections int
	// TLS, when set, makes the listener a TLS listener: Accept returns a
	// *tls.Conn only once its handshake has completed, and a connection
	// that has not completed it within HandshakeTimeout of being accepted
	// is closed, however slowly it keeps sending bytes.
	TLS *tls.Config
	// HandshakeTimeout bounds each TLS handshake. Zero means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Logger receives accept failures. Nil means slog.Default().
	Logger *slog.Logger
	// Reserved is how many of the MaxConnections are kept for peers that
	// Privileged admits (administrators), so that workers holding every
	// other connection cannot keep an operator's hold from reaching the
	// receiver: a connection that Privileged does not admit is closed as
	// soon as its handshake completes if MaxConnections-Reserved such
	// connections are open already. It needs TLS and Privileged, and must
	// be below MaxConnections; zero keeps none.
	Reserved int
	// Privileged reports whether a connection whose TLS handshake
	// completed may use the reserved connections (AdminPeers). It decides
	// capacity only: each request is still authenticated and authorised
	// by its handler.
	Privileged func(*tls.ConnectionState) bool
}

// Listener is a net.Listener that caps the connections open at once, backs
// off when accepting fails, and, for TLS, completes each handshake within a
// deadline before handing the connection on (docs/design.md §12). A server
// whose peers may be hostile needs all three: each connection costs a file
// descriptor, and descriptors that idle connections take are then missing
// where the receiver needs them, to write its anchor and to answer the
// admin socket.
//
// Accept never returns a connection beyond the cap; its Close releases the
// slot. Close closes the underlying listener and every connection still in
// its handshake or not yet returned by Accept.
type Listener struct {
	inner   net.Listener
	tls     *tls.Config
	timeout time.Duration
	log     *slog.Logger

	open   atomic.Int64
	slots  chan struct{}         // one element per open connection
	ready  chan net.Conn         // connections ready for Accept
	closed chan struct{}         // closed by Close
	failed chan struct{}         // closed when the inner listener fails for good
	once   sync.Once             // closes closed
	mu     sync.Mutex            // guards err and pending
	err    error                 // why the inner listener failed
	pend   map[net.Conn]struct{} // connections not yet returned by Accept

	// others counts the open connections Privileged did not admit, at
	// most cap(slots)-reserved; privileged is nil without a reserve.
	others     atomic.Int64
	reserved   int
	privileged func(*tls.ConnectionState) bool
}

// NewListener wraps inner, which the Listener owns from then on.
func NewListener(inner net.Listener, opts ListenerOptions) (*Listener, error) {
	if opts.MaxConnections < 1 {
		return nil, errors.New("server: ListenerOptions.MaxConnections must be at least 1")
	}
	if opts.Reserved < 0 || opts.Reserved >= opts.MaxConnections || (opts.Reserved > 0 && (opts.TLS == nil || opts.Privileged == nil)) {
		return nil, errors.New("server: ListenerOptions.Reserved must be below MaxConnections, and needs TLS and Privileged")
	}
	l := &Listener{inner: inner, tls: opts.TLS, timeout: opts.HandshakeTimeout, log: opts.Logger, reserved: opts.Reserved,
		slots: make(chan struct{}, opts.MaxConnections), ready: make(chan net.Conn),
		closed: make(chan struct{}), failed: make(chan struct{}), pend: map[net.Conn]struct{}{}}
	if l.timeout <= 0 {
		l.timeout = DefaultHandshakeTimeout
	}
	if opts.Reserved > 0 {
		l.privileged = opts.Privileged
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	go l.acceptLoop()
	return l, nil
}

// Accept returns the next connection: for TLS, one whose handshake has
// completed. After Close it returns net.ErrClosed; after the underlying
// listener failed, its error.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		l.mu.Lock()
		delete(l.pend, c)
		l.mu.Unlock()
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-l.failed:
		l.mu.Lock()
		defer l.mu.Unlock()
		return nil, l.err
	}
}

// Close stops accepting and closes every connection not yet returned by
// Accept. Connections already returned are their server's to close.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.closed)
		err = l.inner.Close()
		l.mu.Lock()
		for c := range l.pend {
			c.Close()
		}
		l.mu.Unlock()
	})
	return err
}

// Addr returns the underlying listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// Open returns how many accepted connections are open.
func (l *Listener) Open() int { return int(l.open.Load()) }

// acceptLoop takes a slot, then accepts, for as long as the listener is
// open: at the cap it waits on the channel, not on a timer.
func (l *Listener) acceptLoop() {
	var delay time.Duration
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.closed:
			return
		}
		c, err := l.inner.Accept()
		if err != nil {
			<-l.slots
			select {
			case <-l.closed:
				return
			default:
			}
			// Temporary is deprecated for being vague, but on accept it
			// is exactly what net/http retries: EMFILE, ENFILE, and an
			// aborted or reset connection.
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Temporary() {
				l.mu.Lock()
				l.err = err
				l.mu.Unlock()
				close(l.failed)
				return
			}
			delay = min(max(2*delay, acceptBackoffMin), acceptBackoffMax)
			l.log.Warn("accepting a connection failed; retrying", "addr", l.inner.Addr().String(), "error", err,
				"retry_in", delay)
			select {
			case <-time.After(delay):
			case <-l.closed:
				return
			}
			continue
		}
		delay = 0
		l.open.Add(1)
		sc := &slotConn{Conn: c, l: l}
		if !l.track(sc) {
			sc.Close()
			return
		}
		if l.tls == nil {
			go l.deliver(sc)
			continue
		}
		go l.handshake(sc)
	}
}

// track records c as pending, unless the listener is closed.
func (l *Listener) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.closed:
		return false
	default:
	}
	l.pend[c] = struct{}{}
	return true
}

// handshake completes c's TLS handshake within the timeout, whose
// deadline is absolute from accept, so trickled bytes do not extend it.
func (l *Listener) handshake(c *slotConn) {
	deadline := time.Now().Add(l.timeout)
	c.SetDeadline(deadline)
	tc := tls.Server(c, l.tls)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	err := tc.HandshakeContext(ctx)
	cancel()
	l.mu.Lock()
	delete(l.pend, c)
	l.mu.Unlock()
	if err != nil {
		l.log.Debug("TLS handshake failed", "remote", c.RemoteAddr().String(), "error", err)
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			// As net/http answers a plain HTTP request on its TLS port.
			re.Conn.Write([]byte("HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"))
		}
		tc.Close()
		return
	}
	c.SetDeadline(time.Time{})
	if !l.admit(c, tc) {
		tc.Close()
		return
	}
	if !l.track(tc) {
		tc.Close()
		return
	}
	l.deliver(tc)
}

// admit decides whether a connection whose handshake completed may stay:
// one that Privileged admits always may; another only while fewer than
// cap(slots)-reserved others are open, and it then counts among them
// until it closes.
func (l *Listener) admit(c *slotConn, tc *tls.Conn) bool {
	if l.privileged == nil {
		return true
	}
	cs := tc.ConnectionState()
	if l.privileged(&cs) {
		return true
	}
	if l.others.Add(1) > int64(cap(l.slots)-l.reserved) {
		l.others.Add(-1)
		l.log.Warn("refused a connection: the connections left are reserved for administrators",
			"remote", c.RemoteAddr().String(), "reserved", l.reserved)
		return false
	}
	c.other.Store(true)
	return true
}

// Others returns how many open connections Privileged did not admit
// (zero without a reserve).
func (l *Listener) Others() int { return int(l.others.Load()) }

// deliver hands c to Accept, or closes it if the listener closes first.
func (l *Listener) deliver(c net.Conn) {
	select {
	case l.ready <- c:
	case <-l.closed:
		l.mu.Lock()
		delete(l.pend, c)
		l.mu.Unlock()
		c.Close()
	}
}

// slotConn is an accepted connection that frees its slot when closed.
type slotConn struct {
	net.Conn
	l    *Listener
	once sync.Once
	// other marks a connection counted in Listener.others.
	other atomic.Bool
}

// Close closes the connection and frees its slot, once.
func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.other.Load() {
			c.l.others.Add(-1)
		}
		c.l.open.Add(-1)
		<-c.l.slots
	})
	return err
}

// looksLikeHTTP reports whether a TLS record header is the start of a
// plain HTTP request.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// NetConn returns the accepted connection, as tls.Conn.NetConn does, so
// that peer credentials can be read from the socket underneath.
func (c *slotConn) NetConn() net.Conn { return c.Conn }
