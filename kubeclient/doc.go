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
// it gave expires, and again after the server answers 401 to it.
//
// # What is refused
//
// Where a kubeconfig asks for something this package does not do, it is
// refused by name (ErrUnsupported) rather than ignored, because ignoring
// it would make the receiver act with other credentials, or another
// identity, than the file says: insecure-skip-tls-verify, username and
// password, auth-provider, impersonation (as, as-groups, as-uid,
// as-user-extra) and an interactive plugin. A server URL must be https:
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
