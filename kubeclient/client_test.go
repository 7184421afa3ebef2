package kubeclient

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
)

// testCerts are a CA, a server certificate for 127.0.0.1 and a client
// certificate, all PEM.
type testCerts struct {
	ca                    pki.Pair
	caPEM                 []byte
	server                tls.Certificate
	clientCert, clientKey []byte
}

func newTestCerts() (*testCerts, error) {
	ca, err := pki.NewCA("kubeclient-test-ca", time.Hour)
	if err != nil {
		return nil, err
	}
	srv, err := pki.Issue(ca, pki.Options{Name: "api", DNS: []string{"kube.test"}, IPs: localIPs, Server: true})
	if err != nil {
		return nil, err
	}
	cl, err := pki.Issue(ca, pki.Options{Name: "system:serviceaccount:kvfence:receiver", Client: true})
	if err != nil {
		return nil, err
	}
	key, err := cl.KeyPEM()
	if err != nil {
		return nil, err
	}
	return &testCerts{ca: ca, caPEM: ca.CertPEM(), server: srv.TLS(), clientCert: cl.CertPEM(), clientKey: key}, nil
}

// apiServer is a TLS server that records each request's bearer token and
// client certificate's name, and answers 401 to a token in refuse.
type apiServer struct {
	*httptest.Server
	mu       sync.Mutex
	tokens   []string
	names    []string
	agents   []string
	refuse   map[string]bool
	redirect string
}

func startAPI(t *testing.T, tc *testCerts, clientCerts bool) *apiServer {
	t.Helper()
	a := &apiServer{refuse: map[string]bool{}}
	a.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		a.tokens = append(a.tokens, tok)
		a.agents = append(a.agents, r.UserAgent())
		name := ""
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			name = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		a.names = append(a.names, name)
		if a.redirect != "" {
			http.Redirect(w, r, a.redirect, http.StatusTemporaryRedirect)
			return
		}
		if a.refuse[tok] {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "{}")
	}))
	a.TLS = &tls.Config{Certificates: []tls.Certificate{tc.server}}
	if clientCerts {
		a.TLS.ClientAuth = tls.VerifyClientCertIfGiven
		a.TLS.ClientCAs = tc.ca.Pool()
	}
	a.StartTLS()
	t.Cleanup(a.Close)
	return a
}

func (a *apiServer) seen() (tokens, names []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.tokens...), append([]string(nil), a.names...)
}

// get sends one GET with c's client and returns the status.
func get(t *testing.T, c *Config) (int, error) {
	t.Helper()
	hc, err := c.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(c.Host + "/api")
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Ensure that the client sends the token and the client certificate, and
// trusts only the configured certificate authorities.
func TestHTTPClient_Credentials(t *testing.T) {
	tc, err := newTestCerts()
	if err != nil {
		t.Fatal(err)
	}
	a := startAPI(t, tc, true)
	if code, err := get(t, &Config{Host: a.URL, CAData: tc.caPEM, BearerToken: "tok", UserAgent: "ua"}); err != nil || code != 200 {
		t.Fatalf("token: %d %v", code, err)
	}
	if code, err := get(t, &Config{Host: a.URL, CAData: tc.caPEM, CertData: tc.clientCert, KeyData: tc.clientKey}); err != nil || code != 200 {
		t.Fatalf("certificate: %d %v", code, err)
	}
	tokens, names := a.seen()
	if tokens[0] != "tok" || a.agents[0] != "ua" || names[1] != "system:serviceaccount:kvfence:receiver" {
		t.Errorf("server saw tokens %q, names %q, agents %q", tokens, names, a.agents)
	}

	// Another CA's server is refused, with the token never sent.
	other, err := newTestCerts()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := get(t, &Config{Host: a.URL, CAData: other.caPEM, BearerToken: "leak"}); err == nil {
		t.Error("a server whose certificate the configured CA did not issue was trusted")
	}
	// The system's roots do not vouch for the test CA either.
	if _, err := get(t, &Config{Host: a.URL, BearerToken: "leak"}); err == nil {
		t.Error("a server was trusted by the system roots")
	}
	// The certificate is for kube.test and 127.0.0.1: another server name
	// is refused, the right one accepted.
	if _, err := get(t, &Config{Host: a.URL, CAData: tc.caPEM, TLSServerName: "other.test"}); err == nil {
		t.Error("a certificate without the server name was accepted")
	}
	if code, err := get(t, &Config{Host: a.URL, CAData: tc.caPEM, TLSServerName: "kube.test"}); err != nil || code != 200 {
		t.Errorf("tls-server-name kube.test: %d %v", code, err)
	}
	tokens, _ = a.seen()
	for _, tok := range tokens {
		if tok == "leak" {
			t.Error("the token reached a server that was not authenticated")
		}
	}
	if _, err := (&Config{Host: a.URL, CAData: []byte("not PEM")}).HTTPClient(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("CA data without a certificate: %v", err)
	}
}

// Ensure that the client does not follow a redirect, which would carry
// the credentials to wherever the answer points.
func TestHTTPClient_NoRedirect(t *testing.T) {
	tc, err := newTestCerts()
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := startAPI(t, tc, false)
	a := startAPI(t, tc, false)
	a.redirect = elsewhere.URL + "/stolen"
	code, err := get(t, &Config{Host: a.URL, CAData: tc.caPEM, BearerToken: "tok"})
	if err != nil || code != http.StatusTemporaryRedirect {
		t.Errorf("redirect answered %d %v; want the 307 itself", code, err)
	}
	if tokens, _ := elsewhere.seen(); len(tokens) != 0 {
		t.Errorf("the redirect was followed: the other server saw %q", tokens)
	}
}

// pluginConfig returns a Config whose exec plugin is the shell script
// script, run with env, and the file it may count its runs in ($COUNT).
func pluginConfig(t *testing.T, host string, ca []byte, script string, env ...ExecEnv) (*Config, string) {
	t.Helper()
	count := filepath.Join(t.TempDir(), "count")
	env = append(env, ExecEnv{"COUNT", count})
	return &Config{Host: host, CAData: ca, Exec: &ExecConfig{APIVersion: ExecAPIv1, Command: "/bin/sh", Args: []string{"-c", script}, Env: env}}, count
}

// answering returns a plugin script that prints answer.
func answering(answer string) (script string, env ExecEnv) {
	return `printf '%s' "$ANSWER"`, ExecEnv{"ANSWER", answer}
}

// credential returns an ExecCredential of API version v1 with status.
func credential(status map[string]any) string {
	b, _ := json.Marshal(map[string]any{"apiVersion": ExecAPIv1, "kind": "ExecCredential", "status": status})
	return string(b)
}

func runs(t *testing.T, count string) int {
	b, _ := os.ReadFile(count)
	return strings.Count(string(b), "run")
}

// Ensure that an exec plugin's token is used, kept until it expires or
// the server refuses it, and then asked for again.
func TestExecPlugin_Token(t *testing.T) {
	tc, err := newTestCerts()
	if err != nil {
		t.Fatal(err)
	}
	a := startAPI(t, tc, false)
	var now atomic.Pointer[time.Time]
	t0 := time.Now()
	now.Store(&t0)
	// Run n's token is run-n, and expires n hours after t0.
	env := []ExecEnv{}
	for n := 1; n <= 4; n++ {
		env = append(env, ExecEnv{fmt.Sprintf("EXP%d", n), t0.Add(time.Duration(n) * time.Hour).UTC().Format(time.RFC3339)})
	}
	c, count := pluginConfig(t, a.URL, tc.caPEM, `echo run >>"$COUNT"; n=$(wc -l <"$COUNT"); eval "exp=\$EXP$n"; `+
		`printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"run-%d","expirationTimestamp":"%s"}}' $n "$exp"`, env...)
	c.now = func() time.Time { return *now.Load() }
	hc, err := c.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	do := func() int {
		resp, err := hc.Get(a.URL + "/api")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	do()
	do()
	if n := runs(t, count); n != 1 {
		t.Errorf("%d plugin runs for two requests within the expiry; want 1", n)
	}
	later := t0.Add(time.Hour + time.Second)
	now.Store(&later)
	do()
	if n := runs(t, count); n != 2 {
		t.Errorf("%d plugin runs after the expiry; want 2", n)
	}
	// The server revokes run-2: its 401 stands, and the next request has
	// a new token.
	a.mu.Lock()
	a.refuse["run-2"] = true
	a.mu.Unlock()
	if code := do(); code != http.StatusUnauthorized {
		t.Errorf("revoked token answered %d", code)
	}
	if code := do(); code != 200 {
		t.Errorf("after a 401 the next request got %d", code)
	}
	tokens, _ := a.seen()
	if want := []string{"run-1", "run-1", "run-2", "run-2", "run-3"}; strings.Join(tokens, ",") != strings.Join(want, ",") {
		t.Errorf("server saw %q; want %q", tokens, want)
	}
}

// Ensure that a plugin is told the cluster only when the kubeconfig says
// so, never that it may be interactive, and gets its own environment.
func TestExecPlugin_Info(t *testing.T) {
	tc, err := newTestCerts()
	if err != nil {
		t.Fatal(err)
	}
	a := startAPI(t, tc, false)
	for _, provide := range []bool{false, true} {
		infoFile := filepath.Join(t.TempDir(), "info")
		c, _ := pluginConfig(t, a.URL, tc.caPEM, `printf '%s' "$KUBERNETES_EXEC_INFO" >"$INFO"; printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}' "$EXTRA"`,
			ExecEnv{"INFO", infoFile}, ExecEnv{"EXTRA", "extra"})
		c.Exec.ProvideClusterInfo = provide
		if code, err := get(t, c); err != nil || code != 200 {
			t.Fatal(code, err)
		}
		var in struct {
			APIVersion string
			Kind       string
			Spec       struct {
				Interactive *bool
				Cluster     *struct {
					Server                   string
					CertificateAuthorityData []byte `json:"certificate-authority-data"`
				}
			}
		}
		b, err := os.ReadFile(infoFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &in); err != nil {
			t.Fatalf("KUBERNETES_EXEC_INFO %s: %v", b, err)
		}
		if in.APIVersion != ExecAPIv1 || in.Kind != "ExecCredential" || in.Spec.Interactive == nil || *in.Spec.Interactive {
			t.Errorf("KUBERNETES_EXEC_INFO %s", b)
		}
		if got := in.Spec.Cluster != nil; got != provide {
			t.Errorf("provideClusterInfo %v, and the plugin was told the cluster: %s", provide, b)
		} else if provide && (in.Spec.Cluster.Server != a.URL || string(in.Spec.Cluster.CertificateAuthorityData) != string(tc.caPEM)) {
			t.Errorf("cluster %s", b)
		}
	}
	if tokens, _ := a.seen(); strings.Join(tokens, ",") != "extra,extra" {
		t.Errorf("server saw %q; the plugin's own environment did not reach it", tokens)
	}
}

// Ensure that a plugin's client certificate is presented.
func TestExecPlugin_Certificate(t *testing.T) {
	tc, err := newTestCerts()
	if err != nil {
		t.Fatal(err)
	}
	a := startAPI(t, tc, true)
	script, env := answering(credential(map[string]any{"clientCertificateData": string(tc.clientCert), "clientKeyData": string(tc.clientKey)}))
	c, _ := pluginConfig(t, a.URL, tc.caPEM, script, env)
	if code, err := get(t, c); err != nil || code != 200 {
		t.Fatalf("%d %v", code, err)
	}
	if _, names := a.seen(); names[0] != "system:serviceaccount:kvfence:receiver" {
		t.Errorf("server saw client %q", names)
	}
}

// Ensure that every malformed or failed plugin answer is ErrCredential,
// with no request sent.
func TestExecPlugin_Refusals(t *testing.T) {
	tc, err := newTestCerts()
	if err != nil {
		t.Fatal(err)
	}
	a := startAPI(t, tc, false)
	for _, c := range []struct{ name, script, answer, errHas string }{
		{name: "fails", script: `printf 'no credentials for you\033[31m' >&2; exit 3`, errHas: "exit status 3: no credentials for you?[31m"},
		{name: "huge", script: `head -c 1048577 /dev/zero`, errHas: "printed more than"},
		{name: "not JSON", answer: "not json", errHas: "not an ExecCredential"},
		{name: "two values", answer: credential(map[string]any{"token": "a"}) + " {}", errHas: "data after its JSON value"},
		{name: "another kind", answer: strings.Replace(credential(map[string]any{"token": "a"}), "ExecCredential", "Pod", 1), errHas: "kind"},
		{name: "another version", answer: strings.Replace(credential(map[string]any{"token": "a"}), "/v1", "/v1beta1", 1), errHas: "apiVersion"},
		{name: "no status", answer: `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential"}`, errHas: "no status"},
		{name: "empty status", answer: credential(map[string]any{}), errHas: "neither a token"},
		{name: "line break", answer: credential(map[string]any{"token": "a\nb"}), errHas: "line break"},
		{name: "bad expiry", answer: credential(map[string]any{"token": "a", "expirationTimestamp": "tomorrow"}), errHas: "expirationTimestamp"},
		{name: "certificate without key", answer: credential(map[string]any{"clientCertificateData": "x"}), errHas: "without its key"},
		{name: "bad certificate", answer: credential(map[string]any{"clientCertificateData": "x", "clientKeyData": "y"}), errHas: "client certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			script, env := answering(c.answer)
			if c.script != "" {
				script = c.script
			}
			cfg, _ := pluginConfig(t, a.URL, tc.caPEM, script, env)
			_, err := get(t, cfg)
			if !errors.Is(err, ErrCredential) || !strings.Contains(err.Error(), c.errHas) {
				t.Errorf("err = %v; want ErrCredential containing %q", err, c.errHas)
			}
		})
	}
	if tokens, _ := a.seen(); len(tokens) != 0 {
		t.Errorf("requests were sent without a credential: %q", tokens)
	}
}

var localIPs = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
