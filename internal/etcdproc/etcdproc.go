package etcdproc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/etcdbin"
)

// Timeouts for a cluster to become healthy. A loaded 2-core machine takes
// seconds to hold its first election; these leave room for that and still
// end a hung test.
const (
	startTimeout   = 60 * time.Second
	restartTimeout = 30 * time.Second
	// startTries bounds the retries of a start that lost a port to
	// another process between picking it and binding it.
	startTries = 3
)

// Options configures StartWith.
type Options struct {
	// Members is the number of members; 0 means 3.
	Members int
	// ClientTLS, if not nil, makes the members serve clients over TLS
	// only, and require a client certificate that its CA signed.
	ClientTLS *TLSFiles
}

// TLSFiles names PEM files: a certificate, its key and a CA.
type TLSFiles struct {
	// CertFile and KeyFile are the member's server certificate and key;
	// the certificate must be valid for 127.0.0.1.
	CertFile, KeyFile string
	// CAFile holds the CA that client certificates must chain to.
	CAFile string
}

// Cluster is a running etcd cluster of standalone processes.
type Cluster struct {
	t       testing.TB
	bin     string
	dir     string
	opts    Options
	members []*Member
	// Ready is how long the cluster took from the first process start to
	// every member healthy.
	Ready time.Duration
}

// Member is one etcd process of a Cluster.
type Member struct {
	c *Cluster
	// Name is the member's name in the cluster.
	Name string
	// Client is the member's client address, HOST:PORT.
	Client string
	// Peer is the member's peer address, HOST:PORT.
	Peer string
	// Metrics is the member's plain-HTTP address for /health and
	// /metrics, HOST:PORT, served without TLS even when clients need it.
	Metrics string
	dataDir string
	logPath string

	mu   sync.Mutex
	proc *process // nil while the member is stopped
}

// process is one run of a member's binary.
type process struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed once the process has been waited for
	err  error         // the wait's result, set before done is closed
}

// Start starts a cluster of n members (at least 1) and waits until every
// member answers healthy; it fails t if it cannot. The cluster is stopped
// when t ends.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartWith(t, &Options{Members: n})
}

// StartWith is Start with options; nil means a cluster of 3 members
// serving plain text.
func StartWith(t testing.TB, opts *Options) *Cluster {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Members == 0 {
		o.Members = 3
	}
	n := o.Members
	if n < 1 {
		t.Fatalf("etcdproc: a cluster of %d members", n)
	}
	bin, err := etcdbin.Binary()
	if err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for try := 1; try <= startTries; try++ {
		c := &Cluster{t: t, bin: bin, dir: t.TempDir(), opts: o}
		t.Cleanup(c.Stop)
		if lastErr = c.start(n); lastErr == nil {
			t.Logf("etcdproc: %d-member etcd cluster ready in %v (%s)", n, c.Ready.Round(time.Millisecond), strings.Join(c.Endpoints(), ","))
			return c
		}
		c.Stop()
		c.logTails()
		if !errors.Is(lastErr, errExited) {
			break
		}
		// A member exited at start: most often a port taken in between.
	}
	t.Fatalf("etcdproc: starting %d etcd members: %v", n, lastErr)
	return nil
}

// errExited means a member's process ended while it was expected to run.
var errExited = errors.New("etcd process exited")

func (c *Cluster) start(n int) error {
	ports, err := freePorts(3 * n)
	if err != nil {
		return err
	}
	var initial []string
	for i := range n {
		m := &Member{
			c:       c,
			Name:    "m" + strconv.Itoa(i),
			Client:  "127.0.0.1:" + strconv.Itoa(ports[3*i]),
			Peer:    "127.0.0.1:" + strconv.Itoa(ports[3*i+1]),
			Metrics: "127.0.0.1:" + strconv.Itoa(ports[3*i+2]),
			dataDir: filepath.Join(c.dir, "m"+strconv.Itoa(i)+".etcd"),
			logPath: filepath.Join(c.dir, "m"+strconv.Itoa(i)+".log"),
		}
		c.members = append(c.members, m)
		initial = append(initial, m.Name+"=http://"+m.Peer)
	}
	began := time.Now()
	for _, m := range c.members {
		if err := m.launch(strings.Join(initial, ",")); err != nil {
			return err
		}
	}
	if err := c.waitHealthy(c.members, startTimeout); err != nil {
		return err
	}
	c.Ready = time.Since(began)
	return nil
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago: all are held open together so that none is handed out twice.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("etcdproc: finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// args are the member's flags. On a restart etcd finds its data directory
// and ignores the initial-cluster flags.
func (m *Member) args(initial string) []string {
	scheme := "http://"
	var tlsArgs []string
	if f := m.c.opts.ClientTLS; f != nil {
		scheme = "https://"
		tlsArgs = []string{"--cert-file", f.CertFile, "--key-file", f.KeyFile, "--trusted-ca-file", f.CAFile, "--client-cert-auth"}
	}
	return append([]string{
		"--name", m.Name,
		"--data-dir", m.dataDir,
		"--listen-client-urls", scheme + m.Client,
		"--advertise-client-urls", scheme + m.Client,
		"--listen-metrics-urls", "http://" + m.Metrics,
		"--listen-peer-urls", "http://" + m.Peer,
		"--initial-advertise-peer-urls", "http://" + m.Peer,
		"--initial-cluster", initial,
		"--initial-cluster-state", "new",
		"--initial-cluster-token", "etcdproc-" + filepath.Base(m.c.dir),
		"--logger", "zap",
		"--log-outputs", "stderr",
	}, tlsArgs...)
}

// initialCluster returns the --initial-cluster value of m's cluster.
func (c *Cluster) initialCluster() string {
	var s []string
	for _, m := range c.members {
		s = append(s, m.Name+"=http://"+m.Peer)
	}
	return strings.Join(s, ",")
}

func (m *Member) launch(initial string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		return fmt.Errorf("etcdproc: member %s is already running", m.Name)
	}
	log, err := os.OpenFile(m.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("etcdproc: %w", err)
	}
	fmt.Fprintf(log, "=== etcdproc: starting %s at %s\n", m.Name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := etcdbin.Cmd(m.c.bin, m.args(initial)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("etcdproc: starting %s: %w", m.Name, err)
	}
	p := &process{cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	m.proc = p
	return nil
}

// Endpoints returns every member's client address, HOST:PORT; the scheme
// is https if the cluster was started with ClientTLS, else http.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.Client
	}
	return eps
}

// Members returns the members in start order.
func (c *Cluster) Members() []*Member { return c.members }

// Member returns the i-th member.
func (c *Cluster) Member(i int) *Member { return c.members[i] }

// Stop kills every member and waits for each process to end. It is safe to
// call more than once, and runs at the test's end.
func (c *Cluster) Stop() {
	for _, m := range c.members {
		if err := m.kill(); err != nil {
			c.t.Errorf("etcdproc: stopping %s: %v", m.Name, err)
		}
	}
	if c.t.Failed() {
		c.logTails()
	}
}

// Kill sends the member SIGKILL, as a machine losing power, and waits for
// the process to end; it fails the test if it cannot.
func (m *Member) Kill() {
	m.c.t.Helper()
	if err := m.kill(); err != nil {
		m.c.t.Fatalf("etcdproc: killing %s: %v", m.Name, err)
	}
}

func (m *Member) kill() error {
	m.mu.Lock()
	p := m.proc
	m.proc = nil
	m.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("pid %d still running 10s after SIGKILL", p.cmd.Process.Pid)
	}
}

// Restart starts a killed member again on its data directory and ports
// and waits until it answers healthy; it fails the test if it cannot.
func (m *Member) Restart() {
	m.c.t.Helper()
	if err := m.launch(m.c.initialCluster()); err != nil {
		m.c.t.Fatal(err)
	}
	if err := m.c.waitHealthy([]*Member{m}, restartTimeout); err != nil {
		m.c.t.Fatalf("etcdproc: restarting %s: %v", m.Name, err)
	}
}

// KillAll sends every member SIGKILL at once, as a power loss of the whole
// cluster would, and waits for the processes to end.
func (c *Cluster) KillAll() {
	c.t.Helper()
	for _, m := range c.members {
		m.mu.Lock()
		if m.proc != nil {
			m.proc.cmd.Process.Signal(syscall.SIGKILL)
		}
		m.mu.Unlock()
	}
	for _, m := range c.members {
		m.Kill()
	}
}

// RestartAll starts every stopped member again and waits until all of
// them answer healthy. Members must start together when fewer than a
// majority run: none is healthy before a majority is back.
func (c *Cluster) RestartAll() {
	c.t.Helper()
	var started []*Member
	for _, m := range c.members {
		if m.Running() {
			continue
		}
		if err := m.launch(c.initialCluster()); err != nil {
			c.t.Fatal(err)
		}
		started = append(started, m)
	}
	if err := c.waitHealthy(started, restartTimeout); err != nil {
		c.t.Fatalf("etcdproc: restarting: %v", err)
	}
}

// Leader returns the member that reports itself leader (the
// etcd_server_is_leader metric), or nil if no running member does.
func (c *Cluster) Leader() *Member {
	hc := &http.Client{Timeout: 2 * time.Second}
	for _, m := range c.members {
		if m.Running() && isLeader(hc, m.Metrics) {
			return m
		}
	}
	return nil
}

func isLeader(hc *http.Client, addr string) bool {
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if sc.Text() == "etcd_server_is_leader 1" {
			return true
		}
	}
	return false
}

// Running reports whether the member's process runs.
func (m *Member) Running() bool {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Pid returns the member's process id, or 0 if it is stopped.
func (m *Member) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return 0
	}
	return m.proc.cmd.Process.Pid
}

// waitHealthy polls each member's /health endpoint until it reports
// healthy: the member has a leader and can serve a read through it.
func (c *Cluster) waitHealthy(ms []*Member, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 2 * time.Second}
	for _, m := range ms {
		for {
			m.mu.Lock()
			p := m.proc
			m.mu.Unlock()
			if p == nil {
				return fmt.Errorf("member %s is not running", m.Name)
			}
			select {
			case <-p.done:
				return fmt.Errorf("member %s: %w: %v (log %s)", m.Name, errExited, p.err, m.logPath)
			default:
			}
			if healthy(hc, m.Metrics) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("member %s not healthy after %v (log %s)", m.Name, timeout, m.logPath)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

func healthy(hc *http.Client, addr string) bool {
	resp, err := hc.Get("http://" + addr + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"health":"true"`))
}

// logTails logs the end of each member's log, for a failed test.
func (c *Cluster) logTails() {
	for _, m := range c.members {
		c.t.Logf("etcdproc: last lines of %s:\n%s", m.logPath, tail(m.logPath, 10))
	}
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
