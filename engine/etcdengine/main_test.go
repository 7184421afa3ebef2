package etcdengine

import (
	"fmt"
	"os"
	"testing"

	"github.com/kvfence/kvfence/internal/etcdtest"
)

// single is the one-member cluster that this package's tests share.
var single *etcdtest.Cluster

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "etcdengine")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	single, err = etcdtest.Launch(dir, etcdtest.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	single.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}
