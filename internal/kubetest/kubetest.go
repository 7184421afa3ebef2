// Package kubetest starts a real kube-apiserver (internal/kubeproc) with
// deploy/kubernetes's admission policy and RBAC applied, for tests that
// fence Kubernetes objects over the CLI or the lab.
package kubetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	deploy "github.com/kvfence/kvfence/deploy/kubernetes"
	"github.com/kvfence/kvfence/internal/kubeproc"
	"sigs.k8s.io/yaml"
)

// PolicyMessage is part of the admission policy's refusal.
const PolicyMessage = "change only through the kvfence receiver"

// manifestCollections are the REST collections of the kinds the shipped
// manifests hold; %s is the namespace.
var manifestCollections = map[string]string{
	"v1/Namespace":      "/api/v1/namespaces",
	"v1/ServiceAccount": "/api/v1/namespaces/%s/serviceaccounts",
	"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy":        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
	"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
	"rbac.authorization.k8s.io/v1/ClusterRole":                         "/apis/rbac.authorization.k8s.io/v1/clusterroles",
	"rbac.authorization.k8s.io/v1/RoleBinding":                         "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings",
}

// StartDeployed starts a server, creates namespace, and applies the
// shipped manifests as the administrator. It skips the test unless the
// Kubernetes tests are enabled (kubeproc.Require).
func StartDeployed(t testing.TB, namespace string) *kubeproc.Server {
	t.Helper()
	kubeproc.Require(t)
	s := kubeproc.Start(t, kubeproc.Config{})
	s.Must(kubeproc.Admin, http.MethodPost, "/api/v1/namespaces", []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"`+namespace+`"}}`), http.StatusCreated)
	sep := regexp.MustCompile(`(?m)^---[ \t]*$`)
	for _, name := range deploy.Names() {
		b, err := deploy.Manifests.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range sep.Split(string(b), -1) {
			j, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				t.Fatalf("%s document %d: %v", name, i, err)
			}
			if string(j) == "null" {
				continue
			}
			var head struct {
				APIVersion, Kind string
				Metadata         struct{ Namespace string }
			}
			if err := json.Unmarshal(j, &head); err != nil {
				t.Fatal(err)
			}
			coll, ok := manifestCollections[head.APIVersion+"/"+head.Kind]
			if !ok {
				t.Fatalf("%s document %d: kind %s/%s has no collection here", name, i, head.APIVersion, head.Kind)
			}
			if strings.Contains(coll, "%s") {
				coll = fmt.Sprintf(coll, head.Metadata.Namespace)
			}
			s.Must(kubeproc.Admin, http.MethodPost, coll, j, http.StatusCreated)
		}
	}
	return s
}

// CreateScoped makes ConfigMap name in namespace with data as the
// administrator, has the receiver add the label kvfence.dev/scope (only it
// may, once the policy stands), and waits until the policy refuses the
// administrator's change to it.
func CreateScoped(t testing.TB, s *kubeproc.Server, namespace, name string, data map[string]string) {
	t.Helper()
	d, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	coll := "/api/v1/namespaces/" + namespace + "/configmaps"
	s.Must(kubeproc.Admin, http.MethodPost, coll, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+name+`"},"data":`+string(d)+`}`), http.StatusCreated)
	label := `[{"op":"add","path":"/metadata/labels","value":{"kvfence.dev/scope":"scoped"}}]`
	WaitStatus(t, s, kubeproc.Receiver, http.MethodPatch, coll+"/"+name+"?dryRun=All", label, http.StatusOK, "")
	s.Must(kubeproc.Receiver, http.MethodPatch, coll+"/"+name, []byte(label), http.StatusOK)
	WaitStatus(t, s, kubeproc.Admin, http.MethodPatch, coll+"/"+name+"?dryRun=All",
		`[{"op":"add","path":"/data/probe","value":"x"}]`, http.StatusForbidden, PolicyMessage)
}

// WaitStatus repeats a request that changes nothing (a read or a dry
// run) until it answers want with bodyHas in its body: RBAC and admission
// policies take effect a moment after their objects are created.
func WaitStatus(t testing.TB, s *kubeproc.Server, identity, method, path, body string, want int, bodyHas string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var b []byte
		if body != "" {
			b = []byte(body)
		}
		r, err := s.Do(identity, method, path, b)
		if err == nil && r.Status == want && strings.Contains(string(r.Body), bodyHas) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s as %s: %v %v; want %d with %q within 30 s", method, path, identity, r, err, want, bodyHas)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kubeconfig writes, in dir, a kubeconfig that acts as identity on s and
// returns its path (mode 0600: it holds a bearer token).
func Kubeconfig(t testing.TB, s *kubeproc.Server, identity, dir string) string {
	t.Helper()
	ca := filepath.Join(dir, identity+"-ca.pem")
	if err := os.WriteFile(ca, s.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: test
  context:
    cluster: test
    user: %s
current-context: test
`, s.URL, ca, identity, s.Tokens[identity], identity)
	p := filepath.Join(dir, identity+".kubeconfig")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
