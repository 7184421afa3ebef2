package kubeproc

import (
	"os"
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
