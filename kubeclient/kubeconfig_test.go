package kubeclient

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeFiles writes name → content under a fresh directory and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// kubeconfigOf returns a kubeconfig with one context "c" of cluster and
// user, given as YAML mapping bodies (indented by four spaces).
func kubeconfigOf(cluster, user string) string {
	return `apiVersion: v1
kind: Config
current-context: c
clusters:
- name: k
  cluster:
` + cluster + `
users:
- name: u
  user:
` + user + `
contexts:
- name: c
  context: {cluster: k, user: u}
`
}

const server = "    server: https://api.example:6443"

const twoContexts = `kind: Config
current-context: c
clusters:
- {name: k, cluster: {server: "https://api.example"}}
users:
- {name: u, user: {token: abc}}
- {name: w, user: {token: w-token}}
contexts:
- {name: c, context: {cluster: k, user: u}}
- {name: other, context: {cluster: k, user: w}}
`

// Ensure that a kubeconfig's fields reach the Config, its relative paths
// relative to the file, and that every field this package does not
// implement, and every ambiguity, is refused by name rather than
// ignored.
func TestParseKubeconfig(t *testing.T) {
	tc, err := newTestCerts()
	if err != nil {
		t.Fatal(err)
	}
	caB64 := base64.StdEncoding.EncodeToString(tc.caPEM)
	certB64 := base64.StdEncoding.EncodeToString(tc.clientCert)
	keyB64 := base64.StdEncoding.EncodeToString(tc.clientKey)
	files := map[string]string{
		"ca.crt": string(tc.caPEM), "sub/client.crt": string(tc.clientCert), "sub/client.key": string(tc.clientKey),
		"token": "file-token\n",
	}
	for _, c := range []struct {
		name    string
		config  string
		context string
		check   func(t *testing.T, c *Config, dir string)
		wantErr error
		errHas  string
	}{
		{name: "token and CA data", config: kubeconfigOf(server+"\n    certificate-authority-data: "+caB64, "    token: abc"),
			check: func(t *testing.T, c *Config, _ string) {
				if c.Host != "https://api.example:6443" || c.BearerToken != "abc" || string(c.CAData) != string(tc.caPEM) {
					t.Errorf("config %+v", c)
				}
			}},
		{name: "relative files", config: kubeconfigOf(server+"\n    certificate-authority: ca.crt", "    client-certificate: sub/client.crt\n    client-key: sub/client.key"),
			check: func(t *testing.T, c *Config, dir string) {
				if string(c.CAData) != string(tc.caPEM) || c.CertFile != filepath.Join(dir, "sub/client.crt") || c.KeyFile != filepath.Join(dir, "sub/client.key") {
					t.Errorf("files not named relative to the kubeconfig: %q %q", c.CertFile, c.KeyFile)
				}
			}},
		{name: "client certificate data", config: kubeconfigOf(server, "    client-certificate-data: "+certB64+"\n    client-key-data: "+keyB64),
			check: func(t *testing.T, c *Config, _ string) {
				if string(c.CertData) != string(tc.clientCert) {
					t.Error("client certificate data not decoded")
				}
			}},
		{name: "token file", config: kubeconfigOf(server, "    tokenFile: token"),
			check: func(t *testing.T, c *Config, dir string) {
				if c.BearerTokenFile != filepath.Join(dir, "token") {
					t.Errorf("token file %q", c.BearerTokenFile)
				}
			}},
		{name: "exec plugin", config: kubeconfigOf(server+"\n    tls-server-name: kube", "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: ./bin/plugin\n      args: [a, b]\n      env: [{name: X, value: \"y\"}]\n      interactiveMode: IfAvailable\n      provideClusterInfo: true"),
			check: func(t *testing.T, c *Config, dir string) {
				e := c.Exec
				if e == nil || e.Command != filepath.Join(dir, "bin/plugin") || len(e.Args) != 2 || e.Env[0] != (ExecEnv{"X", "y"}) || !e.ProvideClusterInfo || c.TLSServerName != "kube" {
					t.Errorf("exec %+v", e)
				}
			}},
		{name: "exec plugin on PATH", config: kubeconfigOf(server, "    exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: plugin}"),
			check: func(t *testing.T, c *Config, _ string) {
				if c.Exec.Command != "plugin" {
					t.Errorf("a bare command became %q", c.Exec.Command)
				}
			}},
		{name: "named context, not the current one", context: "other", config: twoContexts,
			check: func(t *testing.T, c *Config, _ string) {
				if c.BearerToken != "w-token" {
					t.Errorf("token %q; want the named context's user's", c.BearerToken)
				}
			}},
		{name: "current context", config: twoContexts,
			check: func(t *testing.T, c *Config, _ string) {
				if c.BearerToken != "abc" {
					t.Errorf("token %q; want the current context's user's", c.BearerToken)
				}
			}},
		{name: "key twice", config: strings.Replace(twoContexts, "clusters:", "users: []\nclusters:", 1), wantErr: ErrInvalidConfig},
		{name: "context naming a missing user", context: "other", config: kubeconfigOf(server, "    token: abc") + "- name: other\n  context: {cluster: k, user: u2}\n",
			wantErr: ErrInvalidConfig, errHas: `no user named "u2"`},
		{name: "no such context", context: "nosuch", config: kubeconfigOf(server, "    token: abc"), wantErr: ErrInvalidConfig, errHas: `no context named "nosuch"`},
		{name: "no current context", config: strings.Replace(kubeconfigOf(server, "    token: abc"), "current-context: c\n", "", 1), wantErr: ErrInvalidConfig, errHas: "no current-context"},
		{name: "context twice", config: kubeconfigOf(server, "    token: abc") + "- name: c\n  context: {cluster: k, user: u}\n", wantErr: ErrInvalidConfig, errHas: `2 entries are the context named "c"`},
		{name: "key twice", config: kubeconfigOf(server, "    token: abc\n    token: def"), wantErr: ErrInvalidConfig},
		{name: "key twice, spelled in another case", config: kubeconfigOf(server, "    token: abc\n    Token: def"), wantErr: ErrInvalidConfig, errHas: "differ only in case"},
		{name: "key twice, with a long s", config: kubeconfigOf(server, "    username: abc\n    uſername: def"), wantErr: ErrInvalidConfig, errHas: "differ only in case"},
		{name: "certificate file without key file", config: kubeconfigOf(server, "    client-certificate: sub/client.crt\n    client-key-data: "+keyB64), wantErr: ErrInvalidConfig, errHas: "both or neither"},
		{name: "certificate file not a certificate", config: kubeconfigOf(server, "    client-certificate: token\n    client-key: sub/client.key"), wantErr: ErrInvalidConfig, errHas: "client certificate files"},
		{name: "not a Config", config: strings.Replace(kubeconfigOf(server, "    token: abc"), "kind: Config", "kind: Pod", 1), wantErr: ErrInvalidConfig, errHas: "kind"},
		{name: "plain http", config: kubeconfigOf("    server: http://api.example:8080", "    token: abc"), wantErr: ErrInvalidConfig, errHas: "https"},
		{name: "server with a query", config: kubeconfigOf("    server: https://api.example/?x=1", "    token: abc"), wantErr: ErrInvalidConfig, errHas: "query"},
		{name: "server with user information", config: kubeconfigOf("    server: https://me:pw@api.example", ""), wantErr: ErrInvalidConfig, errHas: "user information"},
		{name: "no server", config: kubeconfigOf("    tls-server-name: x", "    token: abc"), wantErr: ErrInvalidConfig, errHas: "no server"},
		{name: "insecure", config: kubeconfigOf(server+"\n    insecure-skip-tls-verify: true", "    token: abc"), wantErr: ErrUnsupported, errHas: "insecure-skip-tls-verify"},
		{name: "basic auth", config: kubeconfigOf(server, "    username: a\n    password: b"), wantErr: ErrUnsupported, errHas: "username"},
		{name: "auth provider", config: kubeconfigOf(server, "    auth-provider: {name: oidc}"), wantErr: ErrUnsupported, errHas: "auth-provider"},
		{name: "impersonation", config: kubeconfigOf(server, "    token: abc\n    as: system:admin"), wantErr: ErrUnsupported, errHas: "impersonation"},
		{name: "impersonated groups", config: kubeconfigOf(server, "    token: abc\n    as-groups: [system:masters]"), wantErr: ErrUnsupported, errHas: "impersonation"},
		{name: "interactive plugin", config: kubeconfigOf(server, "    exec: {apiVersion: client.authentication.k8s.io/v1, command: p, interactiveMode: Always}"), wantErr: ErrUnsupported, errHas: "interactiveMode"},
		{name: "plugin of another API", config: kubeconfigOf(server, "    exec: {apiVersion: client.authentication.k8s.io/v1alpha1, command: p}"), wantErr: ErrInvalidConfig, errHas: "apiVersion"},
		{name: "token and token file", config: kubeconfigOf(server, "    token: abc\n    tokenFile: token"), wantErr: ErrInvalidConfig, errHas: "more than one"},
		{name: "token and plugin", config: kubeconfigOf(server, "    token: abc\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: p}"), wantErr: ErrInvalidConfig, errHas: "more than one"},
		{name: "certificate without key", config: kubeconfigOf(server, "    client-certificate-data: "+certB64), wantErr: ErrInvalidConfig, errHas: "needs its key"},
		{name: "file and data", config: kubeconfigOf(server+"\n    certificate-authority: ca.crt\n    certificate-authority-data: "+caB64, ""), wantErr: ErrInvalidConfig, errHas: "both certificate-authority"},
		{name: "missing file", config: kubeconfigOf(server+"\n    certificate-authority: absent.crt", ""), wantErr: ErrInvalidConfig, errHas: "absent.crt"},
		{name: "token with a line break", config: kubeconfigOf(server, `    token: "a\r\nX-Evil: 1"`), wantErr: ErrInvalidConfig, errHas: "line break"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeFiles(t, files)
			path := filepath.Join(dir, "kubeconfig")
			if err := os.WriteFile(path, []byte(c.config), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := LoadKubeconfig(path, c.context)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.errHas) {
					t.Fatalf("err = %v; want %v containing %q", err, c.wantErr, c.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, got, dir)
		})
	}
}

// Ensure that only the named file is read: an empty path is an error,
// not $KUBECONFIG or ~/.kube/config, and a file over MaxFileSize is
// refused rather than read in part.
func TestLoadKubeconfig_OnlyTheNamedFile(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other")
	os.WriteFile(other, []byte(kubeconfigOf(server, "    token: abc")), 0o600)
	t.Setenv("KUBECONFIG", other)
	if _, err := LoadKubeconfig("", ""); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("empty path: %v", err)
	}
	big := filepath.Join(dir, "big")
	os.WriteFile(big, []byte(kubeconfigOf(server, "    token: abc")+"#"+strings.Repeat("x", MaxFileSize)+"\n"), 0o600)
	if _, err := LoadKubeconfig(big, ""); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a file over MaxFileSize: %v", err)
	}
}

// Ensure that InCluster takes the server from the environment, the CA and
// token from the pod's files, and refuses outside a pod or without them.
func TestInCluster(t *testing.T) {
	tc, err := newTestCerts()
	if err != nil {
		t.Fatal(err)
	}
	dir := writeFiles(t, map[string]string{"ca.crt": string(tc.caPEM), "token": "tok\n", "empty": ""})
	env := map[string]string{"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
	c, err := inCluster(func(k string) string { return env[k] }, filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Host != "https://[fd00::1]:443" || c.BearerTokenFile != filepath.Join(dir, "token") || string(c.CAData) != string(tc.caPEM) {
		t.Errorf("config %+v", c)
	}
	if _, err := inCluster(func(string) string { return "" }, filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")); !errors.Is(err, ErrNotInCluster) {
		t.Errorf("outside a pod: %v", err)
	}
	if _, err := inCluster(func(k string) string { return env[k] }, filepath.Join(dir, "empty"), filepath.Join(dir, "ca.crt")); !errors.Is(err, ErrCredential) {
		t.Errorf("an empty token: %v", err)
	}
	if _, err := inCluster(func(k string) string { return env[k] }, filepath.Join(dir, "token"), filepath.Join(dir, "absent")); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("no CA: %v", err)
	}
}

// Ensure that a token file is read again once its reading is
// TokenFileRefresh old, and not before: a rotated token is used, and
// every request does not read the file.
func TestTokenFileRefresh(t *testing.T) {
	dir := writeFiles(t, map[string]string{"token": "one"})
	now := time.Unix(1000, 0)
	c := &Config{Host: "https://x", BearerTokenFile: filepath.Join(dir, "token"), now: func() time.Time { return now }}
	cr, err := c.credentials()
	if err != nil {
		t.Fatal(err)
	}
	read := func() string {
		tok, _, err := cr.bearer(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	if got := read(); got != "one" {
		t.Fatalf("token %q", got)
	}
	os.WriteFile(filepath.Join(dir, "token"), []byte("two\n"), 0o600)
	now = now.Add(TokenFileRefresh - time.Second)
	if got := read(); got != "one" {
		t.Errorf("token %q before the refresh; want the cached one", got)
	}
	now = now.Add(time.Second)
	if got := read(); got != "two" {
		t.Errorf("token %q after the refresh; want the rotated one", got)
	}
}

// FuzzParseKubeconfig checks that no kubeconfig makes the parser panic,
// and that whatever it accepts names an https server and at most one
// source of a token.
func FuzzParseKubeconfig(f *testing.F) {
	f.Add([]byte(kubeconfigOf(server, "    token: abc")))
	f.Add([]byte(kubeconfigOf(server+"\n    insecure-skip-tls-verify: true", "    token: abc")))
	f.Add([]byte(kubeconfigOf(server, "    exec: {apiVersion: client.authentication.k8s.io/v1, command: p}")))
	f.Add([]byte(`{"kind":"Config","current-context":"c","contexts":[{"name":"c","context":{"cluster":"k","user":"u"}}],"clusters":[{"name":"k","cluster":{"server":"https://h"}}],"users":[{"name":"u","user":{}}]}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseKubeconfig(data, dir, "")
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v wraps neither ErrInvalidConfig nor ErrUnsupported", err)
			}
			return
		}
		if !strings.HasPrefix(c.Host, "https://") {
			t.Fatalf("accepted server %q", c.Host)
		}
		n := 0
		for _, set := range []bool{c.BearerToken != "", c.BearerTokenFile != "", c.Exec != nil} {
			if set {
				n++
			}
		}
		if n > 1 {
			t.Fatalf("accepted %d sources of a token", n)
		}
	})
}
