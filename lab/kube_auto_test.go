package lab

import (
	"path/filepath"
	"testing"

	"github.com/kvfence/kvfence/internal/kubeproc"
)

// Ensure that --kube auto does not hide a kube-apiserver the operator
// named and that is not there: with $KVFENCE_KUBE_APISERVER_BIN set to a
// path that does not exist (a typo, a binary removed), demonstration 8 is
// an error of the run, not "not run" beside an exit 0. Auto's "not run" is
// for a machine that has no binary at hand, not for a broken setting.
func TestKubeAuto_NamedBinaryMissingIsAnError(t *testing.T) {
	t.Setenv(kubeproc.EnvBinary, filepath.Join(t.TempDir(), "no-such-kube-apiserver"))
	l := &lab{opts: Options{Kube: KubeAuto}}
	skip, err := l.kubeBinaries()
	if err == nil {
		t.Fatalf("kubeBinaries = not run (%q), no error, though %s names a file that does not exist", skip, kubeproc.EnvBinary)
	}
}
