//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
	"golang.org/x/sys/unix"
)

// dialAs connects n unix stream sockets to path as uid and gid, from one
// OS thread whose effective ids are switched for the connects only, so
// that the kernel records that uid as their peer; the sockets are returned
// unused. It needs root.
func dialAs(t *testing.T, path string, uid, gid, n int) []int {
	t.Helper()
	type result struct {
		fds []int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread's credentials are changed by raw system calls, which
		// touch this thread alone; it is never handed back to the runtime
		// with them, since it exits with the goroutine.
		runtime.LockOSThread()
		var res result
		defer func() { ch <- res }()
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
			res.err = e
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
			res.err = e
			return
		}
		for range n {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				res.err = err
				return
			}
			res.fds = append(res.fds, fd)
			if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
				res.err = err
				return
			}
		}
	}()
	res := <-ch
	t.Cleanup(func() {
		for _, fd := range res.fds {
			unix.Close(fd)
		}
	})
	if res.err != nil {
		t.Fatalf("connecting as uid %d: %v", uid, res.err)
	}
	return res.fds
}

// Ensure that a local user who may reach the admin socket (a member of
// --admin-socket-group) but is not an administrator cannot keep an
// administrator's hold out. Its connections are refused every call, but
// while they are open, and while more of them wait in the socket's
// backlog, they take the socket's 32 connection slots, each for up to the
// read-header timeout, so that the administrator's connection waits
// behind all of them: 300 idle connections kept a hold out for over a
// minute. A peer that is not on --admin-uid must not hold a slot.
func TestRedteam8_AdminSocketFloodByGroupMember(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to connect as another uid")
	}
	const nobody = 65534
	c := newCLI(t)
	c.receiver()
	c.pki("t")
	base := socketDir(t)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(base, "run", "admin.sock")
	c.serve("--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
		"--client-ca", c.path("t-ca.crt"), "--admin-uid", fmt.Sprint(os.Getuid()),
		"--admin-socket", sock, "--admin-socket-group", fmt.Sprint(nobody))

	dialAs(t, sock, nobody, nobody, 300)
	time.Sleep(200 * time.Millisecond)

	cl, err := client.New("unix://"+sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	res, err := cl.Hold(ctx, kvfence.HoldRequest{Scopes: []string{fixtureScope}, Reason: "incident"})
	if err != nil {
		t.Fatalf("the administrator's hold, with 300 connections of a non-administrator open: %v after %v", err,
			time.Since(start).Round(time.Millisecond))
	}
	if len(res.Scopes) != 1 {
		t.Fatalf("hold: %+v", res)
	}
}
