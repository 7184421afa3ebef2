package kubeclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
)

// Ensure that a plugin's new client certificate is the one the server
// sees once the old one expired or was refused: a connection kept from
// before still presents the old certificate (TLS sends it only in the
// handshake), so the client must not reuse it.
func TestExecPlugin_CertificateRotationReachesServer(t *testing.T) {
	tc, err := newTestCerts()
	if err != nil {
		t.Fatal(err)
	}
	second, err := pki.Issue(tc.ca, pki.Options{Name: "second", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	secondKey, err := second.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		// revoke makes the server refuse the first certificate (401)
		// rather than the clock pass its expiry.
		revoke bool
		// ownExpiry leaves the plugin's expirationTimestamp out: the
		// certificate's own expiry (24 hours) is the credential's.
		ownExpiry bool
	}{
		{name: "expired"},
		{name: "revoked", revoke: true},
		{name: "past its own expiry", ownExpiry: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var names []string
			refused := map[string]bool{}
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				name := ""
				if len(r.TLS.PeerCertificates) > 0 {
					name = r.TLS.PeerCertificates[0].Subject.CommonName
				}
				names = append(names, name)
				if refused[name] {
					http.Error(w, "Unauthorized", http.StatusUnauthorized)
					return
				}
				fmt.Fprint(w, "{}")
			}))
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{tc.server}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: tc.ca.Pool()}
			srv.StartTLS()
			defer srv.Close()

			t0 := time.Now()
			var now atomic.Pointer[time.Time]
			now.Store(&t0)
			status := map[string]any{"clientCertificateData": string(tc.clientCert), "clientKeyData": string(tc.clientKey),
				"expirationTimestamp": t0.Add(time.Hour).UTC().Format(time.RFC3339)}
			if c.ownExpiry {
				delete(status, "expirationTimestamp")
			}
			first := credential(status)
			next := credential(map[string]any{"clientCertificateData": string(second.CertPEM()), "clientKeyData": string(secondKey)})
			cfg, _ := pluginConfig(t, srv.URL, tc.caPEM, `echo run >>"$COUNT"; if [ "$(wc -l <"$COUNT")" -eq 1 ]; then printf '%s' "$A1"; else printf '%s' "$A2"; fi`,
				ExecEnv{"A1", first}, ExecEnv{"A2", next})
			cfg.now = func() time.Time { return *now.Load() }
			hc, err := cfg.HTTPClient()
			if err != nil {
				t.Fatal(err)
			}
			do := func() int {
				resp, err := hc.Get(srv.URL + "/api")
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			do()
			if c.revoke {
				mu.Lock()
				refused["system:serviceaccount:kvfence:receiver"] = true
				mu.Unlock()
				if code := do(); code != http.StatusUnauthorized {
					t.Fatalf("refused certificate answered %d", code)
				}
			} else {
				later := t0.Add(25 * time.Hour)
				now.Store(&later)
			}
			code := do()
			mu.Lock()
			last := names[len(names)-1]
			mu.Unlock()
			if last != "second" || code != 200 {
				t.Errorf("after the plugin's certificate was %s the server saw %q (status %d); want the plugin's new certificate \"second\"", c.name, last, code)
			}
		})
	}
}

// Ensure that a request's deadline bounds the wait for an exec plugin: a
// plugin that hangs must not hold a request (a dispatch whose deadline the
// receiver committed, or a hold's fence) past its context, up to
// ExecTimeout.
func TestExecPlugin_RequestDeadline(t *testing.T) {
	tc, err := newTestCerts()
	if err != nil {
		t.Fatal(err)
	}
	a := startAPI(t, tc, false)
	script, env := answering(credential(map[string]any{"token": "slow"}))
	cfg, _ := pluginConfig(t, a.URL, tc.caPEM, "sleep 4; "+script, env)
	hc, err := cfg.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"/api", nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := hc.Do(req)
	took := time.Since(start)
	if err == nil {
		resp.Body.Close()
	}
	if took > 1500*time.Millisecond {
		t.Errorf("a request with a 200ms deadline returned after %v, waiting for the plugin (err %v)", took.Round(time.Millisecond), err)
	}
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v; want the request's deadline", err)
	}
}

// Ensure that the cluster's exec extension (client.authentication.k8s.io/exec,
// which Kubernetes's clients give a plugin as spec.cluster.config when
// provideClusterInfo is set) is not silently dropped: a plugin that
// chooses its audience or account by it would give another identity.
func TestParseKubeconfig_ExecClusterConfigNotDropped(t *testing.T) {
	kc := kubeconfigOf(server+`
    extensions:
    - name: client.authentication.k8s.io/exec
      extension: {audience: receiver-cluster}`, `    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: /bin/true
      interactiveMode: Never
      provideClusterInfo: true`)
	_, err := ParseKubeconfig([]byte(kc), t.TempDir(), "")
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("err = %v; want ErrUnsupported (or the extension passed on as spec.cluster.config)", err)
	}
}

// Ensure that a key spelled otherwise than Kubernetes spells it is refused
// rather than honoured: Kubernetes's own clients decode kubeconfig keys
// case-sensitively, so that for them "Token" or "User" is no token and no
// user, while Go's decoder would send the token.
func TestParseKubeconfig_KeysSpelledOtherwise(t *testing.T) {
	for _, c := range []struct{ name, kc string }{
		{name: "Token", kc: kubeconfigOf(server, "    Token: secret")},
		{name: "TOKENFILE", kc: kubeconfigOf(server, "    TOKENFILE: /tmp/token")},
		{name: "Kelvin sign in token", kc: kubeconfigOf(server, "    to\u212aen: secret")},
		{name: "User", kc: strings.Replace(kubeconfigOf(server, "    token: secret"), "  user:\n", "  User:\n", 1)},
		{name: "Server", kc: kubeconfigOf("    Server: https://api.example:6443", "    token: secret")},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseKubeconfig([]byte(c.kc), t.TempDir(), "")
			if err == nil {
				t.Errorf("accepted; the Config's token is %q, token file %q, server %q", cfg.BearerToken, cfg.BearerTokenFile, cfg.Host)
			}
		})
	}
}

// Ensure that a plugin's words cannot break a log line with the Unicode
// line and paragraph separators.
func TestPrintableLineSeparators(t *testing.T) {
	for _, in := range []string{"a\u2028b", "a\u2029b", "a\u0085b"} {
		if got := Printable(in); got != "a?b" {
			t.Errorf("Printable(%+q) = %+q; want \"a?b\"", in, got)
		}
	}
}

// Ensure that a certificate authority file that is named but empty is
// refused, in a kubeconfig and in a pod: an empty CAData means the
// system's roots, so that the token would go to any server a public
// authority vouches for, where the file meant one authority.
func TestEmptyCertificateAuthorityFile(t *testing.T) {
	dir := writeFiles(t, map[string]string{"ca.crt": "", "token": "tok"})
	kc := kubeconfigOf(server+"\n    certificate-authority: ca.crt", "    token: secret")
	if _, err := ParseKubeconfig([]byte(kc), dir, ""); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("kubeconfig naming an empty CA file: err = %v; want ErrInvalidConfig", err)
	}
	env := map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
	if _, err := inCluster(func(k string) string { return env[k] }, dir+"/token", dir+"/ca.crt"); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("a pod whose CA file is empty: err = %v; want ErrInvalidConfig", err)
	}
}

// Ensure that a client certificate and key that a kubeconfig names as
// files are read again as they rotate, as Kubernetes's clients do (every
// five minutes, closing the connections that present the old one): read
// once, the receiver goes on presenting a certificate that expires or is
// replaced, and every request is refused until it restarts.
func TestClientCertificateFilesRotate(t *testing.T) {
	tc, err := newTestCerts()
	if err != nil {
		t.Fatal(err)
	}
	second, err := pki.Issue(tc.ca, pki.Options{Name: "second", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	secondKey, err := second.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	a := startAPI(t, tc, true)
	dir := writeFiles(t, map[string]string{"ca.crt": string(tc.caPEM), "client.crt": string(tc.clientCert), "client.key": string(tc.clientKey)})
	kc := kubeconfigOf("    server: "+a.URL+"\n    certificate-authority: ca.crt", "    client-certificate: client.crt\n    client-key: client.key")
	if err := os.WriteFile(dir+"/config", []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadKubeconfig(dir+"/config", "")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	var now atomic.Pointer[time.Time]
	now.Store(&t0)
	cfg.now = func() time.Time { return *now.Load() }
	hc, err := cfg.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	do := func() {
		resp, err := hc.Get(a.URL + "/api")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	do()
	if err := os.WriteFile(dir+"/client.crt", second.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/client.key", secondKey, 0o600); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(10 * time.Minute)
	now.Store(&later)
	do()
	if _, names := a.seen(); names[len(names)-1] != "second" {
		t.Errorf("ten minutes after the certificate files were replaced the server saw %q; want the new certificate \"second\"", names)
	}
}
