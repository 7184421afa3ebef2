package server_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// observed is one request a recordingObserver was told about.
type observed struct {
	route   string
	status  int
	errCode string
}

// recordingObserver keeps what it is told.
type recordingObserver struct {
	mu   sync.Mutex
	seen []observed
}

func (o *recordingObserver) ObserveRequest(route string, status int, errCode string, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if d < 0 {
		status = -1 // a negative duration fails the comparison below
	}
	o.seen = append(o.seen, observed{route, status, errCode})
}

func (o *recordingObserver) take() []observed {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.seen
	o.seen = nil
	return s
}

// newObsEnv is newEnv with opts applied to the handler's options, and the
// handler logging JSON lines into e.log.
func newObsEnv(t *testing.T, opts func(*server.Options)) *env {
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
	o := server.Options{Receiver: e.r, Authenticator: server.SPIFFECertificate{}, Admins: []string{operator},
		Logger: slog.New(slog.NewJSONHandler(&syncWriter{w: &e.log}, nil))}
	opts(&o)
	h, err := server.New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewUnstartedServer(h)
	e.srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{serverCert.TLS()},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: e.ca.Pool()}
	e.srv.Config.ErrorLog = slogDiscard()
	e.srv.StartTLS()
	t.Cleanup(e.srv.Close)
	return e
}

// Ensure that the observer is told each request's route, status and error
// code, that the route of a path the handler does not serve is "other"
// whatever the caller sent (so that callers cannot make metric series),
// and that a denial is a result (no error code) answered 403, apart from
// a role's forbidden.
func TestHandler_RequestObserver(t *testing.T) {
	obs := &recordingObserver{}
	e := newObsEnv(t, func(o *server.Options) { o.Requests = obs })
	worker, admin := e.client(workerA), e.client(operator)
	_, envA := activate(t, e.r, workerA, "a1")
	for _, tc := range []struct {
		name string
		do   func() response
		want observed
	}{
		{"healthz", func() response { return e.must(worker, http.MethodGet, api.PathHealthz, "", nil) },
			observed{api.PathHealthz, 200, ""}},
		{"applied", func() response { return e.submit(worker, envA) }, observed{api.PathSubmit, 200, ""}},
		{"denied", func() response { return e.submit(e.client(workerB), envA) }, observed{api.PathSubmit, 403, ""}},
		{"not an administrator", func() response { return e.must(worker, http.MethodGet, api.PathStatus, "", nil) },
			observed{api.PathStatus, 403, api.CodeForbidden}},
		{"status", func() response { return e.must(admin, http.MethodGet, api.PathStatus, "", nil) },
			observed{api.PathStatus, 200, ""}},
		{"wrong method", func() response { return e.must(admin, http.MethodPost, api.PathStatus, api.ContentJSON, nil) },
			observed{api.PathStatus, 405, api.CodeMethod}},
		{"wrong media type", func() response { return e.must(worker, http.MethodPost, api.PathSubmit, "text/plain", envA) },
			observed{api.PathSubmit, 415, api.CodeMediaType}},
		{"unknown path", func() response {
			return e.must(admin, http.MethodGet, "/v1/caller-chosen-"+strings.Repeat("x", 40), "", nil)
		}, observed{server.RouteOther, 404, api.CodeNotFound}},
		{"unknown path under a route", func() response { return e.must(admin, http.MethodGet, api.PathStatus+"/x", "", nil) },
			observed{server.RouteOther, 404, api.CodeNotFound}},
		{"no SPIFFE ID", func() response { return e.must(e.client(), http.MethodGet, "/anything", "", nil) },
			observed{server.RouteOther, 401, api.CodeUnauthenticated}},
		{"bad query", func() response { return e.must(admin, http.MethodGet, api.PathStatus+"?x=1", "", nil) },
			observed{api.PathStatus, 400, api.CodeBadRequest}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs.take()
			resp := tc.do()
			got := obs.take()
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("observed %+v, want [%+v]", got, tc.want)
			}
			if resp.status != tc.want.status || resp.errorCode() != tc.want.errCode {
				t.Fatalf("answered %d %q, observed %+v", resp.status, resp.errorCode(), got[0])
			}
		})
	}
}

// logLines returns the JSON lines logged with message msg.
func logLines(t *testing.T, log string, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// fields returns m's values of keys, formatted for comparison.
func fields(m map[string]any, keys ...string) string {
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%v ", k, m[k])
	}
	return strings.TrimSpace(b.String())
}

// Ensure that each committed administrative change logs one line naming
// the change, its actor, the scopes with their epochs before and after,
// the reason, the hold id and the grant; and that a refused change logs
// none.
func TestHandler_LogsAdminChanges(t *testing.T) {
	e := newObsEnv(t, func(*server.Options) {})
	admin := e.client(operator)
	mustOK := func(r response) {
		t.Helper()
		if r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.raw)
		}
	}
	mustOK(e.postJSON(admin, api.PathScopes, map[string]any{"scope": "other", "max_grant_ttl": "1h"}))
	mustOK(e.postJSON(admin, api.PathTargets, map[string]any{"scope": "other", "target": "other-target",
		"value_b64": []byte(`{"secret":"do-not-log"}`)}))
	act := e.postJSON(admin, api.PathActivate, map[string]any{"scope": scope, "executor": workerA, "claim": "c1",
		"request_b64": request(t, "a1"), "decision": "review-7"})
	mustOK(act)
	mustOK(e.postJSON(admin, api.PathHold, map[string]any{"scopes": []string{scope, "other"}, "reason": "incident 42",
		"hold_id": "h-1"}))
	mustOK(e.postJSON(admin, api.PathHold, map[string]any{"scopes": []string{scope, "other"}, "reason": "incident 42",
		"hold_id": "h-1"})) // a repeat: logged as one
	// Refused: not an administrator, and a scope that exists.
	if r := e.postJSON(e.client(workerA), api.PathHold, map[string]any{"scopes": []string{scope}, "reason": "x"}); r.status != 403 {
		t.Fatalf("%d", r.status)
	}
	if r := e.postJSON(admin, api.PathScopes, map[string]any{"scope": "other"}); r.status != 409 {
		t.Fatalf("%d", r.status)
	}
	empty := []byte(`{}`)
	req2, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: "a2", Target: "other-target", Set: &empty})
	if err != nil {
		t.Fatal(err)
	}
	mustOK(e.postJSON(admin, api.PathActivate, map[string]any{"scope": "other", "executor": workerB, "claim": "c2",
		"request_b64": req2}))
	mustOK(e.postJSON(admin, api.PathHold, map[string]any{"all": true, "reason": "all stop"}))

	got := logLines(t, e.log.String(), "admin change")
	grant := act.body["grant"]
	want := []string{
		"change=create_scope actor=" + operator + " scope=other epoch=1 mode=held",
		"change=create_target actor=" + operator + " scope=other target=other-target revision=1",
		fmt.Sprintf("change=activate actor=%s scope=%s epoch_before=1 epoch_after=1 grant=%v executor=%s claim=c1 action=a1 decision=review-7", operator, scope, grant, workerA),
		"change=hold actor=" + operator + " scopes=[" + scope + " other] epochs_before=[1 1] epochs_after=[2 2] reason=incident 42 hold_id=h-1 repeated=false",
		"change=hold actor=" + operator + " scopes=[" + scope + " other] epochs_before=[1 1] epochs_after=[2 2] reason=incident 42 hold_id=h-1 repeated=true",
		"change=activate actor=" + operator + " scope=other epoch_before=2 epoch_after=2",
		"change=hold_all actor=" + operator + " scopes=[other] epochs_before=[2] epochs_after=[3] reason=all stop already_held=[" + scope + "]",
	}
	keys := [][]string{
		{"change", "actor", "scope", "epoch", "mode"},
		{"change", "actor", "scope", "target", "revision"},
		{"change", "actor", "scope", "epoch_before", "epoch_after", "grant", "executor", "claim", "action", "decision"},
		{"change", "actor", "scopes", "epochs_before", "epochs_after", "reason", "hold_id", "repeated"},
		{"change", "actor", "scopes", "epochs_before", "epochs_after", "reason", "hold_id", "repeated"},
		{"change", "actor", "scope", "epoch_before", "epoch_after"},
		{"change", "actor", "scopes", "epochs_before", "epochs_after", "reason", "already_held"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d admin change lines, want %d:\n%s", len(got), len(want), e.log.String())
	}
	for i := range want {
		if g := fields(got[i], keys[i]...); g != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, g, want[i])
		}
	}
	if strings.Contains(e.log.String(), "do-not-log") {
		t.Error("a target's value was logged")
	}
}

// Ensure that with LogDecisions each submit logs one line with its
// caller, scope, epoch, grant, action, outcome and reason, and never the
// request's bytes or the denial's detail; and that without it no decision
// is logged.
func TestHandler_LogDecisions(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprint(on), func(t *testing.T) {
			e := newObsEnv(t, func(o *server.Options) { o.LogDecisions = on })
			g, envA := activate(t, e.r, workerA, "a1")
			applied := e.submit(e.client(workerA), envA)
			denied := e.submit(e.client(workerB), envA)
			if applied.status != 200 || denied.status != 403 {
				t.Fatalf("%d %d", applied.status, denied.status)
			}
			got := logLines(t, e.log.String(), "decision")
			if !on {
				if len(got) != 0 {
					t.Fatalf("decisions logged without LogDecisions:\n%s", e.log.String())
				}
				return
			}
			keys := []string{"caller", "scope", "epoch", "grant", "action", "target", "outcome", "reason", "audit_seq"}
			want := []string{
				fmt.Sprintf("caller=%s scope=%s epoch=%d grant=%s action=a1 target=%s outcome=applied reason= audit_seq=%v",
					workerA, scope, g.Epoch, g.ID, scope, applied.body["audit_seq"]),
				fmt.Sprintf("caller=%s scope=%s epoch=%d grant=%s action=a1 target=%s outcome=denied reason=executor_mismatch audit_seq=%v",
					workerB, scope, g.Epoch, g.ID, scope, denied.body["audit_seq"]),
			}
			if len(got) != 2 {
				t.Fatalf("%d decision lines, want 2:\n%s", len(got), e.log.String())
			}
			for i := range want {
				if f := fields(got[i], keys...); f != want[i] {
					t.Errorf("line %d:\n got %s\nwant %s", i, f, want[i])
				}
			}
			detail, _ := denied.body["detail"].(string)
			for _, secret := range []string{"retention_days", detail} {
				if secret != "" && strings.Contains(e.log.String(), secret) {
					t.Errorf("logged %q:\n%s", secret, e.log.String())
				}
			}
		})
	}
}

// Ensure that Credentials.NotAfter is the serving certificate's expiry,
// and the new one's after a Reload.
func TestCredentials_NotAfter(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	write := func(validity time.Duration) time.Time {
		p, err := pki.Issue(ca, pki.Options{Name: "s", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Validity: validity})
		if err != nil {
			t.Fatal(err)
		}
		key, err := p.KeyPEM()
		if err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{"s.crt": p.CertPEM(), "s.key": key, "ca.crt": ca.CertPEM()} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return p.Cert.NotAfter
	}
	first := write(2 * time.Hour)
	c, err := server.LoadCredentials(filepath.Join(dir, "s.crt"), filepath.Join(dir, "s.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.NotAfter().Equal(first) {
		t.Fatalf("NotAfter %v, want %v", c.NotAfter(), first)
	}
	second := write(48 * time.Hour)
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	if !c.NotAfter().Equal(second) || second.Equal(first) {
		t.Fatalf("after the reload NotAfter %v, want %v", c.NotAfter(), second)
	}
	// A reload that fails keeps the expiry of the certificate still served.
	if err := os.WriteFile(filepath.Join(dir, "s.crt"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c.Reload() == nil || !c.NotAfter().Equal(second) {
		t.Fatalf("after a failed reload NotAfter %v, want %v", c.NotAfter(), second)
	}
}
