package kvfence

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// store is where a test's receiver is kept: a bbolt file, or a prefix of
// the etcd member that this package's tests share. The tests that
// run on both take it from engines, one table, so that both engines pass
// the same checks.
type store struct {
	name string
	// path is the bbolt file; prefix the etcd prefix.
	path, prefix string
}

// engines are the stores the engine-table tests run on.
var engines = []struct {
	name string
	new  func(t testing.TB) *store
}{
	{"bbolt", func(t testing.TB) *store {
		return &store{name: "bbolt", path: filepath.Join(t.TempDir(), "receiver.db")}
	}},
	{"etcd", func(t testing.TB) *store {
		sharedEtcd(t)
		return &store{name: "etcd", prefix: fmt.Sprintf("/kvfence-test-%d/", prefixes.Add(1))}
	}},
}

// fresh returns a new, empty store of the same engine as s.
func (s *store) fresh(t testing.TB) *store {
	for _, e := range engines {
		if e.name == s.name {
			return e.new(t)
		}
	}
	t.Fatalf("no engine %q", s.name)
	return nil
}

// forEngines runs fn once on each engine, as a subtest named after it. s
// names the engine; each fixture made from it (newFixtureOn) gets a fresh
// store of that engine.
func forEngines(t *testing.T, fn func(t *testing.T, s *store)) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) { fn(t, e.new(t)) })
	}
}

// The etcd member the tests share: one member on loopback, without fsync
// (etcdtest.Config.Fsync unset): these tests are about the fence, not
// about etcd's durability, and the machine's disk is shared.
var (
	etcdOnce    sync.Once
	etcdCluster *etcdtest.Cluster
	etcdDir     string
	etcdErr     error
	prefixes    atomic.Uint64
)

func sharedEtcd(t testing.TB) *etcdtest.Cluster {
	t.Helper()
	etcdOnce.Do(func() {
		if etcdDir, etcdErr = os.MkdirTemp("", "kvfence-etcd"); etcdErr != nil {
			return
		}
		etcdCluster, etcdErr = etcdtest.Launch(etcdDir, etcdtest.Config{})
	})
	if etcdErr != nil {
		t.Fatalf("etcd: %v", etcdErr)
	}
	return etcdCluster
}

func TestMain(m *testing.M) {
	code := m.Run()
	if etcdCluster != nil {
		etcdCluster.Stop()
	}
	if etcdDir != "" {
		os.RemoveAll(etcdDir)
	}
	os.Exit(code)
}

// etcdClient returns a new client of the shared member.
func etcdClient(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: sharedEtcd(t).Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// engine returns a new etcd engine over the store's prefix; the receiver
// that opens it owns it.
func (s *store) engine(t testing.TB, opts *etcdengine.Options) engine.Engine {
	t.Helper()
	o := etcdengine.Options{}
	if opts != nil {
		o = *opts
	}
	o.Prefix = s.prefix
	e, err := etcdengine.New(etcdClient(t), &o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// init initialises a receiver in the store.
func (s *store) init(t testing.TB, opts *InitOptions) error {
	if s.path != "" {
		return Init(s.path, opts)
	}
	e := s.engine(t, nil)
	defer e.Close()
	return InitEngine(e, opts)
}

// open opens the store's receiver as the given variant.
func (s *store) open(t testing.TB, opts *Options, v defect.Variant) (*Receiver, error) {
	if s.path != "" {
		return open(s.path, opts, v)
	}
	return openWith(s.engine(t, nil), "etcd "+s.prefix, false, opts, v)
}

// verify runs VerifyChain on the store.
func (s *store) verify(t testing.TB, opts VerifyOptions) (audit.Report, error) {
	if s.path != "" {
		return VerifyChain(s.path, opts)
	}
	return VerifyChainEngine(s.engine(t, nil), opts)
}

// inspect runs Inspect on the store.
func (s *store) inspect(t testing.TB, anchor audit.AnchorStore) (Questioned, error) {
	if s.path != "" {
		return Inspect(s.path, anchor)
	}
	return InspectEngine(s.engine(t, nil), anchor)
}

// recover runs Recover on the store.
func (s *store) recover(t testing.TB, admission []byte, opts RecoverOptions) (RecoverResult, error) {
	if s.path != "" {
		return Recover(s.path, admission, opts)
	}
	return RecoverEngine(s.engine(t, nil), admission, opts)
}

// storeCopy is a copy of the store's content, to put back later: a copy of
// the bbolt file, or every key under the etcd prefix, which is what an etcd
// snapshot restore gives back to the receiver.
type storeCopy struct {
	file string
	kvs  map[string][]byte
}

// snapshot copies the store's content; the receiver must be closed.
func (s *store) snapshot(t *testing.T) *storeCopy {
	t.Helper()
	if s.path != "" {
		backup := filepath.Join(t.TempDir(), "backup.db")
		copyFile(t, s.path, backup)
		return &storeCopy{file: backup}
	}
	cli := etcdClient(t)
	defer cli.Close()
	resp, err := cli.Get(context.Background(), s.prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	snap := &storeCopy{kvs: map[string][]byte{}}
	for _, kv := range resp.Kvs {
		snap.kvs[string(kv.Key)] = kv.Value
	}
	if len(snap.kvs) == 0 {
		t.Fatal("snapshot of an empty prefix")
	}
	return snap
}

// restore puts a snapshot back in place of the store's content.
func (s *store) restore(t *testing.T, snap *storeCopy) {
	t.Helper()
	if s.path != "" {
		copyFile(t, snap.file, s.path)
		return
	}
	cli := etcdClient(t)
	defer cli.Close()
	ctx := context.Background()
	if _, err := cli.Delete(ctx, s.prefix, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	for k, v := range snap.kvs {
		if _, err := cli.Put(ctx, k, string(v)); err != nil {
			t.Fatal(err)
		}
	}
}
