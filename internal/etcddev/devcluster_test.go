package etcddev

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kvfence/kvfence/internal/etcdbin"
)

// freeLayout returns n members on ports that were free a moment ago.
func freeLayout(t *testing.T, n int) []devMember {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	port := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		return l.Addr().String()
	}
	ms := make([]devMember, n)
	for i := range ms {
		ms[i] = devMember{name: "m" + strconv.Itoa(i), client: port(), peer: port()}
	}
	return ms
}

// runUntilReady runs c in the background and returns the endpoints it
// printed and a stop function that ends the run and returns its error.
func runUntilReady(t *testing.T, c *devCluster, stderr io.Writer) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := c.run(ctx, pw, stderr)
		pw.CloseWithError(errors.Join(err, io.EOF))
		done <- err
	}()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	line, err := bufio.NewReader(pr).ReadString('\n')
	go io.Copy(io.Discard, pr)
	if err != nil {
		t.Fatalf("dev-cluster printed no endpoints: %v (%v)", err, stop())
	}
	t.Cleanup(func() { stop() })
	return strings.TrimSpace(line), stop
}

// Ensure that dev-cluster starts a cluster of healthy members that agree on
// one membership, prints their client endpoints, keeps serving with one
// member killed, stops every member when it ends, and restarts the same
// cluster, data kept, on the same directory.
func TestDevClusterStartsStopsRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs in the full test command (go test without -short)")
	}
	bin, err := etcdbin.Binary()
	if err != nil {
		t.Fatal(err)
	}
	c := &devCluster{exe: bin, dir: t.TempDir(), members: freeLayout(t, 3)}
	var log syncBuffer
	eps, stop := runUntilReady(t, c, &log)
	if eps != c.endpoints() || strings.Count(eps, ",") != 2 {
		t.Fatalf("printed %q, want the 3 client endpoints %q", eps, c.endpoints())
	}
	cl := client(t, eps)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ml, err := cl.MemberList(ctx)
	if err != nil || len(ml.Members) != 3 {
		t.Fatalf("member list: %v, %v; want 3 members", ml, err)
	}
	if _, err := cl.Put(ctx, "/dev/k", "v0"); err != nil {
		t.Fatal(err)
	}
	// A member killed with SIGKILL, by the PID dev-cluster recorded for
	// it, as README does: the other two go on serving, and so does
	// dev-cluster.
	raw, err := os.ReadFile(filepath.Join(c.dir, c.members[1].name+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid != c.procs[1].Pid {
		t.Fatalf("%s.pid holds %q, the member's PID is %d", c.members[1].name, raw, c.procs[1].Pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The write on the killed member's connection fails; the client
	// moves to another member.
	for {
		_, err := cl.Put(ctx, "/dev/k", "v1")
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("a write with one of three members killed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for !strings.Contains(log.String(), "a member exited: m1") {
		if ctx.Err() != nil {
			t.Fatalf("dev-cluster did not report the killed member:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	hc := &http.Client{Timeout: time.Second}
	for _, i := range []int{0, 2} {
		if !healthy(hc, c.members[i].client) {
			t.Fatalf("member %s stopped after another was killed", c.members[i].name)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("stopping: %v", err)
	}
	for _, m := range c.members {
		if _, err := os.Stat(filepath.Join(c.dir, m.name+".pid")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s.pid left after the cluster stopped: %v", m.name, err)
		}
	}
	for _, m := range c.members {
		if healthy(hc, m.client) {
			t.Fatalf("member %s still answers after the cluster stopped", m.name)
		}
	}
	eps2, _ := runUntilReady(t, c, io.Discard)
	if eps2 != eps {
		t.Fatalf("restarted on %q, want %q", eps2, eps)
	}
	resp, err := client(t, eps2).Get(ctx, "/dev/k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v1" {
		t.Fatalf("after a restart /dev/k = %v, %v; want v1", resp, err)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func client(t *testing.T, eps string) *clientv3.Client {
	t.Helper()
	var urls []string
	for _, e := range strings.Split(eps, ",") {
		urls = append(urls, "http://"+e)
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: urls, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// Ensure that every bad dev-cluster command line is a usage error that
// starts nothing.
func TestDevClusterUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{},
		{"--dir", dir, "extra"},
		{"--dir", dir, "--members", "0"},
		{"--dir", dir, "--members", "7"},
		{"--dir", dir, "--port", "80"},
		{"--dir", dir, "--port", "45536"},
		{"--dir", dir, "--members", "6", "--port", "15535"},
		{"--dir", dir, "--bogus"},
	} {
		err := RunDevCluster(context.Background(), args, io.Discard, io.Discard)
		var ue *UsageError
		if !errors.As(err, &ue) {
			t.Errorf("dev-cluster %q: %v, want a usage error", args, err)
		}
	}
	if err := RunDevCluster(context.Background(), []string{"--dir", dir, "--members", "6", "--port", "15534", "-h"}, io.Discard, io.Discard); err == nil {
		t.Error("-h ran a cluster")
	}
}
