package kubeproc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/testbin"
)

// alive reports whether the process pid still exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// Ensure that Stop ends the server, and that the server dies with a test
// binary that is killed before its cleanup can run: a child test binary
// that starts a server is SIGKILLed, and the server must be gone soon
// after.
func TestServerDiesWithTestBinary(t *testing.T) {
	Require(t)
	if os.Getenv("KUBEPROC_TEST_CHILD") == "1" {
		s := Start(t, Config{})
		fmt.Printf("pid %d\n", s.Pid())
		time.Sleep(time.Minute) // until the parent kills this process
		return
	}
	s := Start(t, Config{})
	pid := s.Pid()
	s.Stop()
	if alive(pid) || s.Pid() != 0 {
		t.Fatalf("server pid %d outlived Stop", pid)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestServerDiesWithTestBinary$", "-test.count=1")
	cmd.Env = testbin.ChildEnv("KUBEPROC_TEST_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid = 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "pid %d", &pid); err == nil {
			break
		}
	}
	if pid == 0 || !alive(pid) {
		t.Fatalf("the child test reported no running server (pid %d)", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("server pid %d outlived its killed test binary", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
