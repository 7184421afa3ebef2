package etcdproc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/etcdbin"
	"github.com/kvfence/kvfence/internal/testbin"
)

// alive reports whether a process with pid exists and is not a zombie: a
// member whose test binary died is reaped by whoever inherits it, if
// anyone does.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// The state follows the command name in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// Ensure that a cluster starts healthy, that a member killed with SIGKILL is
// gone and comes back on its data and ports, and that Stop leaves no
// process behind.
func TestClusterKillRestartStop(t *testing.T) {
	c := Start(t, 3)
	var pids []int
	for _, m := range c.Members() {
		if !m.Running() || !alive(m.Pid()) {
			t.Fatalf("member %s is not running after Start", m.Name)
		}
		pids = append(pids, m.Pid())
	}
	m := c.Member(1)
	m.Kill()
	if m.Running() || alive(pids[1]) {
		t.Fatalf("member %s (pid %d) still runs after Kill", m.Name, pids[1])
	}
	if healthy(&http.Client{Timeout: time.Second}, m.Metrics) {
		t.Fatalf("member %s answers healthy after Kill", m.Name)
	}
	m.Restart()
	if !m.Running() || m.Pid() == pids[1] {
		t.Fatalf("member %s: running %v, pid %d (was %d) after Restart", m.Name, m.Running(), m.Pid(), pids[1])
	}
	// A restart on the same data directory rejoins; a fresh one would
	// have failed to start with the cluster's token and ID mismatch.
	if _, err := os.Stat(filepath.Join(m.dataDir, "member", "wal")); err != nil {
		t.Fatalf("member %s has no write-ahead log after Restart: %v", m.Name, err)
	}
	pids[1] = m.Pid()
	if l := c.Leader(); l == nil {
		t.Fatal("no member reports itself leader")
	}
	// A whole-cluster power loss: no majority is up until all restart
	// together.
	c.KillAll()
	for _, m := range c.Members() {
		if m.Running() {
			t.Fatalf("member %s still runs after KillAll", m.Name)
		}
	}
	c.RestartAll()
	for i, m := range c.Members() {
		if !m.Running() || !healthy(&http.Client{Timeout: time.Second}, m.Metrics) {
			t.Fatalf("member %s is not healthy after RestartAll", m.Name)
		}
		pids[i] = m.Pid()
	}
	if l := c.Leader(); l == nil {
		t.Fatal("no member reports itself leader after RestartAll")
	}
	c.Stop()
	for i, pid := range pids {
		if alive(pid) {
			t.Errorf("member m%d (pid %d) still runs after Stop", i, pid)
		}
	}
	c.Stop() // idempotent
}

// fatalRecorder is a testing.TB whose Fatal records the message and ends
// the goroutine, as testing's does, so that a test can see Start fail.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Ensure that Start without a binary fails the test, saying how to install
// one, rather than skipping it.
func TestStartWithoutBinaryFails(t *testing.T) {
	t.Setenv(etcdbin.EnvBinary, filepath.Join(t.TempDir(), "no-etcd"))
	r := &fatalRecorder{TB: t}
	done := make(chan *Cluster)
	go func() {
		var c *Cluster
		defer func() { done <- c }()
		c = Start(r, 3)
	}()
	if c := <-done; c != nil {
		t.Fatal("Start returned a cluster without an etcd binary")
	}
	if !strings.Contains(r.msg, etcdbin.InstallHint) {
		t.Fatalf("Start failed with %q, which does not say how to get etcd", r.msg)
	}
}

// Ensure that members die with a test binary that is killed before its
// cleanup can run: a test binary that starts a member is SIGKILLed, and
// the member must be gone soon after.
func TestMembersDieWithTestBinary(t *testing.T) {
	if os.Getenv("ETCDPROC_TEST_CHILD") == "1" {
		c := Start(t, 1)
		fmt.Printf("pid %d\n", c.Member(0).Pid())
		time.Sleep(time.Minute) // until the parent kills this process
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMembersDieWithTestBinary$", "-test.count=1")
	// The child is killed before its cleanup runs: its temporary
	// directories go under this test's, which is removed.
	cmd.Env = testbin.ChildEnv("ETCDPROC_TEST_CHILD=1", "TMPDIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var pid int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "pid %d", &pid); err == nil {
			break
		}
	}
	if pid == 0 || !alive(pid) {
		t.Fatalf("the child test reported no running member (pid %d)", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("member pid %d outlived its killed test binary", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
