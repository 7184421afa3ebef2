package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

const (
	scope     = "configmap/prod/backup-policy"
	workerA   = "spiffe://example.org/agent/worker-a"
	workerB   = "spiffe://example.org/agent/worker-b"
	operator  = "spiffe://example.org/ops/alice"
	initValue = `{"data":{"retention_days":"30"}}`
)

// env is a receiver served over mTLS on loopback, with the CA that issued
// the server's certificate and every client's.
type env struct {
	t   *testing.T
	dir string
	r   *kvfence.Receiver
	ca  pki.Pair
	srv *httptest.Server
	log bytes.Buffer
}

// newEnv initialises a receiver with the fixture scope and target and
// serves it over TLS 1.3 with required, verified client certificates;
// operator is its one administrator. Every test's chain is verified when
// the test ends.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir()}
	e.r = openReceiver(t, e.dir, true)
	var err error
	if e.ca, err = pki.NewCA("test CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	serverCert, err := pki.Issue(e.ca, pki.Options{Name: "receiver", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	h := e.handler(server.SPIFFECertificate{}, operator)
	e.srv = httptest.NewUnstartedServer(h)
	e.srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{serverCert.TLS()},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: e.ca.Pool()}
	// The handshake failures the tests provoke are expected.
	e.srv.Config.ErrorLog = slogDiscard()
	e.srv.StartTLS()
	t.Cleanup(e.srv.Close)
	return e
}

func slogDiscard() *log.Logger { return log.New(io.Discard, "", 0) }

// handler returns a handler over the env's receiver that logs into e.log.
func (e *env) handler(auth server.Authenticator, admins ...string) *server.Handler {
	e.t.Helper()
	h, err := server.New(server.Options{Receiver: e.r, Authenticator: auth, Admins: admins,
		Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &e.log}, nil))})
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

// openReceiver initialises and opens a receiver in dir with the fixture
// scope and target, and verifies its chain when the test ends unless the
// test closes it itself (verify false).
func openReceiver(t *testing.T, dir string, verify bool) *kvfence.Receiver {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	path, anchor := filepath.Join(dir, "receiver.db"), audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "test-receiver", Key: key, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if verify {
			verifyChain(t, r, key.Public().(ed25519.PublicKey), anchor)
		}
		r.Close()
	})
	ctx := context.Background()
	if _, err := r.Admin().CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admin().CreateTarget(ctx, scope, scope, []byte(initValue)); err != nil {
		t.Fatal(err)
	}
	return r
}

// verifyChain checks the whole chain against the anchor.
func verifyChain(t *testing.T, r *kvfence.Receiver, pub ed25519.PublicKey, anchor audit.AnchorStore) {
	t.Helper()
	var evs []kvfence.Event
	if err := r.Events(0, func(ev kvfence.Event) bool { evs = append(evs, ev); return true }); err != nil {
		t.Errorf("events: %v", err)
		return
	}
	rep, err := audit.Verify(audit.VerifyOptions{Anchor: anchor, PublicKey: pub, Receiver: r.ID(),
		Entries: func(yield func([]byte, []byte) bool) {
			for _, ev := range evs {
				raw, err := audit.EncodeEntry(&ev.Entry)
				if err != nil {
					t.Errorf("entry %d: %v", ev.Seq, err)
					return
				}
				if !yield(audit.SeqKey(ev.Seq), raw) {
					return
				}
			}
		}})
	if err != nil || rep.Problem != audit.ProblemOK {
		t.Errorf("verify: %v %+v", err, rep)
	}
}

// request is the fixture's approved request for action.
func request(t testing.TB, action string) []byte {
	t.Helper()
	b, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: action, Target: scope,
		Patch: []byte(`[{"op":"replace","path":"/data/retention_days","value":"45"}]`)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// activate opens the scope with a grant for executor and returns the
// envelope that executor would submit.
func activate(t testing.TB, r *kvfence.Receiver, executor, action string) (kvfence.Grant, []byte) {
	t.Helper()
	req := request(t, action)
	g, err := r.Admin().Activate(context.Background(), kvfence.ActivateRequest{Scope: scope, Executor: executor,
		Claim: "claim-" + action, Request: req})
	if err != nil {
		t.Fatal(err)
	}
	env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: scope, Epoch: g.Epoch, Grant: g.ID,
		Executor: executor, Claim: g.Claim, Request: req})
	if err != nil {
		t.Fatal(err)
	}
	return g, env
}

// client returns an HTTP client presenting a certificate of the env's CA
// with the given URI SANs.
func (e *env) client(uris ...string) *http.Client {
	e.t.Helper()
	c, err := pki.Issue(e.ca, pki.Options{Name: "client", URIs: uris, Client: true})
	if err != nil {
		e.t.Fatal(err)
	}
	return e.clientWith(&c)
}

// clientWith returns an HTTP client presenting cert, or none when nil.
func (e *env) clientWith(cert *pki.Pair) *http.Client {
	cfg := &tls.Config{RootCAs: e.ca.Pool(), MinVersion: tls.VersionTLS13}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{cert.TLS()}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 30 * time.Second}
}

// response is an HTTP answer with its decoded JSON body.
type response struct {
	status int
	body   map[string]any
	raw    string
}

func (r response) errorCode() string {
	e, _ := r.body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// do sends a request and decodes the answer; a transport error is
// returned, not fatal, so that tests of refused handshakes can look at it.
func do(c *http.Client, method, url, ctype string, body []byte) (response, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return response{}, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	out := response{status: resp.StatusCode, raw: string(raw)}
	if err := json.Unmarshal(raw, &out.body); err != nil {
		return out, err
	}
	return out, nil
}

// must is do for requests that must get an answer.
func (e *env) must(c *http.Client, method, path, ctype string, body []byte) response {
	e.t.Helper()
	resp, err := do(c, method, e.srv.URL+path, ctype, body)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

func (e *env) submit(c *http.Client, env []byte) response {
	e.t.Helper()
	return e.must(c, http.MethodPost, api.PathSubmit, api.ContentCBOR, env)
}

func (e *env) postJSON(c *http.Client, path string, v any) response {
	e.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.must(c, http.MethodPost, path, api.ContentJSON, b)
}

// events returns the receiver's chain.
func events(t testing.TB, r *kvfence.Receiver) []kvfence.Event {
	t.Helper()
	var out []kvfence.Event
	if err := r.Events(0, func(ev kvfence.Event) bool { out = append(out, ev); return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

// syncWriter serialises writes from concurrent handlers.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
