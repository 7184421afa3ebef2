package kubeproc

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Ensure that the tests that Require skips run somewhere: .ci/run has a
// line that sets the gate and tests both packages that use it, and the
// skip message names the gate and .ci/run, so that a skipped test says
// where it runs.
func TestGateRunsInCI(t *testing.T) {
	b, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, EnvGate+"=1 go test ") &&
			strings.Contains(line, " ./internal/kubeproc") && strings.Contains(line, " ./deploy/kubernetes") {
			found = true
		}
	}
	if !found {
		t.Errorf(".ci/run has no line %s=1 go test … ./internal/kubeproc ./deploy/kubernetes", EnvGate)
	}
	for _, want := range []string{EnvGate + "=1", ".ci/run"} {
		if !strings.Contains(SkipMessage, want) {
			t.Errorf("skip message %q does not name %s", SkipMessage, want)
		}
	}
}

// Ensure that every package whose tests start a gated API server
// (kubeproc.Require, kubetest.StartDeployed) is named on a line of .ci/run
// that sets the gate: a package left off would skip its tests everywhere.
func TestEveryGatedPackageRunsInCI(t *testing.T) {
	b, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, EnvGate+"=1 go test ") {
			lines = append(lines, line+" ")
		}
	}
	gated := 0
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "../.." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(src), "kubeproc.Require(") && !strings.Contains(string(src), "kubetest.StartDeployed(") {
			return nil
		}
		gated++
		pkg := "./" + filepath.ToSlash(strings.TrimPrefix(filepath.Dir(path), "../../"))
		for _, l := range lines {
			if strings.Contains(l, " "+pkg+" ") {
				return nil
			}
		}
		t.Errorf("%s starts a gated API server, but no %s=1 line of .ci/run tests %s", path, EnvGate, pkg)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if gated < 3 {
		t.Fatalf("found only %d test files that start a gated API server", gated)
	}
}
