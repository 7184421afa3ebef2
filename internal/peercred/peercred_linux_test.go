package peercred

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// Ensure that both ends of a unix socket connection read the other's
// credentials as this process's own.
func TestOf(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan *net.UnixConn, 1)
	go func() {
		c, err := l.AcceptUnix()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	defer s.Close()
	want := Cred{PID: int32(os.Getpid()), UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	for name, conn := range map[string]*net.UnixConn{"client": c, "server": s} {
		got, err := Of(conn)
		if err != nil || got != want {
			t.Errorf("the %s's peer: %+v, %v; want %+v", name, got, err, want)
		}
	}
}
