package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// client returns a client of the given members only.
func client(t *testing.T, c *Cluster, members ...int) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, i := range members {
		eps = append(eps, c.Members[i].ClientURL)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// put writes key through cli within d.
func put(cli *clientv3.Client, key string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := cli.Put(ctx, key, "v")
	return err
}

// Ensure that QuotaBackendBytes reaches the member: writes past it are
// refused, where etcd's default would take them all.
func TestQuotaBackendBytes(t *testing.T) {
	c := NewCluster(t, Config{QuotaBackendBytes: 1 << 20})
	cli := client(t, c, 0)
	value := string(make([]byte, 512<<10))
	for i := range 8 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cli.Put(ctx, fmt.Sprint("k", i), value)
		cancel()
		if errors.Is(err, rpctypes.ErrNoSpace) {
			return
		}
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	t.Fatal("4 MiB written under a quota of 1 MiB")
}

// Ensure that a single member starts, serves a write and a read, and say
// how long it took to be ready.
func TestStart(t *testing.T) {
	c := Start(t)
	t.Logf("one member ready in %v", c.Ready)
	cli := client(t, c, 0)
	if err := put(cli, "/k", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(context.Background(), "/k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("Get = %v, %v", resp, err)
	}
}

// Ensure that Partition cuts a member off both ways: the others elect a
// leader among themselves and take writes, the cut-off member takes none,
// and after Heal it takes writes again.
func TestPartition(t *testing.T) {
	c := NewCluster(t, Config{Members: 3, Gates: true})
	t.Logf("three members ready in %v", c.Ready)
	leader := c.Leader(t)
	rest := []int{(leader + 1) % 3, (leader + 2) % 3}
	cut := client(t, c, leader)
	others := client(t, c, rest...)
	if err := put(cut, "/before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c.Partition(leader)
	// A leader cut off only one way keeps its followers from electing
	// another, and no write would pass anywhere.
	took, err := WaitWritable(ctxTimeout(t, 10*time.Second), others, "/during")
	if err != nil {
		t.Fatalf("the majority took no write while one member was cut off: %v", err)
	}
	t.Logf("the majority took writes %v after the cut", took)
	if err := put(cut, "/isolated", 500*time.Millisecond); err == nil {
		t.Fatal("a cut-off member took a write")
	}
	c.Heal(leader)
	if _, err := WaitWritable(ctxTimeout(t, 10*time.Second), cut, "/after"); err != nil {
		t.Fatalf("the healed member takes no write: %v", err)
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Ensure that HardStop kills the member's process and no other, that the
// rest elect a leader among themselves and take writes, and that Stop
// leaves no member process behind.
func TestHardStopAndStop(t *testing.T) {
	c := NewCluster(t, Config{Members: 3})
	var pids []int
	for _, m := range c.Members {
		pids = append(pids, m.proc.cmd.Process.Pid)
	}
	leader := c.Leader(t)
	if !c.Members[leader].IsLeader() {
		t.Fatalf("member %d is leader for Leader but not for IsLeader", leader)
	}
	c.HardStop(leader)
	for i, pid := range pids {
		if alive(pid) != (i != leader) {
			t.Fatalf("after HardStop(%d): member %d alive = %v", leader, i, alive(pid))
		}
	}
	if c.Members[leader].IsLeader() || c.Members[leader].Running() {
		t.Fatal("a hard-stopped member still runs or leads")
	}
	rest := []int{(leader + 1) % 3, (leader + 2) % 3}
	if _, err := WaitWritable(ctxTimeout(t, 10*time.Second), client(t, c, rest...), "/after-stop"); err != nil {
		t.Fatalf("the remaining majority takes no write: %v", err)
	}
	if next := c.Leader(t); next == leader {
		t.Fatalf("the stopped member %d is still leader", leader)
	}
	c.Stop()
	for i, pid := range pids {
		if alive(pid) {
			t.Fatalf("member %d (pid %d) outlived Stop", i, pid)
		}
	}
}

// Ensure that a member restored from a snapshot by Restore starts with
// NewClusterIn, holds what the snapshot held, and has its revision bumped.
func TestRestore(t *testing.T) {
	c := Start(t)
	cli := client(t, c, 0)
	if err := put(cli, "/kept", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	rc, err := cli.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "snap.db")
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(f, rc)
	rc.Close()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := Restore(snap, filepath.Join(dir, "m0"), RestoreOptions{Name: "m0", RevisionBump: 1000}); err != nil {
		t.Fatal(err)
	}
	r := NewClusterIn(t, dir, Config{})
	resp, err := client(t, r, 0).Get(t.Context(), "/kept")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("Get on the restored member = %v, %v", resp, err)
	}
	if resp.Header.Revision < 1000 {
		t.Fatalf("restored revision %d, want bumped by 1000", resp.Header.Revision)
	}
	if err := Restore(filepath.Join(dir, "absent"), filepath.Join(dir, "m1"), RestoreOptions{Name: "m1"}); err == nil {
		t.Fatal("Restore of a missing snapshot succeeded")
	}
}
