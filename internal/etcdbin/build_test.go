package etcdbin

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

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
