package lab

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/kvfence/kvfence/internal/kubeproc"
)

// Ensure that demonstration 8 does not report "no lost update" as
// expected when the receiver's held PUT never reached the API server: the
// network answers it 502 after the out-of-band change, so the
// resourceVersion precondition never acted, and the out-of-band change
// survives only because nothing was written. The demonstration must fail,
// or observe k8s_lost_update other than false.
func TestKube_DroppedPutIsNotAConflict(t *testing.T) {
	kubeproc.Require(t)
	exe := labBinary(t)
	out := filepath.Join(t.TempDir(), "lab")
	if err := makeOutput(out); err != nil {
		t.Fatal(err)
	}
	drop := func(*http.Request) error { return errors.New("the network drops the receiver's PUT") }
	l := &lab{opts: Options{Output: out, Executable: exe, Progress: io.Discard, Kube: KubeOn}, hooks: hooks{kubePut: drop}}
	rep, err := l.kubeTargetDemonstration(context.Background(), kubeDemonstration)
	if err != nil {
		return // failing the demonstration is a sound answer
	}
	var o Observations
	rep.observe(&o)
	if !*o.K8sLostUpdate {
		t.Fatalf("k8s_lost_update observed false (as expected) though the PUT never reached the API server: "+
			"concurrent %s dispatch %q (%s), final %v", decision(rep.Concurrent), rep.Concurrent.Dispatch, rep.Concurrent.Detail,
			rep.FinalObject.Data)
	}
}
