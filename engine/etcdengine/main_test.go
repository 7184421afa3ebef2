package etcdengine

import (
	"os"
	"sync"
	"testing"

	"github.com/kvfence/kvfence/internal/etcdtest"
)

// The one-member cluster that this package's tests share starts on first
// use, inside m.Run: started before it, its serving goroutines race with
// the testing package's own setup (under -json, m.Run reassigns
// os.Stderr, which etcd's gateway reads).
var (
	singleOnce    sync.Once
	singleCluster *etcdtest.Cluster
	singleDir     string
	singleErr     error
)

// sharedSingle returns the shared one-member cluster, starting it once.
func sharedSingle(t testing.TB) *etcdtest.Cluster {
	t.Helper()
	singleOnce.Do(func() {
		if singleDir, singleErr = os.MkdirTemp("", "etcdengine"); singleErr != nil {
			return
		}
		singleCluster, singleErr = etcdtest.Launch(singleDir, etcdtest.Config{})
	})
	if singleErr != nil {
		t.Fatalf("etcd: %v", singleErr)
	}
	return singleCluster
}

func TestMain(m *testing.M) {
	code := m.Run()
	if singleCluster != nil {
		singleCluster.Stop()
	}
	if singleDir != "" {
		os.RemoveAll(singleDir)
	}
	os.Exit(code)
}
