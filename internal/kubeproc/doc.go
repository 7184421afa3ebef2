// Package kubeproc runs a real Kubernetes API server for tests and the lab: a
// kube-apiserver process on loopback, on a fresh etcd member of its own (or
// a cluster the caller names), with a fresh CA and serving certificate, a
// service-account key pair, a static token file that names the identities
// the tests act as, and RBAC authorization. Every process is killed when
// the test ends, failed or not, and dies with the test binary if that is
// killed first (Linux).
//
// The binary is $KVFENCE_KUBE_APISERVER_BIN if set, else
// k8s.io/kubernetes/cmd/kube-apiserver built by Binary in a scratch module
// under the user's cache directory, so that the kvfence module itself
// requires nothing of the server's build: this package speaks to the
// server over net/http and encoding/json alone. The first build takes minutes, so the
// tests that need a server run only when $KVFENCE_KUBE is 1 (.ci/run sets
// it); without it Require skips them and says so.
//
// The package links nothing of package testing (Start takes this
// package's TB), so that the lab, part of the kvfence binary, launches
// servers through Launch and Close. Cached says whether a server is at
// hand without a build.
package kubeproc
