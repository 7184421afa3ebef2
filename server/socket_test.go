//go:build unix

package server_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/server"
)

// shortDir returns a fresh directory with a short path, for unix sockets.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kvs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// statOf returns path's mode and group, without following a link.
func statOf(t *testing.T, path string) (os.FileMode, uint32) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid
}

// Ensure that the admin socket is made in a directory only the service can
// change: a missing directory is created 0700 (0750 of the group), the
// socket is 0600 (0660 of the group), and an existing directory that is a
// symbolic link, not a directory, owned by another user, writable by group
// or others, or out of the group's reach is refused before anything is
// created in it.
func TestListenUnixSocket_Directory(t *testing.T) {
	group := uint32(os.Getgid()) // a group this process may always give
	other := uint32(os.Getuid() + 1)
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, dir string) // makes dir, or not
		group   *uint32
		wantErr bool
		dirMode os.FileMode
		sock    os.FileMode
	}{
		{name: "created", dirMode: 0o700, sock: 0o600},
		{name: "created with group", group: &group, dirMode: 0o750, sock: 0o660},
		{name: "existing 0755", setup: mkdir(0o755), dirMode: 0o755, sock: 0o600},
		{name: "existing 0750 of the group", setup: mkdir(0o750), group: &group, dirMode: 0o750, sock: 0o660},
		{name: "group-writable", setup: mkdir(0o770), wantErr: true},
		{name: "other-writable", setup: mkdir(0o703), wantErr: true},
		{name: "sticky and world-writable", setup: mkdir(0o1777), wantErr: true},
		{name: "existing 0700, out of the group's reach", setup: mkdir(0o700), group: &other, wantErr: true},
		{name: "symbolic link to a good directory", setup: func(t *testing.T, dir string) {
			target := filepath.Join(filepath.Dir(dir), "target")
			if err := os.Mkdir(target, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, dir); err != nil {
				t.Fatal(err)
			}
		}, wantErr: true},
		{name: "a file", setup: func(t *testing.T, dir string) {
			if err := os.WriteFile(dir, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, wantErr: true},
		{name: "owned by another user", setup: func(t *testing.T, dir string) {
			mkdir(0o700)(t, dir)
			if err := os.Chown(dir, int(other), -1); err != nil {
				t.Fatalf("chown (the test needs to run as root to give a directory away): %v", err)
			}
		}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "owned by another user" && os.Geteuid() != 0 {
				// Only root can give a directory to another user; the
				// ownership check is the same code as in "other-writable".
				return
			}
			dir := filepath.Join(shortDir(t), "run")
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			path := filepath.Join(dir, "admin.sock")
			l, err := server.ListenUnixSocket(path, server.UnixSocketOptions{Group: tc.group})
			if tc.wantErr {
				if !errors.Is(err, server.ErrUnsafeSocketDirectory) {
					t.Fatalf("err = %v, want ErrUnsafeSocketDirectory", err)
				}
				// Through a symbolic link, this looks in its target.
				if _, err := os.Lstat(path); err == nil {
					t.Fatal("a refused directory got a socket")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if m, _ := statOf(t, dir); m.Perm() != tc.dirMode || !m.IsDir() {
				t.Errorf("directory mode %v, want %v", m, tc.dirMode)
			}
			m, gid := statOf(t, path)
			if m.Type() != os.ModeSocket || m.Perm() != tc.sock {
				t.Errorf("socket mode %v, want %v", m, tc.sock)
			}
			if tc.group != nil && gid != *tc.group {
				t.Errorf("socket group %d, want %d", gid, *tc.group)
			}
			if dgid := func() uint32 { _, g := statOf(t, dir); return g }(); tc.group != nil && tc.setup == nil && dgid != *tc.group {
				t.Errorf("directory group %d, want %d", dgid, *tc.group)
			}
			l.Close()
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after Close, the socket is still there: %v", err)
			}
		})
	}
}

func mkdir(mode os.FileMode) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		t.Helper()
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// Ensure that a socket left by a previous run is replaced, and that any
// other file at the socket's path is refused and left alone.
func TestListenUnixSocket_ExistingFile(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "admin.sock")
	old, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close()
	l, err := server.ListenUnixSocket(path, server.UnixSocketOptions{})
	if err != nil {
		t.Fatalf("a stale socket: %v", err)
	}
	l.Close()
	if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := server.ListenUnixSocket(path, server.UnixSocketOptions{}); err == nil {
		t.Fatal("a regular file at the socket's path was replaced")
	}
	if b, _ := os.ReadFile(path); string(b) != "keep" {
		t.Fatalf("the file was changed: %q", b)
	}
}

// Ensure that /healthz on the admin socket answers only after the peer
// check: a uid not on the allow-list gets 403, not the receiver's health.
func TestUnixSocket_HealthzAfterPeerCheck(t *testing.T) {
	e := newEnv(t)
	me := uint32(os.Getuid())
	c, base := e.unixServer(me + 1)
	resp, err := do(c, http.MethodGet, base+api.PathHealthz, "", nil)
	if err != nil || resp.status != http.StatusForbidden || resp.errorCode() != api.CodeForbidden {
		t.Fatalf("healthz from uid %d, not on the list: %v %d %s, want 403", me, err, resp.status, resp.raw)
	}
	c, base = e.unixServer(me)
	resp, err = do(c, http.MethodGet, base+api.PathHealthz, "", nil)
	if err != nil || resp.status != http.StatusOK || resp.body["receiver"] != fmt.Sprint(e.r.ID()) {
		t.Fatalf("healthz from uid %d, on the list: %v %d %s", me, err, resp.status, resp.raw)
	}
}

// Ensure that closing the admin socket removes it from the directory it
// was made in, even if that directory's path was swapped for a symbolic
// link since, and never a file of the same name the link leads to.
func TestListenUnixSocket_CloseAfterSwap(t *testing.T) {
	base := shortDir(t)
	dir := filepath.Join(base, "run")
	l, err := server.ListenUnixSocket(filepath.Join(dir, "admin.sock"), server.UnixSocketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(base, "victim")
	if err := os.Mkdir(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "admin.sock"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, dir); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if b, err := os.ReadFile(filepath.Join(victim, "admin.sock")); err != nil || string(b) != "keep" {
		t.Fatalf("the file the swapped-in link leads to: %q %v, want it untouched", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir+".old", "admin.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket in its own directory: %v, want it removed", err)
	}
}
