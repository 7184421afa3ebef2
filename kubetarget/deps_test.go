package kubetarget

import (
	"os/exec"
	"strings"
	"testing"
)

// goListDeps returns the packages that go list -deps args lists.
func goListDeps(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-deps"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", args, err, out)
	}
	return strings.Fields(string(out))
}

// Ensure that no package of the module, nor any of its tests, links a
// Kubernetes client or its API machinery, and that this package links
// nothing from k8s.io at all: its few requests are its own, carried by
// kubeclient's HTTPS client, since a Kubernetes client would multiply the
// build of every package that links this one (cmd/kvfence among them).
// (etcd's server, in cmd/kvfence-etcd, links k8s.io/utils.)
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	deps := goListDeps(t, "-test", "github.com/kvfence/kvfence/...")
	have := map[string]bool{}
	for _, d := range deps {
		have[d] = true
		for _, f := range []string{"k8s.io/client-go/", "k8s.io/apimachinery/", "k8s.io/api/"} {
			if strings.HasPrefix(d, f) {
				t.Errorf("the module links %s", d)
			}
		}
	}
	for _, d := range goListDeps(t, "-test", "github.com/kvfence/kvfence/kubetarget") {
		if strings.HasPrefix(d, "k8s.io/") {
			t.Errorf("kubetarget links %s", d)
		}
	}
	// The list is the right one: it holds this package and what it uses.
	for _, r := range []string{"github.com/kvfence/kvfence/kubetarget", "github.com/kvfence/kvfence/kubeclient", "sigs.k8s.io/yaml"} {
		if !have[r] {
			t.Errorf("go list -deps does not list %s: is the check looking at the right list?", r)
		}
	}
}
