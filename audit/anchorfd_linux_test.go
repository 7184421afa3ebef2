//go:build !kvfenceosfile

package audit

import (
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Ensure that lstatAnchor describes every kind of file as os.Lstat does,
// mode bits, size and identity alike, so that FileAnchor's checks and
// messages are those it had with os.Lstat.
func TestLstatAnchor_MatchesOS(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	file := func(name string, mode fs.FileMode) func() (string, error) {
		return func() (string, error) {
			if err := os.WriteFile(at(name), []byte("anchor"), 0o600); err != nil {
				return "", err
			}
			return at(name), os.Chmod(at(name), mode)
		}
	}
	regular, err := file("regular", 0o600)()
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.Lstat(regular)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		make func() (string, error)
	}{
		{"regular", func() (string, error) { return regular, nil }},
		{"hard link", func() (string, error) { return at("hardlink"), os.Link(regular, at("hardlink")) }},
		{"group-writable", file("group-writable", 0o664)},
		{"setuid", file("setuid", 0o700|fs.ModeSetuid)},
		{"setgid", file("setgid", 0o700|fs.ModeSetgid)},
		{"sticky", file("sticky", 0o700|fs.ModeSticky)},
		{"directory", func() (string, error) { return at("dir"), os.Mkdir(at("dir"), 0o755) }},
		{"symlink", func() (string, error) { return at("link"), os.Symlink("regular", at("link")) }},
		{"fifo", func() (string, error) { return at("fifo"), syscall.Mkfifo(at("fifo"), 0o600) }},
		{"socket", func() (string, error) {
			l, err := net.Listen("unix", at("sock"))
			if err == nil {
				t.Cleanup(func() { l.Close() })
			}
			return at("sock"), err
		}},
		{"character device", func() (string, error) { return "/dev/null", nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, err := tc.make()
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			st, err := lstatAnchor(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.mode != fi.Mode() || st.size != fi.Size() {
				t.Fatalf("lstatAnchor: mode %v, size %d; os.Lstat: mode %v, size %d", st.mode, st.size, fi.Mode(), fi.Size())
			}
			if !sameFile(st, statOfSys(fi)) || sameFile(st, statOfSys(other)) != os.SameFile(fi, other) {
				t.Fatal("sameFile disagrees with os.SameFile")
			}
		})
	}
	if _, err := lstatAnchor(at("missing")); err == nil || err.Error() != "lstat "+at("missing")+": no such file or directory" {
		t.Fatalf("lstatAnchor of a missing file: %v", err)
	}
}

// statOfSys is the anchorStat of what os.Lstat returned.
func statOfSys(fi fs.FileInfo) anchorStat { return statOf(fi.Sys().(*syscall.Stat_t)) }
