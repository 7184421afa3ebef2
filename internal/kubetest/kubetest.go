// Package kubetest starts a real kube-apiserver (internal/kubeproc) with
// deploy/kubernetes's admission policy and RBAC applied, for tests that
// fence Kubernetes objects over the CLI or the lab.
package kubetest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfence/kvfence/internal/kubeproc"
)

// PolicyMessage is part of the admission policy's refusal.
const PolicyMessage = kubeproc.PolicyMessage

// StartDeployed starts a server, creates namespace, and applies the
// shipped manifests as the administrator. It skips the test unless the
// Kubernetes tests are enabled (kubeproc.Require).
func StartDeployed(t testing.TB, namespace string) *kubeproc.Server {
	t.Helper()
	kubeproc.Require(t)
	s := kubeproc.Start(t, kubeproc.Config{})
	if err := s.Deploy(namespace); err != nil {
		t.Fatal(err)
	}
	return s
}

// CreateScoped makes ConfigMap name in namespace with data as the
// administrator, has the receiver add the label kvfence.dev/scope (only it
// may, once the policy stands), and waits until the policy refuses the
// administrator's change to it.
func CreateScoped(t testing.TB, s *kubeproc.Server, namespace, name string, data map[string]string) {
	t.Helper()
	if err := s.CreateScoped(namespace, name, "scoped", data); err != nil {
		t.Fatal(err)
	}
}

// WaitStatus repeats a request that changes nothing (a read or a dry
// run) until it answers want with bodyHas in its body: RBAC and admission
// policies take effect a moment after their objects are created.
func WaitStatus(t testing.TB, s *kubeproc.Server, identity, method, path, body string, want int, bodyHas string) {
	t.Helper()
	if err := s.WaitStatus(identity, method, path, body, want, bodyHas); err != nil {
		t.Fatal(err)
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
	p := filepath.Join(dir, identity+".kubeconfig")
	if err := s.WriteKubeconfig(p, identity, s.URL, ca); err != nil {
		t.Fatal(err)
	}
	return p
}
