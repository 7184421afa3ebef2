package kubeclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"github.com/kvfence/kvfence/internal/api"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
	"unicode"
)

// MaxExecOutput bounds what an exec plugin may print on its standard
// output; more is an error.
const MaxExecOutput = 1 << 20

// ExecTimeout bounds one run of an exec plugin.
const ExecTimeout = time.Minute

// The ExecCredential API versions a plugin may speak.
const (
	ExecAPIv1      = "client.authentication.k8s.io/v1"
	ExecAPIv1beta1 = "client.authentication.k8s.io/v1beta1"
)

// ExecConfig is a credential plugin: a command that prints an
// ExecCredential (Kubernetes's client.authentication.k8s.io API) holding a
// token, a client certificate, or both.
type ExecConfig struct {
	// APIVersion is the ExecCredential version the plugin speaks: ExecAPIv1
	// or ExecAPIv1beta1.
	APIVersion string
	// Command is the program, found on PATH if it holds no separator.
	Command string
	// Args are its arguments.
	Args []string
	// Env is added to the receiver's environment for the plugin.
	Env []ExecEnv
	// ProvideClusterInfo passes the server's URL, name and certificate
	// authorities to the plugin in KUBERNETES_EXEC_INFO.
	ProvideClusterInfo bool
	// InstallHint is shown when the command cannot be run.
	InstallHint string
}

// ExecEnv is one environment variable of a plugin.
type ExecEnv struct {
	// Name is the variable's name: not empty, without '=' or NUL.
	Name string `json:"name"`
	// Value is its value, without NUL.
	Value string `json:"value"`
}

// execCredential is what one run of a plugin gave.
type execCredential struct {
	token   string
	cert    *tls.Certificate
	expires time.Time // zero: until the server refuses it
}

// execPlugin runs a plugin and keeps its credential.
type execPlugin struct {
	conf *ExecConfig
	info []byte // KUBERNETES_EXEC_INFO
	now  func() time.Time

	// rotated, if not nil, is called when a run gives another client
	// certificate than the one last handed out (none included), before
	// the new one is: TLS presents a certificate only in a connection's
	// handshake, so that a connection kept from before would go on
	// presenting the old one, expired or refused.
	rotated func()

	mu       sync.Mutex
	cred     *execCredential
	running  *execRun // the run under way, if any
	handed   bool     // a credential was handed out
	lastCert []byte   // the DER of its certificate, nil for none
}

func newExecPlugin(e *ExecConfig, c *Config) (*execPlugin, error) {
	if e.APIVersion != ExecAPIv1 && e.APIVersion != ExecAPIv1beta1 {
		return nil, fmt.Errorf("%w: exec plugin apiVersion %q (want %s or %s)", ErrInvalidConfig, e.APIVersion, ExecAPIv1, ExecAPIv1beta1)
	}
	if e.Command == "" {
		return nil, fmt.Errorf("%w: exec plugin without a command", ErrInvalidConfig)
	}
	for _, v := range e.Env {
		if v.Name == "" || strings.ContainsAny(v.Name, "=\x00") || strings.ContainsRune(v.Value, 0) {
			return nil, fmt.Errorf("%w: exec plugin environment variable %q", ErrInvalidConfig, v.Name)
		}
	}
	spec := map[string]any{"interactive": false}
	if e.ProvideClusterInfo {
		cluster := map[string]any{"server": c.Host}
		if c.TLSServerName != "" {
			cluster["tls-server-name"] = c.TLSServerName
		}
		if len(c.CAData) > 0 {
			cluster["certificate-authority-data"] = c.CAData
		}
		// What else the cluster says, as Kubernetes's clients pass it: a
		// plugin told less may reach its issuer another way.
		if c.ProxyURL != "" {
			cluster["proxy-url"] = c.ProxyURL
		}
		if c.DisableCompression {
			cluster["disable-compression"] = true
		}
		spec["cluster"] = cluster
	}
	info, err := json.Marshal(map[string]any{"apiVersion": e.APIVersion, "kind": "ExecCredential", "spec": spec})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	now := c.now
	if now == nil {
		now = time.Now
	}
	return &execPlugin{conf: e, info: info, now: now}, nil
}

// get returns the current credential, running the plugin if there is
// none or it has expired. One run at a time: concurrent callers share it.
// A caller waits for the run at most until ctx ends (a request's deadline
// bounds it, not ExecTimeout); the run goes on, and its credential is
// kept for the next caller.
func (p *execPlugin) get(ctx context.Context) (*execCredential, error) {
	p.mu.Lock()
	if p.cred != nil && (p.cred.expires.IsZero() || p.now().Before(p.cred.expires)) {
		cred := p.cred
		p.mu.Unlock()
		return cred, nil
	}
	r := p.running
	if r == nil {
		r = &execRun{done: make(chan struct{})}
		p.running = r
		go func() {
			cred, err := p.run()
			p.mu.Lock()
			r.cred, r.err = cred, err
			if err == nil {
				der := cred.certDER()
				if p.handed && !bytes.Equal(der, p.lastCert) && p.rotated != nil {
					p.rotated()
				}
				p.cred, p.handed, p.lastCert = cred, true, der
			}
			p.running = nil
			p.mu.Unlock()
			close(r.done)
		}()
	}
	p.mu.Unlock()
	select {
	case <-r.done:
		return r.cred, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: exec plugin %s: %w", ErrCredential, p.conf.Command, ctx.Err())
	}
}

// certDER returns the DER of the credential's certificate, nil if none.
func (c *execCredential) certDER() []byte {
	if c.cert == nil || len(c.cert.Certificate) == 0 {
		return nil
	}
	return c.cert.Certificate[0]
}

// execRun is one run of a plugin, which callers wait for.
type execRun struct {
	done chan struct{} // closed when cred and err are set
	cred *execCredential
	err  error
}

// invalidate drops cred if it is still the current credential.
func (p *execPlugin) invalidate(cred *execCredential) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cred != nil && p.cred == cred {
		p.cred = nil
	}
}

// limitedBuffer keeps at most max bytes and notes whether more came.
type limitedBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); len(p) > room {
		b.over = true
		b.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.buf.Write(p)
}

// run runs the plugin once, with no standard input (it is never
// interactive), and decodes its answer.
func (p *execPlugin) run() (*execCredential, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ExecTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.conf.Command, p.conf.Args...)
	cmd.Env = os.Environ()
	for _, v := range p.conf.Env {
		cmd.Env = append(cmd.Env, v.Name+"="+v.Value)
	}
	cmd.Env = append(cmd.Env, "KUBERNETES_EXEC_INFO="+string(p.info))
	cmd.Stdin = nil
	stdout := &limitedBuffer{max: MaxExecOutput}
	stderr := &limitedBuffer{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		hint := ""
		if p.conf.InstallHint != "" {
			hint = "; " + Printable(p.conf.InstallHint)
		}
		return nil, fmt.Errorf("%w: exec plugin %s: %v: %s%s", ErrCredential, p.conf.Command, err, Printable(stderr.buf.String()), hint)
	}
	if stdout.over {
		return nil, fmt.Errorf("%w: exec plugin %s printed more than %d bytes", ErrCredential, p.conf.Command, MaxExecOutput)
	}
	cred, err := p.decode(stdout.buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%w: exec plugin %s: %v", ErrCredential, p.conf.Command, err)
	}
	return cred, nil
}

// decode checks and decodes an ExecCredential the plugin printed.
func (p *execPlugin) decode(out []byte) (*execCredential, error) {
	var ec struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Status     *struct {
			Token                 string `json:"token"`
			ClientCertificateData string `json:"clientCertificateData"`
			ClientKeyData         string `json:"clientKeyData"`
			ExpirationTimestamp   string `json:"expirationTimestamp"`
		} `json:"status"`
	}
	// A key twice or in another case is refused, as in a kubeconfig: Go's
	// decoder would honour "Token", which Kubernetes's clients read as no
	// token. Members it does not read (a plugin may echo its spec) pass.
	if err := api.DecodeAnswer(out, &ec); err != nil {
		return nil, fmt.Errorf("its output is not an ExecCredential: %v", err)
	}
	switch {
	case ec.Kind != "ExecCredential":
		return nil, fmt.Errorf("its output's kind is %q, not ExecCredential", ec.Kind)
	case ec.APIVersion != p.conf.APIVersion:
		return nil, fmt.Errorf("its output's apiVersion is %q; the kubeconfig says %q", ec.APIVersion, p.conf.APIVersion)
	case ec.Status == nil:
		return nil, fmt.Errorf("its output has no status")
	}
	s := ec.Status
	cred := &execCredential{token: s.Token}
	if strings.ContainsAny(s.Token, "\r\n") {
		return nil, fmt.Errorf("its token holds a line break")
	}
	if (s.ClientCertificateData == "") != (s.ClientKeyData == "") {
		return nil, fmt.Errorf("it gave a client certificate without its key, or a key without its certificate")
	}
	if s.ClientCertificateData != "" {
		cert, err := tls.X509KeyPair([]byte(s.ClientCertificateData), []byte(s.ClientKeyData))
		if err != nil {
			return nil, fmt.Errorf("its client certificate: %v", err)
		}
		cred.cert = &cert
	}
	if cred.token == "" && cred.cert == nil {
		return nil, fmt.Errorf("it gave neither a token nor a client certificate")
	}
	if s.ExpirationTimestamp != "" {
		t, err := time.Parse(time.RFC3339, s.ExpirationTimestamp)
		if err != nil {
			return nil, fmt.Errorf("its expirationTimestamp %q: %v", Printable(s.ExpirationTimestamp), err)
		}
		cred.expires = t
	}
	// As Kubernetes's clients do: a certificate is not used past its own
	// expiry, whatever the plugin said.
	if cred.cert != nil && cred.cert.Leaf != nil && (cred.expires.IsZero() || cred.cert.Leaf.NotAfter.Before(cred.expires)) {
		cred.expires = cred.cert.Leaf.NotAfter
	}
	return cred, nil
}

// Printable returns s, trimmed and cut to 1 KiB, with control,
// line-separator and bidirectional-override characters replaced: for words
// from outside (a plugin's, an API server's) that end up in logs and on
// terminals.
func Printable(s string) string {
	if len(s) > 1024 {
		s = strings.ToValidUTF8(s[:1024], "") + "…"
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || unicode.In(r, unicode.Zl, unicode.Zp) || r == unicode.ReplacementChar {
			return '?'
		}
		return r
	}, strings.TrimSpace(s))
}
