package kubetarget

import (
	"os/exec"
	"strings"
	"testing"
)

// goListDeps returns the packages pkg links, by go list -deps.
func goListDeps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

// Ensure that the Kubernetes client stays out of the receiver's package
// (only this package and cmd/kvfence may link it), and that this package
// links client-go's rest and clientcmd parts but not the typed clientset
// or the typed API packages, which would multiply the build.
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list twice")
	}
	for _, tc := range []struct {
		pkg       string
		forbidden []string
		required  []string
	}{
		{"github.com/kvfence/kvfence/kvfence", []string{"k8s.io/"}, nil},
		{"github.com/kvfence/kvfence/kubetarget",
			[]string{"k8s.io/client-go/kubernetes", "k8s.io/api/"},
			[]string{"k8s.io/client-go/rest", "k8s.io/client-go/tools/clientcmd"}},
	} {
		t.Run(tc.pkg, func(t *testing.T) {
			deps := goListDeps(t, tc.pkg)
			have := map[string]bool{}
			for _, d := range deps {
				have[d] = true
				for _, f := range tc.forbidden {
					if strings.HasPrefix(d, f) {
						t.Errorf("%s links %s", tc.pkg, d)
					}
				}
			}
			for _, r := range tc.required {
				if !have[r] {
					t.Errorf("%s does not link %s: is the check looking at the right list?", tc.pkg, r)
				}
			}
		})
	}
}
