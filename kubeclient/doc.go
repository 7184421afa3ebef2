// Package kubeclient is the part of a Kubernetes client that a receiver
// needs to reach an API server as its own identity: where the server is,
// which certificate authorities vouch for it, and the receiver's
// credentials, read from a kubeconfig file (LoadKubeconfig) or from what
// Kubernetes mounts in every pod (InCluster), and an *http.Client that
// speaks HTTPS with them (Config.HTTPClient). It links no Kubernetes
// module: package kubetarget sends its few requests (read and update a
// ConfigMap) itself.
//
// # Credentials
//
// A Config carries at most one source of a bearer token (BearerToken, a
// token file, or an exec credential plugin) and at most one client
// certificate (static, or the plugin's). A token file is read again when
// its last reading is a minute old, as projected service-account tokens
// rotate. A plugin is run (client.authentication.k8s.io v1 or v1beta1,
// never interactively) for the first request, again when the credential
// it gave expires (at the latest when its certificate does), and again
// after the server answers 401 to it; a request waits for a run only
// until its context ends. When the plugin's certificate changes, the
// client's connections are closed, since TLS presents a certificate only
// when a connection is made. Certificate files are read once.
//
// # What is refused
//
// Where a kubeconfig asks for something this package does not do, it is
// refused by name (ErrUnsupported) rather than ignored, because ignoring
// it would make the receiver act with other credentials, or another
// identity, than the file says: insecure-skip-tls-verify, username and
// password, auth-provider, impersonation (as, as-groups, as-uid,
// as-user-extra), an interactive plugin, and the cluster extension
// client.authentication.k8s.io/exec for a plugin told the cluster. A key
// spelled otherwise than Kubernetes spells it ("Token") is refused, as
// Kubernetes's clients would read it as absent; so is a named certificate
// authority, certificate or key file that is empty, which would otherwise
// mean the system's roots or no certificate. A server URL must be https:
// credentials never travel in clear. Only the named file is read: neither
// $KUBECONFIG nor ~/.kube/config stands in for it, and files are not
// merged.
//
// # Bounds
//
// A kubeconfig, a token file, a certificate file and a plugin's output are
// read up to fixed limits (MaxFileSize, MaxExecOutput); larger input is an
// error, not a truncation. Response bodies are the caller's to bound
// (kubetarget reads at most its MaxResponseBody).
package kubeclient
