package lab

import (
	"net/http"
	"testing"

	"github.com/kvfence/kvfence/internal/kubeproc"
)

// soundKubeReport is demonstration 8's report as a sound run leaves it:
// A denied on its stale epoch, both of A's own PATCHes forbidden (the
// second by the admission policy), B applied and stamped, B's next write
// a 409 conflict on the resourceVersion precondition.
func soundKubeReport() kubeReport {
	before := kubeView{ResourceVersion: "100", Data: map[string]string{"retention_days": "30"}}
	after := kubeView{ResourceVersion: "120", Data: map[string]string{"retention_days": "45"},
		Annotations: map[string]string{"kvfence.dev/epoch": "3"}}
	return kubeReport{
		ObjectBefore:              before,
		Stale:                     workerResult{Outcome: "denied", Reason: "stale_or_unknown_epoch", AuditSeq: 10},
		DirectReadOnly:            workerResult{Outcome: "refused", HTTPStatus: http.StatusForbidden, Detail: `configmaps "backup-policy" is forbidden: User "worker-a" cannot patch resource`},
		DirectWithEdit:            workerResult{Outcome: "refused", HTTPStatus: http.StatusForbidden, Detail: "ValidatingAdmissionPolicy denied request: " + kubeproc.PolicyMessage},
		ObjectBeforeCurrentWorker: before,
		Current:                   workerResult{Outcome: "applied", Dispatch: "applied", Version: "120", AuditSeq: 12},
		ObjectAfterCurrentWorker:  after,
		PutHeld:                   true,
		OutOfBand:                 workerResult{Outcome: "accepted", HTTPStatus: http.StatusOK},
		Concurrent:                workerResult{Outcome: "not_applied", Dispatch: "conflict"},
		FinalObject: kubeView{ResourceVersion: "130", Data: map[string]string{"retention_days": "45", "owner": outOfBandOwner},
			Annotations: after.Annotations},
	}
}

// Ensure that each of demonstration 8's observations comes out as
// expected only when the control it names acted: a stale worker whose
// submit never reached the receiver (a transport error) was not fenced; a direct write refused 401 (a wrong
// token), 404 or 422 was not refused by RBAC or by the admission policy;
// and B's next write that failed on the wire (the network answered 502,
// the PUT never reached the API server) or ended unknown was not stopped
// by the resourceVersion precondition. Each such report must not read as
// the expected observation.
func TestKubeObserve_NotVacuous(t *testing.T) {
	base := soundKubeReport()
	var o Observations
	base.observe(&o)
	if *o.K8sStaleWorkerChangedObject || *o.K8sDirectWriteByWorkerAccepted || !*o.K8sCurrentWorkerApplied || *o.K8sLostUpdate {
		t.Fatalf("a sound report observed %v %v %v %v", *o.K8sStaleWorkerChangedObject, *o.K8sDirectWriteByWorkerAccepted,
			*o.K8sCurrentWorkerApplied, *o.K8sLostUpdate)
	}
	for _, tc := range []struct {
		name   string
		key    string
		change func(*kubeReport)
	}{
		{"stale submit got no answer", "k8s_stale_worker_changed_object", func(r *kubeReport) {
			r.Stale = workerResult{Outcome: OutcomeCallFailed, Detail: "tls: failed to verify certificate"}
		}},
		{"direct writes refused 401: a wrong token", "k8s_direct_write_by_worker_accepted", func(r *kubeReport) {
			r.DirectReadOnly = workerResult{Outcome: "refused", HTTPStatus: http.StatusUnauthorized, Detail: "Unauthorized"}
			r.DirectWithEdit = r.DirectReadOnly
		}},
		{"direct write with edit refused 422, not by the policy", "k8s_direct_write_by_worker_accepted", func(r *kubeReport) {
			r.DirectWithEdit = workerResult{Outcome: "refused", HTTPStatus: http.StatusUnprocessableEntity, Detail: "the server rejected our request"}
		}},
		{"direct write with edit refused 404", "k8s_direct_write_by_worker_accepted", func(r *kubeReport) {
			r.DirectWithEdit = workerResult{Outcome: "refused", HTTPStatus: http.StatusNotFound, Detail: "not found"}
		}},
		{"next write failed on the wire (502)", "k8s_lost_update", func(r *kubeReport) {
			r.Concurrent = workerResult{Outcome: "not_applied", Dispatch: "failed", Detail: "502 Bad Gateway"}
		}},
		{"next write ended unknown", "k8s_lost_update", func(r *kubeReport) {
			r.Concurrent = workerResult{Outcome: "unknown", Dispatch: "unknown"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := soundKubeReport()
			tc.change(&r)
			var o Observations
			r.observe(&o)
			for _, e := range expectations {
				if e.key != tc.key {
					continue
				}
				if got := e.observe(&o); got == e.expected {
					t.Fatalf("%s observed %v, as expected, though the control it names did not act", e.key, got)
				}
				return
			}
			t.Fatalf("no expectation %s", tc.key)
		})
	}
}
