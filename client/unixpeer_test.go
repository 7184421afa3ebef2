package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/testbin"
	"github.com/kvfence/kvfence/kvfence"
)

// countingListener counts the bytes its connections read: what clients
// sent.
type countingListener struct {
	net.Listener
	read *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, read: l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// squatter is a unix socket served by this process, as a socket squatted
// by another user would be, whose every answer says "held"; it counts
// the bytes clients sent it.
func squatter(t *testing.T) (sock string, read *atomic.Int64, calls *atomic.Int64) {
	t.Helper()
	dir, err := os.MkdirTemp("", "kvf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock = filepath.Join(dir, "admin.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	read, calls = new(atomic.Int64), new(atomic.Int64)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.WriteString(w, `{"scopes":[{"scope":"s","epoch":9,"mode":"held"}],"audit_seq":1,"anchor_checked":true}`)
	}))
	srv.Listener.Close()
	srv.Listener = countingListener{Listener: l, read: read}
	srv.Start()
	t.Cleanup(srv.Close)
	return sock, read, calls
}

// Ensure that the client over unix:// refuses a socket served by a uid it
// does not trust before it sends a byte, with ErrUntrustedServer naming
// the uid; that by default it trusts its own uid (and root); and that a
// socket file owned by an untrusted uid is refused even when the process
// serving it is trusted.
func TestUnix_ServerUID(t *testing.T) {
	me := uint32(os.Getuid())
	ctx := context.Background()
	sock, read, calls := squatter(t)

	for _, uids := range [][]uint32{{me + 1}, {65534}, {me + 1, 65534}} {
		if uids[0] == me || (len(uids) > 1 && uids[1] == me) {
			continue
		}
		c, err := client.NewWith("unix://"+sock, client.Options{ServerUIDs: uids})
		if err != nil {
			t.Fatal(err)
		}
		for _, call := range []func() error{
			func() error { _, err := c.Status(ctx, ""); return err },
			func() error {
				_, err := c.Hold(ctx, kvfence.HoldRequest{Scopes: []string{"s"}, Reason: "r"})
				return err
			},
			func() error { _, err := c.Submit(ctx, []byte{0xa0}); return err },
		} {
			err := call()
			if !errors.Is(err, client.ErrUntrustedServer) || errors.Is(err, client.ErrOutcomeUnknown) ||
				!strings.Contains(err.Error(), "served by a process of uid") {
				t.Fatalf("expecting uids %v from a socket served by uid %d: %v, want ErrUntrustedServer", uids, me, err)
			}
		}
		c.Close()
	}
	if n, k := read.Load(), calls.Load(); n != 0 || k != 0 {
		t.Fatalf("the untrusted server read %d bytes and answered %d requests; want none", n, k)
	}

	// By default the caller's own uid is trusted, and named explicitly too.
	for _, opts := range []client.Options{{}, {ServerUIDs: []uint32{me}}} {
		c, err := client.NewWith("unix://"+sock, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Status(ctx, ""); err != nil {
			t.Fatalf("a socket served by the caller's own uid %d (options %+v): %v", me, opts, err)
		}
		c.Close()
	}
	if calls.Load() != 2 {
		t.Fatalf("%d calls reached the trusted server, want 2", calls.Load())
	}

	// A socket file owned by an untrusted uid, served by a trusted
	// process: changing a file's owner needs root.
	if me != 0 {
		t.Log("not root: the socket file's owner cannot be changed here, so only the listener's uid was tested")
		return
	}
	if err := os.Chown(sock, 65534, -1); err != nil {
		t.Fatal(err)
	}
	before := read.Load()
	c, err := client.NewWith("unix://"+sock, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Status(ctx, "")
	if !errors.Is(err, client.ErrUntrustedServer) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("a socket file owned by uid 65534: %v, want ErrUntrustedServer", err)
	}
	if read.Load() != before {
		t.Fatal("a request was sent to a socket file owned by an untrusted uid")
	}
}

// listenEnv, when set, makes TestHelperUnixListener a server for the
// test that starts it in a child process under another uid.
const listenEnv = "KVFENCE_TEST_UNIX_LISTEN"

// TestHelperUnixListener is not a test: run by TestUnix_ServerOfAnotherUID
// in a child process as another uid, it serves "held" on the socket that
// listenEnv names until it is killed.
func TestHelperUnixListener(t *testing.T) {
	path := os.Getenv(listenEnv)
	if path == "" {
		return
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"scopes":[{"scope":"s","epoch":9,"mode":"held"}],"audit_seq":1,"anchor_checked":true}`)
	}))
}

// Ensure that the uid the client checks is the listening process's, not
// its own: a socket served by a child process running as uid 65534 is
// refused by a root client by default, and accepted when 65534 is the
// expected uid. Starting a process as another uid needs root.
func TestUnix_ServerOfAnotherUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Log("not root: no process of another uid can be started; TestUnix_ServerUID covers the refusal")
		return
	}
	dir, err := os.MkdirTemp("", "kvf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	// The test binary's own directory is root's alone: a copy the other
	// uid can run.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "listener.test")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestHelperUnixListener$")
	cmd.Env = testbin.ChildEnv(listenEnv + "=" + sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if i == 500 {
			t.Fatal("the listener of uid 65534 did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx := context.Background()
	c, err := client.New("unix://"+sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Status(ctx, ""); !errors.Is(err, client.ErrUntrustedServer) ||
		!strings.Contains(err.Error(), "served by a process of uid 65534") {
		t.Fatalf("a root client, by default, on a socket served by uid 65534: %v, want ErrUntrustedServer", err)
	}
	c2, err := client.NewWith("unix://"+sock, client.Options{ServerUIDs: []uint32{65534}})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	st, err := c2.Status(ctx, "")
	if err != nil || len(st.Scopes) != 1 || st.Scopes[0].Epoch != 9 {
		t.Fatalf("expecting uid 65534 from the socket it serves: %+v %v", st, err)
	}
}
