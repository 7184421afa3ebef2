package kubeproc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Ensure that the scratch module pins every staging module it names to
// the staging version, and names neither module that the proxy refuses.
func TestScratchGoMod(t *testing.T) {
	gomod := scratchGoMod()
	for _, tc := range []struct {
		want    string
		present bool
	}{
		{"require k8s.io/kubernetes " + KubernetesVersion + "\n", true},
		{"tool " + Command + "\n", true},
		{"k8s.io/apiserver => k8s.io/apiserver " + StagingVersion + "\n", true},
		{"k8s.io/client-go => k8s.io/client-go " + StagingVersion + "\n", true},
		{"sample-cli-plugin", false},
		{"sample-controller", false},
	} {
		if got := strings.Contains(gomod, tc.want); got != tc.present {
			t.Errorf("go.mod contains %q: %v, want %v\n%s", tc.want, got, tc.present, gomod)
		}
	}
	if n := strings.Count(gomod, " => "); n != len(stagingModules) {
		t.Errorf("%d replace directives, want %d", n, len(stagingModules))
	}
}

// Ensure that a binary named by the environment is used as it is, and that
// a missing or non-executable one is refused with the variable's name.
func TestBinaryFromEnv(t *testing.T) {
	dir := t.TempDir()
	exe := dir + "/exe"
	plain := dir + "/plain"
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{exe, true},
		{plain, false},
		{dir + "/missing", false},
		{dir, false},
	} {
		t.Setenv(EnvBinary, tc.path)
		got, err := Binary()
		if tc.ok && (err != nil || got != tc.path) {
			t.Errorf("%s: Binary() = %q, %v; want the path", tc.path, got, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), EnvBinary)) {
			t.Errorf("%s: Binary() = %q, %v; want an error naming %s", tc.path, got, err, EnvBinary)
		}
	}
}

// Ensure that the built binary is reused: a second call within the process
// builds nothing, and the binary runs and reports the pinned version.
func TestBinaryBuildsOnce(t *testing.T) {
	Require(t)
	if os.Getenv(EnvBinary) != "" {
		t.Skipf("%s names the binary; nothing is built", EnvBinary)
	}
	p1, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubeproc: kube-apiserver %s ready in %v (%d build(s) in this process)", p1, built.took, builds.Load())
	before := builds.Load()
	p2, err := Binary()
	if err != nil || p2 != p1 {
		t.Fatalf("second Binary() = %q, %v; want %q", p2, err, p1)
	}
	if builds.Load() != before {
		t.Fatalf("second Binary() built again")
	}
	out, err := Cmd(p1, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), KubernetesVersion) {
		t.Fatalf("%s --version: %v: %s; want %s", p1, err, out, KubernetesVersion)
	}
}

// Ensure that Cached finds a binary without building one: the one the
// environment names, else the one in the user's cache under the current
// build key, and nothing (with the way to get one) when the cache holds
// none or another key's.
func TestCached(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "exe")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvBinary, exe)
	if p, ok, err := Cached(); !ok || err != nil || p != exe {
		t.Fatalf("Cached() with %s set = %q, %v, %v", EnvBinary, p, ok, err)
	}
	t.Setenv(EnvBinary, filepath.Join(dir, "missing"))
	if _, ok, err := Cached(); ok || !errors.Is(err, ErrNoBinary) {
		t.Fatalf("Cached() with a missing %s = %v, %v", EnvBinary, ok, err)
	}

	t.Setenv(EnvBinary, "")
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
	built.Lock()
	saved := built.path
	built.path = ""
	built.Unlock()
	t.Cleanup(func() { built.Lock(); built.path = saved; built.Unlock() })
	root, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(root, cacheSubdir)
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "kube-apiserver-0000000000000000"), nil, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := Cached(); ok || !errors.Is(err, ErrNoBinary) || !strings.Contains(err.Error(), "none built yet") {
		t.Fatalf("Cached() with another key's binary = %v, %v", ok, err)
	}
	goCmd, err := goCommand()
	if err != nil {
		t.Fatal(err)
	}
	want, err := cachePath(sub, goCmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(want, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if p, ok, err := Cached(); !ok || err != nil || p != want {
		t.Fatalf("Cached() = %q, %v, %v; want %s", p, ok, err, want)
	}
}
