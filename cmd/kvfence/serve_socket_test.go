//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serveRefused runs serve with args and requires that it exits without
// serving, with a message containing want.
func (c *cli) serveRefused(want string, args ...string) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
	m := Main{Stdout: stdout, Stderr: stderr, Getenv: func(k string) string { return c.env[k] }}
	done := make(chan int, 1)
	go func() { done <- m.Run(ctx, append([]string{"serve", "--json"}, args...)) }()
	select {
	case code := <-done:
		if code == 0 || !strings.Contains(stderr.String(), want) {
			c.t.Fatalf("serve %v: exit %d\n%s, want a refusal saying %q", args, code, stderr.String(), want)
		}
	case <-time.After(20 * time.Second):
		cancel()
		<-done
		c.t.Fatalf("serve %v served, want a refusal saying %q:\n%s", args, want, stdout.String())
	}
}

// Ensure that serve puts the admin socket only in a directory that only
// the service can change (a symbolic link or a group-writable directory
// is refused, and nothing is created), and that --admin-socket-group
// makes a new directory 0750 and the socket 0660, both of that group, so
// that an admitted uid of that group can reach it.
func TestServe_AdminSocketDirectoryAndGroup(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.pki("t")
	tlsArgs := []string{"--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
		"--client-ca", c.path("t-ca.crt"), "--admin-uid", fmt.Sprint(os.Getuid())}
	base := socketDir(t)

	target := filepath.Join(base, "elsewhere")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	c.serveRefused("not a directory", append(tlsArgs, "--admin-socket", filepath.Join(link, "admin.sock"))...)
	shared := filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o770); err != nil {
		t.Fatal(err)
	}
	c.serveRefused("group or others may write it", append(tlsArgs, "--admin-socket", filepath.Join(shared, "admin.sock"))...)
	for _, d := range []string{target, shared} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Fatalf("a refused directory %s got %v", d, ents)
		}
	}

	gid := os.Getgid()
	dir := filepath.Join(base, "run")
	sock := filepath.Join(dir, "admin.sock")
	rn := c.serve(append(tlsArgs, "--admin-socket", sock, "--admin-socket-group", fmt.Sprint(gid))...)
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{dir, os.ModeDir | 0o750}, {sock, os.ModeSocket | 0o660}} {
		fi, err := os.Lstat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != f.mode || fi.Sys().(*syscall.Stat_t).Gid != uint32(gid) {
			t.Errorf("%s: mode %v group %d, want %v group %d", f.path, fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid, f.mode, gid)
		}
	}
	c.must(0, "status", "--server", "unix://"+sock)
	if code := rn.wait(t); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	c.must(2, append([]string{"serve", "--admin-socket-group", "no-such-group-here", "--admin-socket", sock}, tlsArgs...)...)
}

// Ensure that --max-connections is checked against the descriptor limit:
// a cap that leaves fewer than 256 descriptors, or none at all, is a
// usage error, before anything listens.
func TestServe_MaxConnectionsChecked(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.pki("t")
	tlsArgs := []string{"serve", "--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
		"--client-ca", c.path("t-ca.crt"), "--admin", spiffeOperator}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"0", "-5", fmt.Sprint(uint64(rl.Cur) - 255), "99999999999"} {
		r := c.must(ExitUsage, append(tlsArgs, "--max-connections", n)...)
		if !strings.Contains(r.stderr, "max-connections") {
			t.Errorf("--max-connections %s: %s", n, r.stderr)
		}
	}
}

// Ensure that --max-records reaches the receiver: a store holding more
// state records than it allows is refused at start, before anything is
// served, and a bound below 1 is a usage error.
func TestServe_MaxRecords(t *testing.T) {
	c := newCLI(t)
	c.receiver() // a scope's control record and a target: two records
	c.pki("t")
	tlsArgs := []string{"serve", "--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
		"--client-ca", c.path("t-ca.crt"), "--admin", spiffeOperator}
	for _, n := range []string{"0", "-1"} {
		r := c.must(ExitUsage, append(tlsArgs, "--max-records", n)...)
		if !strings.Contains(r.stderr, "max-records") {
			t.Errorf("--max-records %s: %s", n, r.stderr)
		}
	}
	r := c.must(ExitError, append(tlsArgs, "--max-records", "1")...)
	if !strings.Contains(r.stderr, "MaxRecords") {
		t.Errorf("--max-records 1 over a store of two records: %s", r.stderr)
	}
}
