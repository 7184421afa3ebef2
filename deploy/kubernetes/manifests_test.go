package kubernetes_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	deploy "github.com/kvfence/kvfence/deploy/kubernetes"
	"github.com/kvfence/kvfence/internal/kubeproc"
	"sigs.k8s.io/yaml"
)

// object is the part of a manifest or a stored object these tests read.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace,omitempty"`
		ResourceVersion string            `json:"resourceVersion,omitempty"`
		Labels          map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Data map[string]string `json:"data,omitempty"`
}

// collections are the REST collections of the kinds the manifests hold;
// %s is the namespace. A manifest of another kind fails the tests, so that
// no shipped file goes untried.
var collections = map[string]string{
	"v1/Namespace":      "/api/v1/namespaces",
	"v1/ServiceAccount": "/api/v1/namespaces/%s/serviceaccounts",
	"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy":        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
	"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
	"rbac.authorization.k8s.io/v1/ClusterRole":                         "/apis/rbac.authorization.k8s.io/v1/clusterroles",
	"rbac.authorization.k8s.io/v1/RoleBinding":                         "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings",
}

// docSeparator splits a YAML file into its documents.
var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// manifest is one object of a shipped file, as JSON, with where it goes.
type manifest struct {
	file, path string
	json       []byte
}

// loadManifests reads every shipped file, converts each document to JSON
// and finds its collection.
func loadManifests(t *testing.T) []manifest {
	t.Helper()
	var out []manifest
	for _, name := range deploy.Names() {
		b, err := deploy.Manifests.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSeparator.Split(string(b), -1) {
			j, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				t.Fatalf("%s document %d: %v", name, i, err)
			}
			if string(j) == "null" {
				continue // only comments
			}
			var o object
			if err := json.Unmarshal(j, &o); err != nil {
				t.Fatalf("%s document %d: %v", name, i, err)
			}
			coll, ok := collections[o.APIVersion+"/"+o.Kind]
			if !ok {
				t.Fatalf("%s document %d: kind %s/%s has no collection in this test", name, i, o.APIVersion, o.Kind)
			}
			if strings.Contains(coll, "%s") {
				if o.Metadata.Namespace == "" {
					t.Fatalf("%s document %d: %s %s has no namespace", name, i, o.Kind, o.Metadata.Name)
				}
				coll = fmt.Sprintf(coll, o.Metadata.Namespace)
			}
			out = append(out, manifest{file: name, path: coll, json: j})
		}
	}
	return out
}

// Ensure that every shipped file parses into objects of kinds the tests
// apply, and that the policy refuses on failure and is bound to deny.
func TestManifestsParse(t *testing.T) {
	ms := loadManifests(t)
	kinds := map[string]int{}
	for _, m := range ms {
		var o object
		json.Unmarshal(m.json, &o)
		kinds[o.Kind]++
	}
	for _, tc := range []struct {
		kind string
		n    int
	}{
		{"ValidatingAdmissionPolicy", 1},
		{"ValidatingAdmissionPolicyBinding", 1},
		{"ClusterRole", 2},
		{"RoleBinding", 2},
		{"ServiceAccount", 1},
	} {
		if kinds[tc.kind] != tc.n {
			t.Errorf("%d objects of kind %s, want %d", kinds[tc.kind], tc.kind, tc.n)
		}
	}
	var all bytes.Buffer
	for _, m := range ms {
		all.Write(m.json)
	}
	for _, want := range []string{`"failurePolicy":"Fail"`, `"validationActions":["Deny"]`, kubeproc.ReceiverUser} {
		if !bytes.Contains(all.Bytes(), []byte(want)) {
			t.Errorf("no manifest holds %s", want)
		}
	}
}

const (
	ns        = "prod"
	cmColl    = "/api/v1/namespaces/" + ns + "/configmaps"
	scoped    = cmColl + "/backup-policy"
	unscoped  = cmColl + "/unscoped"
	scopeKey  = "kvfence.dev/scope"
	dryRun    = "?dryRun=All"
	denialMsg = "change only through the kvfence receiver"
)

// Ensure that, with the shipped manifests applied to a real API server, a
// worker's own credentials are refused on every write path to an object
// labelled kvfence.dev/scope (RBAC: read only), an identity that RBAC lets
// write is refused by the admission policy, a cluster administrator too,
// the receiver is allowed, and an object without the label is unaffected
// by the policy.
func TestManifestsCloseWritePaths(t *testing.T) {
	kubeproc.Require(t)
	s := kubeproc.Start(t, kubeproc.Config{})
	// The target namespace exists before its bindings, as README.md says.
	s.Must(kubeproc.Admin, http.MethodPost, "/api/v1/namespaces", []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"`+ns+`"}}`), http.StatusCreated)
	// An identity that RBAC lets write configmaps, given here and not
	// shipped: what it is refused, only the policy refuses.
	s.Must(kubeproc.Admin, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/clusterroles",
		[]byte(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"test-editor"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list","create","update","patch","delete","deletecollection"]}]}`), http.StatusCreated)
	s.Must(kubeproc.Admin, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/namespaces/"+ns+"/rolebindings",
		[]byte(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"test-editor","namespace":"`+ns+`"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"test-editor"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"`+kubeproc.EditorsGroup+`"}]}`), http.StatusCreated)
	for _, name := range []string{"backup-policy", "unscoped"} {
		s.Must(kubeproc.Admin, http.MethodPost, cmColl, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+name+`"},"data":{"retention_days":"30"}}`), http.StatusCreated)
	}
	// The control: before the policy, the editor may change the object
	// that is about to be scoped (once RBAC has seen its new binding).
	waitStatus(t, s, kubeproc.Editor, http.MethodPatch, scoped+dryRun, `[{"op":"replace","path":"/data/retention_days","value":"1"}]`, http.StatusOK)

	began := time.Now()
	for _, m := range loadManifests(t) {
		if r := do(t, s, kubeproc.Admin, http.MethodPost, m.path, string(m.json)); r.Status != http.StatusCreated {
			t.Fatalf("applying %s to %s: %v", m.file, m.path, r)
		}
	}
	// The receiver brings the object under the fence: only it may add
	// the label. RBAC grants the receiver's new binding a moment after its
	// creation; a refused dry run changes nothing, so it is safe to retry.
	label := `[{"op":"add","path":"/metadata/labels","value":{"` + scopeKey + `":"backup-policy"}}]`
	waitStatus(t, s, kubeproc.Receiver, http.MethodPatch, scoped+dryRun, label, http.StatusOK)
	if r := do(t, s, kubeproc.Receiver, http.MethodPatch, scoped, label); r.Status != http.StatusOK {
		t.Fatalf("receiver labelling the target: %v", r)
	}
	// The policy takes effect some time after its creation: poll with a
	// dry run until it refuses the administrator.
	for {
		r := do(t, s, kubeproc.Admin, http.MethodPatch, scoped+dryRun, `[{"op":"replace","path":"/data/retention_days","value":"1"}]`)
		if r.Status == http.StatusForbidden && strings.Contains(string(r.Body), denialMsg) {
			break
		}
		if time.Since(began) > 30*time.Second {
			t.Fatalf("the policy was not in effect 30 s after its creation: %v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("policy in effect %v after the manifests' first object was created", time.Since(began).Round(time.Millisecond))

	before := get(t, s, scoped)
	if before.Metadata.Labels[scopeKey] != "backup-policy" {
		t.Fatalf("target not labelled: %+v", before)
	}
	rv := before.Metadata.ResourceVersion
	// rbacDenied is RBAC's refusal; policyDenied the policy's.
	const rbacDenied, policyDenied = "cannot", denialMsg
	writes := []struct {
		name, method, path, contentType, body string
	}{
		{"update", http.MethodPut, scoped, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"backup-policy","resourceVersion":"` + rv + `","labels":{"` + scopeKey + `":"backup-policy"}},"data":{"retention_days":"45"}}`},
		{"json patch", http.MethodPatch, scoped, "application/json-patch+json", `[{"op":"replace","path":"/data/retention_days","value":"45"}]`},
		{"merge patch", http.MethodPatch, scoped, "application/merge-patch+json", `{"data":{"retention_days":"45"}}`},
		{"strategic merge patch", http.MethodPatch, scoped, "application/strategic-merge-patch+json", `{"data":{"retention_days":"45"}}`},
		{"server-side apply", http.MethodPatch, scoped + "?fieldManager=intruder&force=true", "application/apply-patch+yaml", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"backup-policy"},"data":{"retention_days":"45"}}`},
		{"delete", http.MethodDelete, scoped, "", ""},
		{"delete collection", http.MethodDelete, cmColl + "?labelSelector=" + scopeKey, "", ""},
		{"label removal", http.MethodPatch, scoped, "application/json-patch+json", `[{"op":"remove","path":"/metadata/labels/kvfence.dev~1scope"}]`},
		{"label removal by merge patch", http.MethodPatch, scoped, "application/merge-patch+json", `{"metadata":{"labels":{"` + scopeKey + `":null}}}`},
		{"label change", http.MethodPatch, scoped, "application/json-patch+json", `[{"op":"replace","path":"/metadata/labels/kvfence.dev~1scope","value":"other"}]`},
		{"create labelled", http.MethodPost, cmColl, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"new-target","labels":{"` + scopeKey + `":"x"}}}`},
		{"label added to an unlabelled object", http.MethodPatch, unscoped, "application/merge-patch+json", `{"metadata":{"labels":{"` + scopeKey + `":"x"}}}`},
	}
	for _, tc := range []struct {
		identity, refusal string
	}{
		{kubeproc.Worker, rbacDenied},
		{kubeproc.Editor, policyDenied},
		{kubeproc.Admin, policyDenied},
	} {
		for _, w := range writes {
			r := doWith(t, s, tc.identity, w.method, w.path, w.contentType, w.body)
			if r.Status != http.StatusForbidden || !strings.Contains(string(r.Body), tc.refusal) {
				t.Errorf("%s's %s: %v; want 403 with %q", tc.identity, w.name, r, tc.refusal)
			}
		}
	}
	after := get(t, s, scoped)
	if after.Metadata.ResourceVersion != rv || after.Data["retention_days"] != "30" || after.Metadata.Labels[scopeKey] != "backup-policy" {
		t.Errorf("refused writes changed the target: %+v", after)
	}
	if r := do(t, s, kubeproc.Admin, http.MethodGet, cmColl+"/new-target", ""); r.Status != http.StatusNotFound {
		t.Errorf("a refused create left an object: %v", r)
	}
	if o := get(t, s, unscoped); o.Metadata.Labels[scopeKey] != "" {
		t.Errorf("a refused label addition landed: %+v", o)
	}
	// Workers read.
	waitStatus(t, s, kubeproc.Worker, http.MethodGet, scoped, "", http.StatusOK)

	// The receiver changes the target with its resourceVersion as
	// precondition, by update and by JSON Patch.
	if r := doWith(t, s, kubeproc.Receiver, http.MethodPut, scoped, "application/json", writes[0].body); r.Status != http.StatusOK {
		t.Fatalf("receiver's update: %v", r)
	}
	cur := get(t, s, scoped)
	if r := doWith(t, s, kubeproc.Receiver, http.MethodPatch, scoped, "application/json-patch+json",
		`[{"op":"test","path":"/metadata/resourceVersion","value":"`+cur.Metadata.ResourceVersion+`"},{"op":"replace","path":"/data/retention_days","value":"60"}]`); r.Status != http.StatusOK {
		t.Fatalf("receiver's JSON Patch: %v", r)
	}
	if o := get(t, s, scoped); o.Data["retention_days"] != "60" || o.Metadata.Labels[scopeKey] != "backup-policy" {
		t.Errorf("after the receiver's writes: %+v", o)
	}
	// The receiver's stale write is still a conflict: the policy lets it
	// through, the precondition does not.
	if r := doWith(t, s, kubeproc.Receiver, http.MethodPut, scoped, "application/json", writes[0].body); r.Status != http.StatusConflict {
		t.Errorf("receiver's stale update: %v; want 409", r)
	}

	// An object without the label is not the policy's: the editor
	// changes and deletes it; the worker still may not (RBAC).
	for _, w := range []struct {
		identity, method, contentType, body string
		want                                int
	}{
		{kubeproc.Worker, http.MethodPatch, "application/merge-patch+json", `{"data":{"retention_days":"1"}}`, http.StatusForbidden},
		{kubeproc.Editor, http.MethodPatch, "application/merge-patch+json", `{"data":{"retention_days":"1"}}`, http.StatusOK},
		{kubeproc.Editor, http.MethodDelete, "", "", http.StatusOK},
	} {
		if r := doWith(t, s, w.identity, w.method, unscoped, w.contentType, w.body); r.Status != w.want {
			t.Errorf("%s's %s of the unlabelled object: %v; want %d", w.identity, w.method, r, w.want)
		}
	}
}

// waitStatus repeats a request that changes nothing (a read or a dry run)
// until it answers want, for a grant that the API server's RBAC caches
// take a moment to see; it fails the test after 30 s.
func waitStatus(t *testing.T, s *kubeproc.Server, identity, method, path, body string, want int) {
	t.Helper()
	if method != http.MethodGet && !strings.HasSuffix(path, dryRun) {
		t.Fatalf("waitStatus repeats only reads and dry runs, not %s %s", method, path)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := do(t, s, identity, method, path, body)
		if r.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s as %s: %v; want %d within 30 s", method, path, identity, r, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func do(t *testing.T, s *kubeproc.Server, identity, method, path, body string) *kubeproc.Response {
	t.Helper()
	ct := "application/json"
	if method == http.MethodPatch {
		ct = "application/json-patch+json"
	}
	return doWith(t, s, identity, method, path, ct, body)
}

func doWith(t *testing.T, s *kubeproc.Server, identity, method, path, contentType, body string) *kubeproc.Response {
	t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	r, err := s.DoWith(identity, method, path, contentType, b)
	if err != nil {
		t.Fatalf("%s %s as %s: %v", method, path, identity, err)
	}
	return r
}

func get(t *testing.T, s *kubeproc.Server, path string) object {
	t.Helper()
	var o object
	if err := json.Unmarshal(s.Must(kubeproc.Admin, http.MethodGet, path, nil, http.StatusOK), &o); err != nil {
		t.Fatal(err)
	}
	return o
}
