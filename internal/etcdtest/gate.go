package etcdtest

import (
	"bufio"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// gate is a TCP proxy in front of one member's peer listener that can cut
// members off in both directions. etcd's peers dial each other's
// advertised URL, and a member also sends over connections it dialed
// itself (its pipeline), so black-holing the connections to a member is
// not enough: the gate also refuses connections that come from a member
// that is cut off, known by the X-Server-From header that etcd's peer
// transport puts on its requests.
type gate struct {
	ln net.Listener
	to string

	mu sync.Mutex
	// isolated cuts every connection to this gate's member; cut holds the
	// member IDs whose connections to it are cut.
	isolated bool
	cut      map[string]bool
	conns    map[*gateConn]bool
	closed   bool
}

// gateConn is one proxied connection and the member it came from ("" if
// its request did not say).
type gateConn struct {
	from      string
	down, up  net.Conn
	closeOnce sync.Once
}

func (c *gateConn) close() {
	c.closeOnce.Do(func() {
		c.down.Close()
		if c.up != nil {
			c.up.Close()
		}
	})
}

// newGate listens on a free loopback port and forwards to the address to.
func newGate(to string) (*gate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &gate{ln: ln, to: to, cut: map[string]bool{}, conns: map[*gateConn]bool{}}
	go g.serve()
	return g, nil
}

// url is the gate's address as a peer URL.
func (g *gate) url() string { return "http://" + g.ln.Addr().String() }

func (g *gate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		go g.handle(c)
	}
}

// blocked reports whether a connection from the member from may pass;
// the caller holds mu.
func (g *gate) blocked(from string) bool {
	return g.closed || g.isolated || from != "" && g.cut[from]
}

// handle reads the head of the connection's first request to learn where
// it comes from, then copies bytes both ways until either side closes or
// the gate cuts it.
func (g *gate) handle(down net.Conn) {
	br := bufio.NewReader(down)
	down.SetReadDeadline(time.Now().Add(10 * time.Second))
	var head strings.Builder
	from := ""
	for head.Len() < 64<<10 {
		line, err := br.ReadString('\n')
		if err != nil {
			down.Close()
			return
		}
		head.WriteString(line)
		if name, value, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(name), "X-Server-From") {
			from = strings.TrimSpace(value)
		}
		if line == "\r\n" || line == "\n" {
			break
		}
	}
	down.SetReadDeadline(time.Time{})
	c := &gateConn{from: from, down: down}
	g.mu.Lock()
	if g.blocked(from) {
		g.mu.Unlock()
		down.Close()
		return
	}
	g.conns[c] = true
	g.mu.Unlock()
	defer func() {
		c.close()
		g.mu.Lock()
		delete(g.conns, c)
		g.mu.Unlock()
	}()
	up, err := net.DialTimeout("tcp", g.to, 5*time.Second)
	if err != nil {
		return
	}
	g.mu.Lock()
	c.up = up
	cut := g.blocked(from)
	g.mu.Unlock()
	if cut {
		up.Close()
		return
	}
	if _, err := io.WriteString(up, head.String()); err != nil {
		return
	}
	go func() {
		io.Copy(up, br)
		c.close()
	}()
	io.Copy(down, up)
}

// set changes what the gate cuts and closes the connections it now
// refuses.
func (g *gate) set(fn func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fn()
	for c := range g.conns {
		if g.blocked(c.from) {
			c.close()
		}
	}
}

// close stops the gate and every connection through it.
func (g *gate) close() {
	g.set(func() { g.closed = true })
	g.ln.Close()
}
