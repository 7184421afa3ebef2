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
	"sync"
	"syscall"
	"testing"
	"time"

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

// Ensure that a missing binary is an error that says how to get one: a
// bad $KVFENCE_ETCD_BIN is not replaced by a build, and without the go
// command there is nothing to build with.
func TestBinaryMissing(t *testing.T) {
	for _, tc := range []struct {
		name, env, path string
	}{
		{"env names nothing", filepath.Join(t.TempDir(), "no-etcd"), os.Getenv("PATH")},
		{"env names a directory", t.TempDir(), os.Getenv("PATH")},
		{"no go command", "", t.TempDir()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvBinary, tc.env)
			t.Setenv("PATH", tc.path)
			t.Setenv("GOROOT", "")
			t.Setenv("XDG_CACHE_HOME", t.TempDir())
			built.Lock()
			saved := built.path
			built.path = ""
			built.Unlock()
			t.Cleanup(func() { built.Lock(); built.path = saved; built.Unlock() })
			_, err := Binary()
			if !errors.Is(err, ErrNoBinary) {
				t.Fatalf("Binary() = %v, want ErrNoBinary", err)
			}
			if !strings.Contains(err.Error(), EnvBinary) || !strings.Contains(err.Error(), "go command") {
				t.Fatalf("the error does not say how to get etcd: %v", err)
			}
		})
	}
}

// Ensure that parallel callers build the etcd command once into the cache
// and all get the same complete binary, which is the etcd of go.mod, and
// that a later call reuses it.
func TestBinaryBuildsOnce(t *testing.T) {
	dir := t.TempDir()
	before := builds.Load()
	const callers = 3
	paths := make([]string, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { paths[i], errs[i] = buildCached(dir) })
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if paths[i] != paths[0] || filepath.Dir(paths[i]) != dir {
			t.Fatalf("caller %d got %q, caller 0 %q, want both in %s", i, paths[i], paths[0], dir)
		}
	}
	if n := builds.Load() - before; n != 1 {
		t.Fatalf("%d builds for %d parallel callers, want 1", n, callers)
	}
	out, err := exec.Command(paths[0], "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", paths[0], err)
	}
	want, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "go.etcd.io/etcd/server/v3").Output()
	if err != nil {
		t.Fatal(err)
	}
	if v := strings.TrimPrefix(strings.TrimSpace(string(want)), "v"); !strings.Contains(string(out), "etcd Version: "+v+"\n") {
		t.Fatalf("%s --version says %q, want etcd %s", paths[0], out, v)
	}
	if p, err := buildCached(dir); err != nil || p != paths[0] || builds.Load()-before != 1 {
		t.Fatalf("a second call: %q, %v, %d builds; want the cached %q", p, err, builds.Load()-before, paths[0])
	}
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
	t.Setenv(EnvBinary, filepath.Join(t.TempDir(), "no-etcd"))
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
	if !strings.Contains(r.msg, InstallHint) {
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

// Ensure that a race caller takes a plain etcd already in the cache
// without building, and otherwise the race flavor, and that a plain
// caller never takes the race flavor (it would slow every cluster test of
// a -short run).
func TestFlavorChoice(t *testing.T) {
	for _, tc := range []struct {
		name       string
		have       []string
		race       bool
		want       string
		wantCached bool
	}{
		{name: "race caller, plain cached", have: []string{"e", "e-race"}, race: true, want: "e", wantCached: true},
		{name: "race caller, only race cached", have: []string{"e-race"}, race: true, want: "e-race", wantCached: true},
		{name: "race caller, none cached", race: true, want: "e-race"},
		{name: "plain caller, plain cached", have: []string{"e"}, want: "e", wantCached: true},
		{name: "plain caller, only race cached", have: []string{"e-race"}, want: "e"},
		{name: "plain caller, none cached", want: "e"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.have {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			got, cached := flavor(dir, "e", "", tc.race)
			if got != filepath.Join(dir, tc.want) || cached != tc.wantCached {
				t.Errorf("flavor = %s, cached %v; want %s, cached %v", got, cached, filepath.Join(dir, tc.want), tc.wantCached)
			}
		})
	}
}
