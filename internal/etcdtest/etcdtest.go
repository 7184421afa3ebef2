// Package etcdtest starts etcd members for tests: one member, or a cluster
// on loopback whose members can be hard-stopped and partitioned. Each
// member is a process of the etcd binary that etcdproc builds once, so a
// test binary links only etcd's client, and its race detector does not
// instrument etcd's server.
package etcdtest

import (
	"bytes"
	"context"
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
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/etcdbin"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ReadyTimeout bounds how long a member or a cluster may take to be ready:
// a three-member cluster on a machine at load 20 took more than 20 s to
// publish its members.
const ReadyTimeout = 60 * time.Second

// errExited means a member's process ended while it was expected to run:
// most often a port that another process took between its choice and the
// listen.
var errExited = errors.New("etcdtest: etcd process exited")

// Member is one etcd member, a process of its own.
type Member struct {
	// Name is the member's name in the cluster.
	Name string
	// ClientURL is where clients reach the member.
	ClientURL string
	// peerURL is where the member listens for peers; advertised is where
	// peers reach it, through its gate when the cluster has gates.
	peerURL, advertised string
	gate                *gate
	// id is the member's ID in hex, as etcd's peers name it, known once
	// it is ready.
	id      string
	logPath string
	c       *Cluster

	mu   sync.Mutex
	proc *process // nil once stopped
}

// process is one run of a member's binary.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been waited for
	err  error         // the wait's result, set before done is closed
}

// Cluster is a set of members, each a process of the etcd binary.
type Cluster struct {
	// Members are the cluster's members, in the order they were made.
	Members []*Member
	// Ready is how long the cluster took from the first start to ready.
	Ready time.Duration
	// cli reaches every member, for their status.
	cli *clientv3.Client
}

// freeURLs returns n loopback URLs on ports that were free a moment ago,
// all different: each port stays taken until all are chosen.
func freeURLs(n int) ([]string, error) {
	var urls []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		urls = append(urls, "http://"+l.Addr().String())
	}
	return urls, nil
}

// Config describes a cluster to start.
type Config struct {
	// Members is the number of members; 0 means 1.
	Members int
	// Gates puts a proxy in front of each member's peer listener, through
	// which Partition cuts members off.
	Gates bool
	// Fsync makes the members sync their log and database to disk, as a
	// real member does; without it (--unsafe-no-fsync) a test runs faster.
	Fsync bool
	// MaxTxnOps is the members' --max-txn-ops; 0 means etcd's default.
	MaxTxnOps uint
	// QuotaBackendBytes is the members' --quota-backend-bytes, the size
	// past which a member refuses writes; 0 means etcd's default (2 GiB),
	// which a large benchmark outgrows.
	QuotaBackendBytes int64
}

// launchAttempts bounds the launches of one NewCluster.
const launchAttempts = 4

// firstLine returns err's message up to its first line break.
func firstLine(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

// Start starts a single-member cluster in t.TempDir and stops it when the
// test ends.
func Start(t testing.TB) *Cluster {
	t.Helper()
	return NewCluster(t, Config{})
}

// NewCluster starts a cluster on loopback with random ports in t.TempDir
// and stops it when the test ends.
func NewCluster(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	c, err := Launch(t.TempDir(), cfg)
	// A member that exited at its start found a port taken between its
	// choice and the listen (by any process's outgoing connection, which
	// the kernel gives a port from the same range, more often while
	// tests run in parallel): choose again, a few times.
	for attempt := 1; attempt < launchAttempts && errors.Is(err, errExited); attempt++ {
		t.Logf("etcdtest: choosing ports again: %v", firstLine(err))
		c, err = Launch(t.TempDir(), cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// NewClusterIn starts a cluster like NewCluster, with each member's data
// in dir/NAME (m0, m1, …): a directory that already holds a member's data,
// such as one Restore made, starts that member from it.
func NewClusterIn(t testing.TB, dir string, cfg Config) *Cluster {
	t.Helper()
	c, err := Launch(dir, cfg)
	// As NewCluster does, but in the same directory, and only for a port
	// taken: etcd listens before it touches its data, so a member that
	// could not listen left dir as it was (a member that failed at its
	// data must not be started on it again).
	for attempt := 1; attempt < launchAttempts && errors.Is(err, errExited) && strings.Contains(err.Error(), "address already in use"); attempt++ {
		t.Logf("etcdtest: choosing ports again: %v", firstLine(err))
		c, err = Launch(dir, cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// Launch starts a cluster with its data under dir, for a caller without a
// test (TestMain), which must call Stop. On Linux the members die with the
// process that launched them even if it never calls Stop.
func Launch(dir string, config Config) (_ *Cluster, err error) {
	bin, err := etcdbin.Binary()
	if err != nil {
		return nil, err
	}
	n, gates := max(config.Members, 1), config.Gates
	c := &Cluster{}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	var initial []string
	urls, err := freeURLs(2 * n)
	if err != nil {
		return nil, err
	}
	for i := range n {
		m := &Member{Name: fmt.Sprintf("m%d", i), ClientURL: urls[2*i], peerURL: urls[2*i+1], c: c}
		m.logPath = filepath.Join(dir, m.Name+".log")
		m.advertised = m.peerURL
		if gates {
			if m.gate, err = newGate(strings.TrimPrefix(m.peerURL, "http://")); err != nil {
				return nil, err
			}
			m.advertised = m.gate.url()
		}
		initial = append(initial, m.Name+"="+m.advertised)
		c.Members = append(c.Members, m)
	}
	// One token for the whole cluster, new for each, so that members of
	// two clusters never join each other.
	token := fmt.Sprintf("etcdtest-%d", time.Now().UnixNano())
	start := time.Now()
	for _, m := range c.Members {
		args := []string{
			"--name", m.Name,
			"--data-dir", filepath.Join(dir, m.Name),
			"--listen-client-urls", m.ClientURL,
			"--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.peerURL,
			"--initial-advertise-peer-urls", m.advertised,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-token", token,
			"--initial-cluster-state", "new",
			// Fast elections: a lost leader is replaced in a fraction
			// of a second, as a test needs.
			"--heartbeat-interval", "10",
			"--election-timeout", "100",
			"--logger", "zap",
			"--log-outputs", "stderr",
			"--log-level", "warn",
			// The tests' etcd users need no strength against guessing:
			// bcrypt's least cost makes each user add and each login
			// cheap, so that auth tests hold up on a loaded machine.
			"--bcrypt-cost", "4",
		}
		if !config.Fsync {
			args = append(args, "--unsafe-no-fsync")
		}
		if config.MaxTxnOps > 0 {
			args = append(args, "--max-txn-ops", strconv.FormatUint(uint64(config.MaxTxnOps), 10))
		}
		if config.QuotaBackendBytes > 0 {
			args = append(args, "--quota-backend-bytes", strconv.FormatInt(config.QuotaBackendBytes, 10))
		}
		if err := m.launch(bin, args); err != nil {
			return nil, err
		}
	}
	if c.cli, err = clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); err != nil {
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	deadline := time.Now().Add(ReadyTimeout)
	for _, m := range c.Members {
		if err := m.waitReady(deadline); err != nil {
			return nil, err
		}
	}
	c.Ready = time.Since(start)
	return c, nil
}

// launch starts the member's process, its output appended to its log.
func (m *Member) launch(bin string, args []string) error {
	log, err := os.OpenFile(m.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("etcdtest: %w", err)
	}
	cmd := etcdbin.Cmd(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("etcdtest: start %s: %w", m.Name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	m.mu.Lock()
	m.proc = p
	m.mu.Unlock()
	return nil
}

// waitReady waits, at a launch, until the member answers healthy (it has
// a leader and serves a read) and learns its ID; it fails at deadline, or
// with errExited once any member of the cluster has exited.
func (m *Member) waitReady(deadline time.Time) error {
	hc := &http.Client{Timeout: time.Second}
	for {
		m.mu.Lock()
		p := m.proc
		m.mu.Unlock()
		if p == nil {
			return fmt.Errorf("etcdtest: %s is not running", m.Name)
		}
		// Any member that exited is reported, not only this one: this
		// one, waiting for peers that never came up, would only time
		// out, and NewCluster launches again after an exit.
		for _, o := range m.c.Members {
			o.mu.Lock()
			op := o.proc
			o.mu.Unlock()
			if op == nil {
				continue
			}
			select {
			case <-op.done:
				return fmt.Errorf("%w: %s: %v; its log ends:\n%s", errExited, o.Name, op.err, tail(o.logPath, 10))
			default:
			}
		}
		if healthy(hc, m.ClientURL) {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			st, err := m.c.cli.Status(ctx, m.ClientURL)
			cancel()
			if err == nil {
				m.id = strconv.FormatUint(st.Header.MemberId, 16)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcdtest: %s not ready in %v; its log ends:\n%s", m.Name, ReadyTimeout, tail(m.logPath, 10))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// healthy reports whether the member at url answers its /health as
// healthy.
func healthy(hc *http.Client, url string) bool {
	resp, err := hc.Get(url + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"health":"true"`))
}

// tail returns the last n lines of the file at path, for an error.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Stop kills every member's process, waits for it to end, and closes the
// proxies. It is safe to call more than once.
func (c *Cluster) Stop() {
	if c.cli != nil {
		c.cli.Close()
	}
	for _, m := range c.Members {
		m.stop()
		if m.gate != nil {
			m.gate.close()
		}
	}
}

// stop kills the member's process (SIGKILL on Unix), if it runs, and waits
// for it to end.
func (m *Member) stop() {
	m.mu.Lock()
	p := m.proc
	m.proc = nil
	m.mu.Unlock()
	if p == nil {
		return
	}
	p.cmd.Process.Kill()
	<-p.done
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

// IsLeader reports whether the member runs and sees itself as the
// cluster's leader. A member cut off from its peers may still see itself
// leader until it notices that it lost the majority. It may be called from
// any goroutine.
func (m *Member) IsLeader() bool {
	if !m.Running() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := m.c.cli.Status(ctx, m.ClientURL)
	return err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId
}

// Endpoints are the client URLs of every member.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// Client returns a client of every member, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Leader returns the index of the member that a running member sees as
// leader, waiting up to ReadyTimeout for one.
func (c *Cluster) Leader(t testing.TB) int {
	t.Helper()
	deadline := time.Now().Add(ReadyTimeout)
	for time.Now().Before(deadline) {
		for i, m := range c.Members {
			if m.IsLeader() {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("etcdtest: no leader")
	return -1
}

// HardStop kills member i's process with SIGKILL, without telling the
// others: its Raft stops mid-flight, as in a crash.
func (c *Cluster) HardStop(i int) { c.Members[i].stop() }

// Partition cuts member i off from its peers, both ways: its gate refuses
// every connection, and the other members' gates refuse connections from
// it. Open connections are closed. The cluster must have been made with
// gates. Clients still reach the member.
func (c *Cluster) Partition(i int) { c.partition(i, true) }

// Heal undoes Partition.
func (c *Cluster) Heal(i int) { c.partition(i, false) }

func (c *Cluster) partition(i int, cut bool) {
	if c.Members[i].gate == nil {
		panic("etcdtest: Partition of a cluster made without Config.Gates")
	}
	id := c.Members[i].id
	for j, m := range c.Members {
		if j == i {
			m.gate.set(func() { m.gate.isolated = cut })
		} else {
			m.gate.set(func() { m.gate.cut[id] = cut })
		}
	}
}

// WaitWritable waits until a Put through cli succeeds, and returns how long
// that took.
func WaitWritable(ctx context.Context, cli *clientv3.Client, key string) (time.Duration, error) {
	start := time.Now()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Put(cctx, key, "")
		cancel()
		if err == nil {
			return time.Since(start), nil
		}
		if ctx.Err() != nil {
			return time.Since(start), err
		}
		time.Sleep(10 * time.Millisecond)
	}
}
