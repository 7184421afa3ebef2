package kubeproc

import "os"

// EnvGate names the environment variable that turns on the tests that run
// a real API server: they run only when it is "1". The first build of
// kube-apiserver takes minutes, which the README's quick test command must
// not spend; .ci/run runs these tests on a line of their own with it set.
const EnvGate = "KVFENCE_KUBE"

// SkipMessage is what Require says when it skips a test.
const SkipMessage = "needs a real kube-apiserver, built on first use in minutes: set " + EnvGate +
	"=1 to run (.ci/run runs these tests every time, on their own line: " + EnvGate +
	"=1 go test ./internal/kubeproc ./deploy/kubernetes ./kubetarget, and -run '^TestKube_' ./cmd/kvfence)"

// Enabled reports whether EnvGate turns the API-server tests on.
func Enabled() bool { return os.Getenv(EnvGate) == "1" }

// Require skips t with SkipMessage unless EnvGate is "1".
func Require(t TB) {
	t.Helper()
	if !Enabled() {
		t.Skip(SkipMessage)
	}
}
