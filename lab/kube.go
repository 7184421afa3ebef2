package lab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/etcdbin"
	"github.com/kvfence/kvfence/internal/kubeproc"
	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/kvfence"
)

// KubeMode says whether the lab runs demonstration 8, which needs a real
// kube-apiserver and etcd.
type KubeMode string

// Kubernetes modes of the lab.
const (
	// KubeOff skips demonstration 8; the zero Options do.
	KubeOff KubeMode = "off"
	// KubeAuto runs it when a kube-apiserver is at hand without a build
	// ($KVFENCE_KUBE_APISERVER_BIN, or one an earlier run built into the
	// user's cache), and otherwise reports it as not run, saying why. A
	// $KVFENCE_KUBE_APISERVER_BIN that names no executable is an error, and
	// the etcd it runs on is built if it is not (about a minute and a
	// half, once).
	KubeAuto KubeMode = "auto"
	// KubeOn runs it, building kube-apiserver first if there is none: a
	// few minutes and over 2 GB of memory the first time, in kvfence's
	// source tree with the go command and the module proxy at hand.
	KubeOn KubeMode = "on"
)

// ParseKubeMode parses a --kube value.
func ParseKubeMode(s string) (KubeMode, error) {
	switch m := KubeMode(s); m {
	case KubeOff, KubeAuto, KubeOn:
		return m, nil
	}
	return "", fmt.Errorf("lab: --kube %q: one of auto, on or off", s)
}

// kubeDemonstration is demonstration 8's directory under the output.
const kubeDemonstration = "08-kubernetes-target"

// The Kubernetes object of demonstration 8: the seed's backup policy as a
// ConfigMap, and the target that stands for it at the receiver.
const (
	kubeNamespace = "prod"
	kubeObject    = "backup-policy"
	kubeObjectRef = "configmaps/" + kubeNamespace + "/" + kubeObject
	kubeObjPath   = "/api/v1/namespaces/" + kubeNamespace + "/configmaps/" + kubeObject
	kubeTarget    = "backup-policy"
	// kubeWorkerA is worker A's own Kubernetes identity: in the workers'
	// group, which the shipped RBAC lets read and not write.
	kubeWorkerA = "worker-a"
)

// kubeReport is demonstration 8's report.json.
type kubeReport struct {
	// Demonstration is the demonstration's directory name.
	Demonstration string `json:"demonstration"`
	// Steps are the demonstration's steps, in order.
	Steps []step `json:"steps"`
	// APIServer is the kube-apiserver's address.
	APIServer string `json:"api_server"`
	// Proxy is the lab's network proxy, through which the receiver's
	// kubeconfig reaches the API server.
	Proxy string `json:"proxy"`
	// ObjectBefore is the object before worker A's attempts.
	ObjectBefore kubeView `json:"object_before"`
	// Stale is A's superseded envelope, submitted after the hold and B's
	// activation.
	Stale workerResult `json:"stale_worker"`
	// DirectReadOnly is A's own PATCH of the object with A's Kubernetes
	// credentials (read-only by the shipped RBAC).
	DirectReadOnly workerResult `json:"direct_write_read_only_rbac"`
	// DirectWithEdit is the same PATCH after RBAC was widened to let A
	// edit ConfigMaps in the namespace, as a misconfiguration would: the
	// admission policy alone refuses it.
	DirectWithEdit workerResult `json:"direct_write_with_edit_rbac"`
	// ObjectBeforeCurrentWorker is the object after all of A's attempts.
	ObjectBeforeCurrentWorker kubeView `json:"object_before_current_worker"`
	// Current is B's envelope.
	Current workerResult `json:"current_worker"`
	// ObjectAfterCurrentWorker is the object after B's write.
	ObjectAfterCurrentWorker kubeView `json:"object_after_current_worker"`
	// PutHeld says the receiver's PUT of B's second write was held by the
	// proxy while the out-of-band change was made.
	PutHeld bool `json:"put_held"`
	// OutOfBand is the change made directly to the API server, with the
	// receiver's credentials, while that PUT was held.
	OutOfBand workerResult `json:"out_of_band_change"`
	// Concurrent is B's second write, decided on the object before the
	// out-of-band change.
	Concurrent workerResult `json:"concurrent_worker_write"`
	// FinalObject is the object at the end.
	FinalObject kubeView `json:"final_object"`
	// ServeExitCode is serve's exit status after SIGTERM.
	ServeExitCode int `json:"serve_exit_code"`
	// VerifyChain is verify-chain's problem code at the end.
	VerifyChain string `json:"verify_chain"`
	// VerifyDetail is its evidence, when there is a problem.
	VerifyDetail string `json:"verify_detail,omitempty"`
}

// kubeView is the part of the ConfigMap the demonstration reads.
type kubeView struct {
	// ResourceVersion is the object's version.
	ResourceVersion string `json:"resource_version"`
	// Data is the ConfigMap's data.
	Data map[string]string `json:"data"`
	// Annotations are the kvfence.dev annotations the receiver stamps.
	Annotations map[string]string `json:"annotations,omitempty"`
}

// observe fills demonstration 8's observations. Each is the expected one
// only if the control it names answered: the fence's stale-epoch denial,
// 403s from RBAC and from the admission policy, and the API server's 409
// on the resourceVersion precondition. An answer that never came (a
// transport error, a dropped PUT, an unknown outcome) or came from
// something else (401, 404, 422) reads as the failure.
func (rep *kubeReport) observe(o *Observations) {
	fenced := rep.Stale.Outcome == string(kvfence.Denied) && rep.Stale.Reason == string(kvfence.ReasonStaleEpoch)
	stale := !fenced || rep.ObjectBeforeCurrentWorker.ResourceVersion != rep.ObjectBefore.ResourceVersion ||
		rep.ObjectBeforeCurrentWorker.Data["retention_days"] != rep.ObjectBefore.Data["retention_days"]
	refused := rep.DirectReadOnly.HTTPStatus == http.StatusForbidden && rep.DirectWithEdit.HTTPStatus == http.StatusForbidden &&
		strings.Contains(rep.DirectWithEdit.Detail, kubeproc.PolicyMessage)
	direct := !refused
	current := rep.Current.Outcome == string(kvfence.Applied) && rep.ObjectAfterCurrentWorker.Data["retention_days"] == "45" &&
		rep.ObjectAfterCurrentWorker.Annotations["kvfence.dev/epoch"] != "" &&
		rep.ObjectAfterCurrentWorker.ResourceVersion == rep.Current.Version
	conflict := rep.Concurrent.Dispatch == string(kvfence.DispatchConflict) && rep.FinalObject.Data["owner"] == outOfBandOwner &&
		rep.FinalObject.Data["retention_days"] == "45"
	lost := !conflict
	o.K8sStaleWorkerChangedObject, o.K8sDirectWriteByWorkerAccepted = &stale, &direct
	o.K8sCurrentWorkerApplied, o.K8sLostUpdate = &current, &lost
}

func accepted(w workerResult) bool { return w.HTTPStatus >= 200 && w.HTTPStatus < 300 }

// outOfBandOwner is what the out-of-band change writes, to another key of
// the ConfigMap than the one B's request changes: a blind overwrite by B's
// write would lose it.
const outOfBandOwner = "storage-team"

// kubeBinaries finds (or, with KubeOn, builds) the kube-apiserver and
// etcd binaries demonstration 8 runs, or says why it does not run.
func (l *lab) kubeBinaries() (skip string, err error) {
	switch l.opts.Kube {
	case "", KubeOff:
		return "not run: kvfence lab --kube off (the default of the library's Options)", nil
	case KubeAuto:
		// A binary the operator named and that is not there is an error,
		// not a machine without one.
		if os.Getenv(kubeproc.EnvBinary) != "" {
			break
		}
		if _, ok, err := kubeproc.Cached(); !ok {
			return "not run: no kube-apiserver at hand (" + err.Error() + "); run kvfence lab --kube on to build it once " +
				"(minutes, over 2 GB of memory) or set " + kubeproc.EnvBinary, nil
		}
	case KubeOn:
		l.logf("%s: building kube-apiserver %s if it is not built yet (minutes, once)", kubeDemonstration, kubeproc.KubernetesVersion)
	default:
		return "", fmt.Errorf("lab: Kube mode %q: one of auto, on or off", l.opts.Kube)
	}
	if _, err := kubeproc.Binary(); err != nil {
		return "", err
	}
	if _, err := etcdbin.Binary(); err != nil {
		return "", err
	}
	return "", nil
}

// kubeTargetDemonstration runs demonstration 8: the backup policy as a
// ConfigMap on a real kube-apiserver, fenced by kvfence serve with the
// receiver's own Kubernetes identity. Worker A pauses across a hold and
// is denied with the object unchanged; A's own Kubernetes credentials
// cannot write the object, by RBAC and then, with RBAC widened, by the
// admission policy; B's change is applied with the resourceVersion
// precondition; and a change made out of band while B's next write is on
// the wire makes that write a conflict, not a lost update.
func (l *lab) kubeTargetDemonstration(ctx context.Context, name string) (*kubeReport, error) {
	dir := filepath.Join(l.opts.Output, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	l.logf("%s: start", name)
	rep := &kubeReport{Demonstration: name}
	uid := "unix:uid:" + strconv.Itoa(os.Getuid())
	record := func(actor, action, result string) {
		rep.Steps = append(rep.Steps, step{At: time.Now().UTC(), Actor: actor, Action: action, Result: result})
	}
	apiDir := filepath.Join(dir, "kube-apiserver")
	if err := os.Mkdir(apiDir, 0o700); err != nil {
		return nil, err
	}
	s, err := kubeproc.Launch(apiDir, kubeproc.Config{Identities: []kubeproc.Identity{
		{Name: kubeWorkerA, User: kubeWorkerA, Groups: []string{kubeproc.WorkersGroup}}}})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	rep.APIServer = s.URL
	record("operator", "starts etcd and kube-apiserver (RBAC, token identities: receiver, worker-a, admin)", s.URL)
	if err := s.Deploy(kubeNamespace); err != nil {
		return nil, err
	}
	if err := s.CreateScoped(kubeNamespace, kubeObject, "backup-policy", map[string]string{"retention_days": "30"}); err != nil {
		return nil, err
	}
	record("admin", "applies deploy/kubernetes (admission policy, RBAC) and creates ConfigMap prod/backup-policy, retention_days 30",
		"the policy refuses the administrator's own change")

	apiCA := filepath.Join(dir, "kube-apiserver-ca.crt")
	if err := os.WriteFile(apiCA, s.CAPEM, 0o600); err != nil {
		return nil, err
	}
	gate, err := startKubeProxy(s.URL, s.CAPEM, dir, l.hooks.kubePut)
	if err != nil {
		return nil, err
	}
	defer gate.close()
	rep.Proxy = gate.url
	receiverKubeconfig := filepath.Join(dir, "receiver.kubeconfig")
	if err := s.WriteKubeconfig(receiverKubeconfig, kubeproc.Receiver, gate.url, gate.caFile); err != nil {
		return nil, err
	}
	tokenA := filepath.Join(dir, "worker-a.token")
	if err := os.WriteFile(tokenA, []byte(s.Tokens[kubeWorkerA]), 0o600); err != nil {
		return nil, err
	}

	if err := writeCertificates(dir, map[string]string{"worker-a": servedWorkerA, "worker-b": servedWorkerB,
		"operator": servedOperator}); err != nil {
		return nil, err
	}
	rc, err := newReceiverFiles(dir, "lab-"+name)
	if err != nil {
		return nil, err
	}
	if err := rc.with(func(r *kvfence.Receiver) error {
		_, err := r.Admin().CreateScope(ctx, kubeScope)
		return err
	}); err != nil {
		return nil, err
	}
	run, err := l.kvfence(ctx, "target", "create", "--db", rc.db, "--anchor", rc.anchor, "--key", rc.key,
		"--scope", kubeScope, "--target", kubeTarget, "--kind", "kubernetes", "--object", kubeObjectRef,
		"--kubeconfig", receiverKubeconfig, "--json")
	if err != nil {
		return nil, err
	}
	if run.ExitCode != 0 {
		return nil, fmt.Errorf("lab: kvfence target create --kind kubernetes exited %d: %s", run.ExitCode, run.Stderr)
	}
	record("operator", "init; scope create; kvfence target create --kind kubernetes --object "+kubeObjectRef, "")

	sock, cleanup, err := socketPath(dir)
	if err != nil {
		return nil, err
	}
	sv, err := l.startServeWith(ctx, serveConfig{dir: dir, pki: dir, rc: rc, sock: sock, listen: "127.0.0.1:0",
		log: "serve.log", cleanup: cleanup, extra: []string{"--kubeconfig", receiverKubeconfig}})
	if err != nil {
		return nil, err
	}
	defer sv.kill()
	record("serve", "listening with the receiver's kubeconfig", "tls "+sv.ready.Listen)
	admin, err := sv.admin()
	if err != nil {
		return nil, err
	}
	defer admin.Close()

	patch := func(from, to string) ([]byte, error) {
		return kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: "raise-retention-" + to, Target: kubeTarget,
			Patch: []byte(`[{"op":"test","path":"/retention_days","value":"` + from + `"},{"op":"replace","path":"/retention_days","value":"` + to + `"}]`)})
	}
	req, err := patch("30", "45")
	if err != nil {
		return nil, err
	}
	activate := func(executor, claim, file string, req []byte) (client.Activation, error) {
		g, err := admin.Activate(ctx, kvfence.ActivateRequest{Scope: kubeScope, Executor: executor, Claim: claim, Request: req,
			Decision: "approval-" + claim})
		if err != nil {
			return g, fmt.Errorf("lab: activate over the admin socket: %w", err)
		}
		return g, writeAssignment(dir, file, g.Assignment())
	}
	if _, err := activate(servedWorkerA, "claim-a", "a", req); err != nil {
		return nil, err
	}
	record(uid, "activate grant for worker-a: retention_days 30 -> 45", "")
	a, err := l.startServedWorker(ctx, sv, "worker-a", filepath.Join(dir, "envelope-a.cbor"),
		"--kube-server", s.URL, "--kube-ca", apiCA, "--kube-token", tokenA)
	if err != nil {
		return nil, err
	}
	defer a.kill()
	record("worker-a", "holds its envelope, A's certificate and A's own Kubernetes token, and pauses", "")
	if rep.ObjectBefore, err = readObject(s); err != nil {
		return nil, err
	}

	hold, err := admin.Hold(ctx, kvfence.HoldRequest{Scopes: []string{kubeScope}, Reason: "worker-a lease expired"})
	if err != nil {
		return nil, fmt.Errorf("lab: hold over the admin socket: %w", err)
	}
	record(uid, "hold (admin socket)", fmt.Sprintf("epoch %d -> %d", hold.Scopes[0].PreviousEpoch, hold.Scopes[0].Epoch))
	grantB, err := activate(servedWorkerB, "claim-b", "b", req)
	if err != nil {
		return nil, err
	}
	record(uid, "activate grant for worker-b (same change)", grantB.ID)

	if rep.Stale, err = a.command("submit"); err != nil {
		return nil, err
	}
	record("worker-a", "submit its own envelope (superseded grant)", decision(rep.Stale))
	directPatch := filepath.Join(dir, "direct-patch.json")
	if err := writeKubeWrite(directPatch, http.MethodPatch, kubeObjPath, "application/json-patch+json",
		`[{"op":"replace","path":"/data/retention_days","value":"45"}]`); err != nil {
		return nil, err
	}
	if rep.DirectReadOnly, err = a.command("kube-write " + directPatch); err != nil {
		return nil, err
	}
	record("worker-a", "PATCH the ConfigMap with A's own Kubernetes token (read-only RBAC)", kubeResult(rep.DirectReadOnly))
	if err := grantEdit(s, kubeWorkerA); err != nil {
		return nil, err
	}
	record("admin", "widens RBAC by mistake: a RoleBinding lets worker-a update and patch ConfigMaps in prod", "")
	if l.hooks.beforeKubeDirectWithEdit != nil {
		if err := l.hooks.beforeKubeDirectWithEdit(s); err != nil {
			return nil, err
		}
	}
	if rep.DirectWithEdit, err = a.command("kube-write " + directPatch); err != nil {
		return nil, err
	}
	record("worker-a", "PATCH again, now allowed by RBAC", kubeResult(rep.DirectWithEdit))
	if err := a.finish(); err != nil {
		return nil, err
	}
	// A write the server never answered says nothing about what refuses
	// the worker.
	for _, w := range []workerResult{rep.DirectReadOnly, rep.DirectWithEdit} {
		if w.HTTPStatus == 0 {
			return nil, fmt.Errorf("%w: %s: worker-a's own write got no answer from the API server: %s", ErrPrecondition, name, w.Detail)
		}
	}
	if rep.ObjectBeforeCurrentWorker, err = readObject(s); err != nil {
		return nil, err
	}

	b, err := l.startServedWorker(ctx, sv, "worker-b", filepath.Join(dir, "envelope-b.cbor"))
	if err != nil {
		return nil, err
	}
	defer b.kill()
	if rep.Current, err = b.command("submit"); err != nil {
		return nil, err
	}
	record("worker-b", "submit (current grant)", decision(rep.Current)+" version "+rep.Current.Version)
	if rep.ObjectAfterCurrentWorker, err = readObject(s); err != nil {
		return nil, err
	}
	if rep.Current.AuditSeq <= rep.Stale.AuditSeq {
		return nil, fmt.Errorf("%w: %s: worker-b was decided (seq %d) before worker-a (seq %d)",
			ErrPrecondition, name, rep.Current.AuditSeq, rep.Stale.AuditSeq)
	}

	// B's next change, with the PUT held on the wire while the object
	// changes out of band.
	if _, err := admin.Hold(ctx, kvfence.HoldRequest{Scopes: []string{kubeScope}, Reason: "next change"}); err != nil {
		return nil, fmt.Errorf("lab: hold over the admin socket: %w", err)
	}
	req2, err := patch("45", "60")
	if err != nil {
		return nil, err
	}
	if _, err := activate(servedWorkerB, "claim-b2", "b2", req2); err != nil {
		return nil, err
	}
	record(uid, "hold, then activate worker-b's next change: retention_days 45 -> 60", "")
	if err := b.finish(); err != nil {
		return nil, err
	}
	b2, err := l.startServedWorker(ctx, sv, "worker-b", filepath.Join(dir, "envelope-b2.cbor"))
	if err != nil {
		return nil, err
	}
	defer b2.kill()
	held := gate.arm(kubeObjPath)
	type answer struct {
		res workerResult
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := b2.command("submit")
		answered <- answer{res, err}
	}()
	select {
	case <-held:
		rep.PutHeld = true
	case ans := <-answered:
		gate.release()
		return nil, fmt.Errorf("%w: %s: worker-b's write was answered (%s, %v) before its PUT reached the proxy",
			ErrPrecondition, name, decision(ans.res), ans.err)
	case <-time.After(30 * time.Second):
		gate.release()
		return nil, fmt.Errorf("%w: %s: the receiver's PUT did not reach the proxy within 30 s", ErrPrecondition, name)
	}
	record("network", "holds the receiver's PUT of worker-b's write (decided on the object as read)", "")
	r, err := s.DoWith(kubeproc.Receiver, http.MethodPatch, kubeObjPath, "application/json-patch+json",
		[]byte(`[{"op":"add","path":"/data/owner","value":"`+outOfBandOwner+`"}]`))
	if err != nil {
		gate.release()
		return nil, err
	}
	rep.OutOfBand = workerResult{Outcome: kubeOutcome(r.Status), HTTPStatus: r.Status, Detail: kubeMessage(r.Status, r.Body)}
	record("out of band", "PATCH data.owner directly on the API server with the receiver's own credentials", kubeResult(rep.OutOfBand))
	gate.release()
	ans := <-answered
	if ans.err != nil {
		return nil, ans.err
	}
	rep.Concurrent = ans.res
	record("worker-b", "its write's answer", decision(rep.Concurrent)+" dispatch "+rep.Concurrent.Dispatch)
	if err := b2.finish(); err != nil {
		return nil, err
	}
	if !accepted(rep.OutOfBand) {
		return nil, fmt.Errorf("%w: %s: the out-of-band change was refused: %s", ErrPrecondition, name, kubeResult(rep.OutOfBand))
	}
	if rep.FinalObject, err = readObject(s); err != nil {
		return nil, err
	}

	code, err := sv.stop()
	if err != nil {
		return nil, err
	}
	rep.ServeExitCode = code
	record("operator", "SIGTERM to kvfence serve", "exit "+strconv.Itoa(code))
	if code != 0 {
		return nil, fmt.Errorf("lab: kvfence serve exited %d after SIGTERM: %s", code, sv.logText())
	}
	if err := rc.observe(func(r *kvfence.Receiver) error { return exportStateOf(dir, r, kubeScope) }); err != nil {
		return nil, err
	}
	v, err := rc.verifyChain()
	if err != nil {
		return nil, err
	}
	rep.VerifyChain, rep.VerifyDetail = string(v.Problem), v.Detail
	record("operator", "verify-chain", rep.VerifyChain)
	if err := writeJSON(filepath.Join(dir, "report.json"), rep); err != nil {
		return nil, err
	}
	l.logf("%s: worker-a %s, direct writes %d and %d; worker-b %s; concurrent write %s (%s); verify-chain %s", name,
		decision(rep.Stale), rep.DirectReadOnly.HTTPStatus, rep.DirectWithEdit.HTTPStatus, decision(rep.Current),
		decision(rep.Concurrent), rep.Concurrent.Dispatch, rep.VerifyChain)
	return rep, nil
}

// kubeScope is demonstration 8's protected scope.
const kubeScope = "configmap/prod/backup-policy"

// readObject reads the ConfigMap as the administrator.
func readObject(s *kubeproc.Server) (kubeView, error) {
	r, err := s.Do(kubeproc.Admin, http.MethodGet, kubeObjPath, nil)
	if err != nil {
		return kubeView{}, err
	}
	if r.Status != http.StatusOK {
		return kubeView{}, fmt.Errorf("lab: reading %s: %s", kubeObjPath, r)
	}
	var o struct {
		Metadata struct {
			ResourceVersion string            `json:"resourceVersion"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &o); err != nil {
		return kubeView{}, fmt.Errorf("lab: reading %s: %w", kubeObjPath, err)
	}
	return kubeView{ResourceVersion: o.Metadata.ResourceVersion, Data: o.Data, Annotations: o.Metadata.Annotations}, nil
}

// grantEdit binds a Role that lets user update and patch ConfigMaps in
// the namespace, and waits until RBAC no longer refuses user's dry-run
// PATCH, so that what refuses it next is the admission policy.
func grantEdit(s *kubeproc.Server, user string) error {
	role := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"lab-misconfigured-edit"},` +
		`"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","update","patch"]}]}`
	binding := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"lab-misconfigured-edit"},` +
		`"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"lab-misconfigured-edit"},` +
		`"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"` + user + `"}]}`
	base := "/apis/rbac.authorization.k8s.io/v1/namespaces/" + kubeNamespace
	for _, c := range []struct{ path, body string }{{base + "/roles", role}, {base + "/rolebindings", binding}} {
		r, err := s.Do(kubeproc.Admin, http.MethodPost, c.path, []byte(c.body))
		if err != nil {
			return err
		}
		if r.Status != http.StatusCreated {
			return fmt.Errorf("lab: creating %s: %s", c.path, r)
		}
	}
	return s.WaitStatus(user, http.MethodPatch, kubeObjPath+"?dryRun=All", `[{"op":"add","path":"/data/probe","value":"x"}]`,
		http.StatusForbidden, kubeproc.PolicyMessage)
}

// kubeWrite is a request a worker sends to the API server with its own
// credentials: the file a kube-write command names.
type kubeWrite struct {
	// Method and Path are the request's method and API path.
	Method string `json:"method"`
	Path   string `json:"path"`
	// ContentType and Body are the request's body.
	ContentType string `json:"content_type"`
	Body        string `json:"body"`
}

func writeKubeWrite(path, method, apiPath, contentType, body string) error {
	return writeJSON(path, kubeWrite{Method: method, Path: apiPath, ContentType: contentType, Body: body})
}

// kubeOutcome names an API server's answer to a write.
func kubeOutcome(status int) string {
	if status >= 200 && status < 300 {
		return "accepted"
	}
	return "refused"
}

// kubeMessage is the message of an API server's Status answer, the
// resourceVersion an accepted write left, or the start of the body.
func kubeMessage(status int, body []byte) string {
	var st struct {
		Message  string `json:"message"`
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.Unmarshal(body, &st) == nil {
		switch {
		case status >= 200 && status < 300 && st.Metadata.ResourceVersion != "":
			return "resourceVersion " + st.Metadata.ResourceVersion
		case st.Message != "":
			return st.Message
		}
	}
	if len(body) > 300 {
		body = body[:300]
	}
	return string(body)
}

func kubeResult(w workerResult) string {
	return fmt.Sprintf("%s %d: %s", w.Outcome, w.HTTPStatus, w.Detail)
}

// kubeClient is a served worker's own Kubernetes client: a bearer token
// and the API server's CA, as a worker's pod would have.
type kubeClient struct {
	server, token string
	http          *http.Client
}

func newKubeClient(server, caFile, tokenFile string) (*kubeClient, error) {
	if server == "" {
		return nil, nil
	}
	if caFile == "" || tokenFile == "" {
		return nil, errors.New("--kube-server needs --kube-ca and --kube-token")
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", caFile)
	}
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, err
	}
	return &kubeClient{server: server, token: string(tok), http: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}}, nil
}

// write sends the request in file and records the API server's answer.
func (k *kubeClient) write(ctx context.Context, file string, res *workerResult) error {
	if k == nil {
		return errors.New("kube-write needs --kube-server")
	}
	var w kubeWrite
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	req, err := http.NewRequestWithContext(ctx, w.Method, k.server+w.Path, strings.NewReader(w.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+k.token)
	req.Header.Set("Content-Type", w.ContentType)
	req.Header.Set("Accept", "application/json")
	resp, err := k.http.Do(req)
	if err != nil {
		res.Outcome, res.Detail = OutcomeCallFailed, err.Error()
		return nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	res.Outcome, res.HTTPStatus, res.Detail = kubeOutcome(resp.StatusCode), resp.StatusCode, kubeMessage(resp.StatusCode, body)
	return nil
}

// kubeProxy is the network between the receiver and the API server: it
// forwards every request, except that once armed it holds the next PUT of
// one object until released, so that a change can land between the
// receiver's decision and its write.
type kubeProxy struct {
	url, caFile string
	srv         *http.Server
	mu          sync.Mutex
	path        string
	held        chan struct{}
	released    chan struct{}
	// rewrite, for tests, changes the held PUT before it is forwarded.
	rewrite func(*http.Request) error
}

func startKubeProxy(upstream string, upstreamCA []byte, dir string, rewrite func(*http.Request) error) (*kubeProxy, error) {
	target, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(upstreamCA) {
		return nil, errors.New("lab: the API server's CA is not PEM")
	}
	ca, err := pki.NewCA("kvfence lab network", time.Hour)
	if err != nil {
		return nil, err
	}
	cert, err := pki.Issue(ca, pki.Options{Name: "kvfence lab proxy", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true,
		Validity: time.Hour})
	if err != nil {
		return nil, err
	}
	p := &kubeProxy{caFile: filepath.Join(dir, "proxy-ca.crt"), rewrite: rewrite}
	if err := os.WriteFile(p.caFile, ca.CertPEM(), 0o600); err != nil {
		return nil, err
	}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		// Watches stream: every write reaches the client at once.
		FlushInterval: -1,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.url = "https://" + ln.Addr().String()
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if p.wait(r) && p.rewrite != nil {
				if err := p.rewrite(r); err != nil {
					http.Error(w, err.Error(), http.StatusBadGateway)
					return
				}
			}
			rp.ServeHTTP(w, r)
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert.TLS()}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go p.srv.ServeTLS(ln, "", "")
	return p, nil
}

// arm makes the proxy hold the next PUT of path; the returned channel is
// closed once it holds one.
func (p *kubeProxy) arm(path string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.path, p.held, p.released = path, make(chan struct{}), make(chan struct{})
	return p.held
}

// release lets the held PUT (or the next one) go on, and disarms.
func (p *kubeProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released != nil {
		close(p.released)
		p.released = nil
	}
	p.path = ""
}

// wait holds r if it is the PUT the proxy is armed for, and says whether
// it was.
func (p *kubeProxy) wait(r *http.Request) bool {
	p.mu.Lock()
	if p.path == "" || r.Method != http.MethodPut || r.URL.Path != p.path {
		p.mu.Unlock()
		return false
	}
	held, released := p.held, p.released
	p.path = ""
	p.mu.Unlock()
	close(held)
	select {
	case <-released:
	case <-r.Context().Done():
	}
	return true
}

func (p *kubeProxy) close() {
	p.release()
	p.srv.Close()
}
