package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kvfence/kvfence/internal/kubeproc"
)

// Ensure that demonstration 8 shows, on a real kube-apiserver, what its
// four checks claim, and that each claim rests on the control it names:
// with the admission policy's binding removed, worker A's own write goes
// through and changes the object before B; with the resourceVersion
// precondition stripped from the receiver's PUT on the wire, the
// out-of-band change is lost.
func TestKube_Demonstration8(t *testing.T) {
	kubeproc.Require(t)
	exe := labBinary(t)
	for _, tc := range []struct {
		name string
		h    hooks
		// want are the four observations: stale worker changed the object,
		// direct write accepted, current worker applied, lost update.
		want [4]bool
	}{
		{"sound", hooks{}, [4]bool{false, false, true, false}},
		{"admission policy removed", hooks{beforeKubeDirectWithEdit: removePolicyBinding},
			// A's own PATCH set retention 45 before B, so B's test of 30
			// fails: the object changed outside the fence.
			[4]bool{true, true, false, false}},
		{"precondition stripped on the wire", hooks{kubePut: stripResourceVersion}, [4]bool{false, false, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "lab")
			if err := makeOutput(out); err != nil {
				t.Fatal(err)
			}
			l := &lab{opts: Options{Output: out, Executable: exe, Progress: io.Discard, Kube: KubeOn}, hooks: tc.h}
			rep, err := l.kubeTargetDemonstration(context.Background(), kubeDemonstration)
			if err != nil {
				t.Fatalf("kubeTargetDemonstration: %v", err)
			}
			var o Observations
			rep.observe(&o)
			got := [4]bool{*o.K8sStaleWorkerChangedObject, *o.K8sDirectWriteByWorkerAccepted, *o.K8sCurrentWorkerApplied, *o.K8sLostUpdate}
			if got != tc.want {
				t.Fatalf("observations %v, want %v; report: stale %s, direct %s / %s, current %s, concurrent %s (%s), final %v",
					got, tc.want, decision(rep.Stale), kubeResult(rep.DirectReadOnly), kubeResult(rep.DirectWithEdit),
					decision(rep.Current), decision(rep.Concurrent), rep.Concurrent.Dispatch, rep.FinalObject)
			}
			if rep.VerifyChain != "ok" || rep.ServeExitCode != 0 || !rep.PutHeld {
				t.Fatalf("verify-chain %s, serve exit %d, PUT held %v", rep.VerifyChain, rep.ServeExitCode, rep.PutHeld)
			}
			if tc.name == "sound" {
				if rep.Stale.Reason != "stale_or_unknown_epoch" || rep.DirectReadOnly.HTTPStatus != http.StatusForbidden ||
					rep.DirectWithEdit.HTTPStatus != http.StatusForbidden || rep.Concurrent.Dispatch != "conflict" ||
					rep.FinalObject.Data["retention_days"] != "45" {
					t.Fatalf("sound run: stale %s, direct %d / %d, concurrent %s, final %v", decision(rep.Stale),
						rep.DirectReadOnly.HTTPStatus, rep.DirectWithEdit.HTTPStatus, rep.Concurrent.Dispatch, rep.FinalObject)
				}
			}
		})
	}
}

// removePolicyBinding deletes the admission policy's binding and waits
// until worker A's dry-run PATCH, which RBAC now allows, is accepted.
func removePolicyBinding(s *kubeproc.Server) error {
	r, err := s.Do(kubeproc.Admin, http.MethodDelete,
		"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/kvfence-scope-guard", nil)
	if err != nil {
		return err
	}
	if r.Status != http.StatusOK {
		return fmt.Errorf("deleting the policy binding: %s", r)
	}
	return s.WaitStatus(kubeWorkerA, http.MethodPatch, kubeObjPath+"?dryRun=All",
		`[{"op":"add","path":"/data/probe","value":"x"}]`, http.StatusOK, "")
}

// stripResourceVersion removes metadata.resourceVersion from the
// receiver's PUT, which makes it an unconditional update.
func stripResourceVersion(r *http.Request) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		delete(md, "resourceVersion")
	}
	if b, err = json.Marshal(obj); err != nil {
		return err
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	r.Header.Set("Content-Length", strconv.Itoa(len(b)))
	return nil
}
