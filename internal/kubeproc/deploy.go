package kubeproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	deploy "github.com/kvfence/kvfence/deploy/kubernetes"
	"sigs.k8s.io/yaml"
)

// PolicyMessage is part of the shipped admission policy's refusal.
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

// docSeparator splits a YAML stream into its documents.
var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// Deploy creates namespace and applies deploy/kubernetes's manifests (the
// admission policy and its binding, the receiver's service account, the
// workers' read-only RBAC) as Admin.
func (s *Server) Deploy(namespace string) error {
	if err := s.expect(Admin, http.MethodPost, "/api/v1/namespaces",
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"`+namespace+`"}}`, http.StatusCreated); err != nil {
		return err
	}
	for _, name := range deploy.Names() {
		b, err := deploy.Manifests.ReadFile(name)
		if err != nil {
			return fmt.Errorf("kubeproc: %w", err)
		}
		for i, doc := range docSeparator.Split(string(b), -1) {
			j, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				return fmt.Errorf("kubeproc: %s document %d: %w", name, i, err)
			}
			if string(j) == "null" {
				continue
			}
			var head struct {
				APIVersion, Kind string
				Metadata         struct{ Namespace string }
			}
			if err := json.Unmarshal(j, &head); err != nil {
				return fmt.Errorf("kubeproc: %s document %d: %w", name, i, err)
			}
			coll, ok := manifestCollections[head.APIVersion+"/"+head.Kind]
			if !ok {
				return fmt.Errorf("kubeproc: %s document %d: kind %s/%s has no collection here", name, i, head.APIVersion, head.Kind)
			}
			if strings.Contains(coll, "%s") {
				coll = fmt.Sprintf(coll, head.Metadata.Namespace)
			}
			if err := s.expect(Admin, http.MethodPost, coll, string(j), http.StatusCreated); err != nil {
				return err
			}
		}
	}
	return nil
}

// CreateScoped makes ConfigMap name in namespace with data as Admin, has
// Receiver add the label kvfence.dev/scope with the value scope (only it
// may, once the policy stands), and waits until the policy refuses
// Admin's change to it.
func (s *Server) CreateScoped(namespace, name, scope string, data map[string]string) error {
	d, err := json.Marshal(data)
	if err != nil {
		return err
	}
	sc, err := json.Marshal(scope)
	if err != nil {
		return err
	}
	coll := "/api/v1/namespaces/" + namespace + "/configmaps"
	if err := s.expect(Admin, http.MethodPost, coll,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+name+`"},"data":`+string(d)+`}`, http.StatusCreated); err != nil {
		return err
	}
	label := `[{"op":"add","path":"/metadata/labels","value":{"kvfence.dev/scope":` + string(sc) + `}}]`
	if err := s.WaitStatus(Receiver, http.MethodPatch, coll+"/"+name+"?dryRun=All", label, http.StatusOK, ""); err != nil {
		return err
	}
	if err := s.expect(Receiver, http.MethodPatch, coll+"/"+name, label, http.StatusOK); err != nil {
		return err
	}
	return s.WaitStatus(Admin, http.MethodPatch, coll+"/"+name+"?dryRun=All",
		`[{"op":"add","path":"/data/probe","value":"x"}]`, http.StatusForbidden, PolicyMessage)
}

// WaitTimeout bounds WaitStatus.
const WaitTimeout = 30 * time.Second

// ErrWaitTimedOut means WaitStatus did not see the answer it waited for.
var ErrWaitTimedOut = errors.New("kubeproc: the answer waited for did not come")

// WaitStatus repeats a request that changes nothing (a read or a dry run)
// as identity until it answers want with bodyHas in its body, for at most
// WaitTimeout: RBAC and admission policies take effect a moment after
// their objects are created.
func (s *Server) WaitStatus(identity, method, path, body string, want int, bodyHas string) error {
	deadline := time.Now().Add(WaitTimeout)
	for {
		var b []byte
		if body != "" {
			b = []byte(body)
		}
		r, err := s.Do(identity, method, path, b)
		if err == nil && r.Status == want && strings.Contains(string(r.Body), bodyHas) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s %s as %s: %v %v; want %d with %q within %v", ErrWaitTimedOut, method, path, identity, r, err,
				want, bodyHas, WaitTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WriteKubeconfig writes to path (mode 0600: it holds a bearer token) a
// kubeconfig that acts as identity on the server at url, trusting the CA
// in caFile: s's own URL and CA, or a proxy's in front of it.
func (s *Server) WriteKubeconfig(path, identity, url, caFile string) error {
	tok, ok := s.Tokens[identity]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownIdentity, identity)
	}
	// A kubeconfig's relative paths are read from its own directory, not
	// the writer's working directory.
	caFile, err := filepath.Abs(caFile)
	if err != nil {
		return fmt.Errorf("kubeproc: %w", err)
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kvfence
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: kvfence
  context:
    cluster: kvfence
    user: %s
current-context: kvfence
`, url, caFile, identity, tok, identity)
	return os.WriteFile(path, []byte(cfg), 0o600)
}

// expect sends a request as identity and returns an error unless it
// answers want.
func (s *Server) expect(identity, method, path, body string, want int) error {
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	r, err := s.Do(identity, method, path, b)
	if err != nil {
		return fmt.Errorf("kubeproc: %s %s as %s: %w", method, path, identity, err)
	}
	if r.Status != want {
		return fmt.Errorf("kubeproc: %s %s as %s: %s; want %d", method, path, identity, r, want)
	}
	return nil
}
