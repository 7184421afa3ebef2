package kubeproc

import (
	"os"
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
