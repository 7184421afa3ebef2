// Package etcdtest starts embedded etcd members for tests: one member, or a
// cluster on loopback whose members can be hard-stopped and partitioned.
// It links etcd's server, so only test files may import it.
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// ReadyTimeout bounds how long a member or a cluster may take to be ready.
const ReadyTimeout = 20 * time.Second

// Member is one embedded etcd member.
type Member struct {
	// Name is the member's name in the cluster.
	Name string
	// Etcd is the running member, or nil once stopped.
	Etcd *embed.Etcd
	// ClientURL is where clients reach the member.
	ClientURL string
	// peerURL is where the member listens for peers; advertised is where
	// peers reach it, through proxy when the cluster has proxies.
	peerURL, advertised string
	gate                *gate
	// id is the member's ID, known once it started.
	id string
}

// Cluster is a set of embedded members in this process.
type Cluster struct {
	// Members are the cluster's members, in the order they were made.
	Members []*Member
	// Ready is how long the cluster took from the first start to ready.
	Ready time.Duration
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
	// real member does; without it a test runs faster, and the process
	// that holds the members does not crash under them.
	Fsync bool
	// MaxTxnOps is the members' --max-txn-ops; 0 means etcd's default.
	MaxTxnOps uint
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
	if err != nil && strings.Contains(err.Error(), "address already in use") {
		// Another process took a port between its choice and the
		// listen; choose again.
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
// such as one restored from a snapshot, starts that member from it.
func NewClusterIn(t testing.TB, dir string, cfg Config) *Cluster {
	t.Helper()
	c, err := Launch(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// Launch starts a cluster with its data under dir, for a caller without a
// test (TestMain), which must call Stop.
func Launch(dir string, config Config) (_ *Cluster, err error) {
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
		m := &Member{Name: fmt.Sprintf("m%d", i), ClientURL: urls[2*i], peerURL: urls[2*i+1]}
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
	for i, m := range c.Members {
		cfg := embed.NewConfig()
		cfg.Name = m.Name
		cfg.Dir = filepath.Join(dir, m.Name)
		cfg.ListenClientUrls = []url.URL{mustURL(m.ClientURL)}
		cfg.AdvertiseClientUrls = cfg.ListenClientUrls
		cfg.ListenPeerUrls = []url.URL{mustURL(m.peerURL)}
		cfg.AdvertisePeerUrls = []url.URL{mustURL(m.advertised)}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = token
		cfg.ClusterState = embed.ClusterStateFlagNew
		// Fast elections: a lost leader is replaced in a fraction of a
		// second, as a test needs.
		cfg.TickMs, cfg.ElectionMs = 10, 100
		cfg.UnsafeNoFsync = !config.Fsync
		if config.MaxTxnOps > 0 {
			cfg.MaxTxnOps = config.MaxTxnOps
		}
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.Logger = "zap"
		e, err := startEtcd(cfg)
		if err != nil {
			return nil, fmt.Errorf("etcdtest: start %s: %w", m.Name, err)
		}
		c.Members[i].Etcd = e
		c.Members[i].id = e.Server.MemberID().String()
	}
	deadline := time.After(ReadyTimeout)
	for _, m := range c.Members {
		select {
		case <-m.Etcd.Server.ReadyNotify():
		case err := <-m.Etcd.Err():
			return nil, fmt.Errorf("etcdtest: %s: %w", m.Name, err)
		case <-deadline:
			return nil, fmt.Errorf("etcdtest: %d members not ready in %v", n, ReadyTimeout)
		}
	}
	c.Ready = time.Since(start)
	return c, nil
}

// Stop hard-stops every member and closes the proxies.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		if m.Etcd != nil {
			m.stop()
		}
		if m.gate != nil {
			m.gate.close()
		}
	}
}

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return *u
}

// startEtcd starts a member; embed may panic on a port taken between
// freeURL and the listen, which the test then reports.
func startEtcd(cfg *embed.Config) (e *embed.Etcd, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return embed.StartEtcd(cfg)
}

// stop hard-stops the member if it runs.
func (m *Member) stop() {
	if m.Etcd == nil {
		return
	}
	m.Etcd.Server.HardStop()
	m.Etcd.Close()
	m.Etcd = nil
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
			if m.Etcd != nil && m.Etcd.Server.Leader() == m.Etcd.Server.MemberID() {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("etcdtest: no leader")
	return -1
}

// HardStop stops member i at once, without telling the others: its Raft
// stops mid-flight, as in a crash of its process.
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
