package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// Ensure that a client is refused at the TLS handshake when it presents no
// certificate or one from another CA, and that nothing is recorded.
func TestTLS_HandshakeRefused(t *testing.T) {
	e := newEnv(t)
	_, env := activate(t, e.r, workerA, "a1")
	head := e.r.Head()
	other, err := pki.NewCA("other CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := pki.Issue(other, pki.Options{Name: "worker-a", URIs: []string{workerA}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*http.Client{"no certificate": e.clientWith(nil), "another CA": e.clientWith(&foreign)} {
		resp, err := do(c, http.MethodPost, e.srv.URL+api.PathSubmit, api.ContentCBOR, env)
		if err == nil {
			t.Fatalf("%s: got %d %s, want the handshake refused", name, resp.status, resp.raw)
		}
		if !strings.Contains(err.Error(), "certificate") {
			t.Errorf("%s: %v, want a certificate error", name, err)
		}
	}
	if e.r.Head() != head {
		t.Fatal("a refused handshake was recorded")
	}
}

// Ensure that a verified certificate without exactly one SPIFFE ID is
// answered 401, with nothing decided or recorded.
func TestTLS_UnusableCertificate(t *testing.T) {
	e := newEnv(t)
	_, env := activate(t, e.r, workerA, "a1")
	head := e.r.Head()
	for name, uris := range map[string][]string{
		"no URI SAN":          nil,
		"two URI SANs":        {workerA, workerB},
		"SPIFFE ID and https": {workerA, "https://example.org/a"},
		"not SPIFFE":          {"https://example.org/agent/worker-a"},
		"port":                {"spiffe://example.org:8443/agent/worker-a"},
		"upper-case domain":   {"spiffe://Example.org/agent/worker-a"},
		"empty segment":       {"spiffe://example.org//worker-a"},
		"dot segment":         {"spiffe://example.org/agent/../worker-a"},
		"query":               {"spiffe://example.org/agent/worker-a?x=1"},
		"no trust domain":     {"spiffe:///agent/worker-a"},
	} {
		resp := e.submit(e.client(uris...), env)
		if resp.status != http.StatusUnauthorized || resp.errorCode() != api.CodeUnauthenticated {
			t.Errorf("%s: %d %s, want 401 unauthenticated", name, resp.status, resp.raw)
		}
	}
	if e.r.Head() != head {
		t.Fatal("a request with an unusable certificate was recorded")
	}
	if !strings.Contains(e.log.String(), "URI SANs") {
		t.Errorf("the refusals were not logged:\n%s", e.log.String())
	}
}

// Ensure that the identity is the certificate's: worker A's certificate
// presenting worker B's current envelope is denied executor_mismatch
// (403, recorded), and B's own certificate applies it.
func TestSubmit_IdentityFromCertificate(t *testing.T) {
	e := newEnv(t)
	_, envB := activate(t, e.r, workerB, "b1")
	resp := e.submit(e.client(workerA), envB)
	if resp.status != http.StatusForbidden || resp.body["outcome"] != "denied" || resp.body["reason"] != "executor_mismatch" {
		t.Fatalf("A with B's envelope: %d %s", resp.status, resp.raw)
	}
	evs := events(t, e.r)
	if last := evs[len(evs)-1]; last.Outcome != "denied" || last.Executor != workerA || last.Reason != "executor_mismatch" {
		t.Fatalf("the denial's entry: %+v", last.Entry)
	}
	b := e.client(workerB)
	resp = e.submit(b, envB)
	if resp.status != http.StatusOK || resp.body["outcome"] != "applied" || resp.body["revision"] != 2.0 {
		t.Fatalf("B: %d %s", resp.status, resp.raw)
	}
	resp = e.submit(b, envB)
	if resp.status != http.StatusOK || resp.body["outcome"] != "already_applied" {
		t.Fatalf("B's retry: %d %s", resp.status, resp.raw)
	}
	if seq := uint64(resp.body["audit_seq"].(float64)); seq != e.r.Head().Seq {
		t.Fatalf("audit_seq %d, head %d", seq, e.r.Head().Seq)
	}
}

// Ensure that a worker's certificate is refused at every administrative
// endpoint (403, nothing recorded), that the administrator's is admitted,
// and that each change records the administrator as its actor.
func TestAdmin_OnlyAdministrators(t *testing.T) {
	e := newEnv(t)
	worker, admin := e.client(workerA), e.client(operator)
	head := e.r.Head()
	calls := []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, api.PathScopes, api.ScopeCreateRequest{Scope: "s2"}},
		{http.MethodPost, api.PathTargets, api.TargetCreateRequest{Scope: scope, Target: "t2", ValueB64: []byte("v")}},
		{http.MethodPost, api.PathActivate, api.ActivateRequest{Scope: scope, Executor: workerA, Claim: "c",
			RequestB64: request(t, "a1"), TTL: "1m"}},
		{http.MethodPost, api.PathHold, api.HoldRequest{Scopes: []string{scope}, Reason: "incident"}},
		{http.MethodGet, api.PathStatus, nil},
		{http.MethodGet, api.PathTarget + "?target=" + url.QueryEscape(scope), nil},
		{http.MethodGet, api.PathReceipt + "?scope=" + url.QueryEscape(scope) + "&action=a1", nil},
		{http.MethodGet, api.PathEvents + "?since=1", nil},
		{http.MethodGet, api.PathReceipts + "?scope=" + url.QueryEscape(scope) + "&claim=c", nil},
	}
	for _, c := range calls {
		var resp response
		if c.method == http.MethodGet {
			resp = e.must(worker, c.method, c.path, "", nil)
		} else {
			resp = e.postJSON(worker, c.path, c.body)
		}
		if resp.status != http.StatusForbidden || resp.errorCode() != api.CodeForbidden {
			t.Errorf("worker %s %s: %d %s, want 403 forbidden", c.method, c.path, resp.status, resp.raw)
		}
	}
	if e.r.Head() != head {
		t.Fatal("a worker's administrative call was recorded")
	}
	want := map[string]int{api.PathReceipt: http.StatusNotFound}
	for _, c := range calls {
		var resp response
		if c.method == http.MethodGet {
			resp = e.must(admin, c.method, c.path, "", nil)
		} else {
			resp = e.postJSON(admin, c.path, c.body)
		}
		status := want[strings.SplitN(c.path, "?", 2)[0]]
		if status == 0 {
			status = http.StatusOK
		}
		if resp.status != status {
			t.Errorf("admin %s %s: %d %s, want %d", c.method, c.path, resp.status, resp.raw, status)
		}
	}
	actors := 0
	for _, ev := range events(t, e.r) {
		if ev.Seq <= head.Seq {
			continue
		}
		if ev.Actor != operator {
			t.Errorf("entry %d (%s): actor %q, want %q", ev.Seq, ev.Kind, ev.Actor, operator)
		}
		actors++
	}
	if actors != 4 {
		t.Fatalf("%d entries after the administrator's calls, want 4 (scope, target, activate, hold)", actors)
	}
}

// unixEnv serves the env's receiver on a unix socket with uids admitted.
func (e *env) unixServer(uids ...uint32) (*http.Client, string) {
	e.t.Helper()
	// Socket paths are short on Linux (108 bytes); t.TempDir may be longer.
	dir, err := os.MkdirTemp("", "kvf")
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "admin.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		e.t.Fatal(err)
	}
	var admins []string
	for _, u := range uids {
		admins = append(admins, server.UnixIdentity(u))
	}
	srv := httptest.NewUnstartedServer(e.handler(server.UnixPeer{UIDs: uids}, admins...))
	srv.Listener.Close()
	srv.Listener = l
	srv.Config.ConnContext = server.ConnContext
	srv.Start()
	e.t.Cleanup(srv.Close)
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
	return c, "http://admin"
}

// Ensure that the admin socket admits a peer only by its uid: a uid not on
// the allow-list is refused (403, nothing recorded), a listed one holds,
// and the hold records "unix:uid:N" as its actor.
func TestUnixSocket_UIDAllowList(t *testing.T) {
	e := newEnv(t)
	me := uint32(os.Getuid())
	head := e.r.Head()
	hold := api.HoldRequest{Scopes: []string{scope}, Reason: "incident"}
	body := []byte(fmt.Sprintf(`{"scopes":[%q],"reason":%q}`, hold.Scopes[0], hold.Reason))

	c, base := e.unixServer(me + 1)
	resp, err := do(c, http.MethodPost, base+api.PathHold, api.ContentJSON, body)
	if err != nil || resp.status != http.StatusForbidden || resp.errorCode() != api.CodeForbidden {
		t.Fatalf("uid %d not on the list: %v %d %s, want 403", me, err, resp.status, resp.raw)
	}
	if e.r.Head() != head {
		t.Fatal("a refused peer's hold was recorded")
	}

	c, base = e.unixServer(me)
	resp, err = do(c, http.MethodPost, base+api.PathHold, api.ContentJSON, body)
	if err != nil || resp.status != http.StatusOK {
		t.Fatalf("uid %d on the list: %v %d %s", me, err, resp.status, resp.raw)
	}
	evs := events(t, e.r)
	if last := evs[len(evs)-1]; last.Kind != kvfence.KindHold || last.Actor != fmt.Sprintf("unix:uid:%d", me) {
		t.Fatalf("hold entry: %+v", last.Entry)
	}
}

// Ensure that an envelope over the size limit is answered 413 before
// anything is decided or recorded, whether or not its length is declared.
func TestSubmit_SizeLimit(t *testing.T) {
	e := newEnv(t)
	c := e.client(workerA)
	head := e.r.Head()
	big := bytes.Repeat([]byte{0xa7}, kvfence.DefaultMaxEnvelopeSize+1)
	resp := e.submit(c, big)
	if resp.status != http.StatusRequestEntityTooLarge || resp.errorCode() != api.CodeTooLarge {
		t.Fatalf("declared length: %d %s, want 413", resp.status, resp.raw)
	}
	// Chunked: no Content-Length, so only reading finds the size.
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+api.PathSubmit, io.MultiReader(bytes.NewReader(big)))
	req.Header.Set("Content-Type", api.ContentCBOR)
	r, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusRequestEntityTooLarge || r.ContentLength == 0 {
		t.Fatalf("chunked: %d, want 413", r.StatusCode)
	}
	if e.r.Head() != head {
		t.Fatal("an oversized envelope was recorded")
	}
	// At the limit it is decided (here: denied as malformed) and recorded.
	resp = e.submit(c, big[:kvfence.DefaultMaxEnvelopeSize])
	if resp.status != http.StatusForbidden || resp.body["reason"] != "malformed_envelope" {
		t.Fatalf("at the limit: %d %s", resp.status, resp.raw)
	}
}

// Ensure that malformed HTTP requests are answered 400, 404, 405 or 415
// with a JSON error, and never decided.
func TestMalformedRequests(t *testing.T) {
	e := newEnv(t)
	c, admin := e.client(workerA), e.client(operator)
	head := e.r.Head()
	for _, tc := range []struct {
		c            *http.Client
		method, path string
		ctype, body  string
		status       int
		code         string
	}{
		{c, http.MethodPost, api.PathSubmit, "text/plain", "x", http.StatusUnsupportedMediaType, api.CodeMediaType},
		{c, http.MethodGet, api.PathSubmit, "", "", http.StatusMethodNotAllowed, api.CodeMethod},
		{c, http.MethodGet, "/v2/nothing", "", "", http.StatusNotFound, api.CodeNotFound},
		{admin, http.MethodPost, api.PathHold, api.ContentJSON, `{"scopes":["x"],"reason":"r","extra":1}`, http.StatusBadRequest, api.CodeBadRequest},
		{admin, http.MethodPost, api.PathHold, api.ContentJSON, `{"scopes":["x"]} {}`, http.StatusBadRequest, api.CodeBadRequest},
		{admin, http.MethodPost, api.PathHold, api.ContentJSON, `{"scopes":[],"reason":"r"}`, http.StatusBadRequest, "invalid_argument"},
		{admin, http.MethodPost, api.PathHold, api.ContentJSON, `{"scopes":["nope"],"reason":"r"}`, http.StatusNotFound, "unknown_scope"},
		{admin, http.MethodPost, api.PathScopes, api.ContentJSON, fmt.Sprintf(`{"scope":%q}`, scope), http.StatusConflict, "scope_exists"},
		{admin, http.MethodPost, api.PathActivate, api.ContentJSON, `{"scope":"x","executor":"w","claim":"c","request_b64":"AA==","ttl":"soon"}`, http.StatusBadRequest, api.CodeBadRequest},
		{admin, http.MethodGet, api.PathEvents + "?since=x", "", "", http.StatusBadRequest, api.CodeBadRequest},
		{admin, http.MethodGet, api.PathEvents + "?limit=0", "", "", http.StatusBadRequest, api.CodeBadRequest},
		{admin, http.MethodGet, api.PathStatus + "?scope=a&scope=b", "", "", http.StatusBadRequest, api.CodeBadRequest},
		{admin, http.MethodGet, api.PathStatus + "?other=1", "", "", http.StatusBadRequest, api.CodeBadRequest},
		{admin, http.MethodGet, api.PathTarget, "", "", http.StatusBadRequest, api.CodeBadRequest},
	} {
		resp := e.must(tc.c, tc.method, tc.path, tc.ctype, []byte(tc.body))
		if resp.status != tc.status || resp.errorCode() != tc.code {
			t.Errorf("%s %s %s: %d %s, want %d %s", tc.method, tc.path, tc.body, resp.status, resp.raw, tc.status, tc.code)
		}
	}
	if e.r.Head() != head {
		t.Fatal("a malformed request was recorded")
	}
}

// panicky is an Authenticator that panics, or fails with a fault.
type panicky struct{ fault bool }

func (p panicky) Authenticate(*http.Request) (string, error) {
	if p.fault {
		return "", errors.New("identity provider unreachable")
	}
	panic("authenticator bug")
}

// Ensure that a panic or a fault while serving is answered 500 and logged,
// and that it is never a decision.
func TestFaults_Answer500(t *testing.T) {
	e := newEnv(t)
	_, env := activate(t, e.r, workerA, "a1")
	head := e.r.Head()
	for _, auth := range []panicky{{}, {fault: true}} {
		srv := httptest.NewServer(e.handler(auth))
		resp, err := do(srv.Client(), http.MethodPost, srv.URL+api.PathSubmit, api.ContentCBOR, env)
		srv.Close()
		if err != nil || resp.status != http.StatusInternalServerError || resp.errorCode() != api.CodeInternal {
			t.Fatalf("%+v: %v %d %s, want 500", auth, err, resp.status, resp.raw)
		}
		if strings.Contains(resp.raw, "unreachable") {
			t.Errorf("a fault's detail reached the caller: %s", resp.raw)
		}
	}
	if e.r.Head() != head {
		t.Fatal("a fault was recorded as a decision")
	}
	for _, want := range []string{"authenticator bug", "identity provider unreachable"} {
		if !strings.Contains(e.log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, e.log.String())
		}
	}
}

// Ensure that /healthz answers any caller the channel identifies, not
// only administrators, and nobody else (a certificate without a SPIFFE ID
// gets 401), and that a closed receiver makes submits 503, not decisions.
func TestHealthzAndClosedReceiver(t *testing.T) {
	e := newEnv(t)
	resp := e.must(e.client(workerA), http.MethodGet, api.PathHealthz, "", nil)
	if resp.status != http.StatusOK || resp.body["status"] != "ok" {
		t.Fatalf("healthz: %d %s", resp.status, resp.raw)
	}
	if resp := e.must(e.client(), http.MethodGet, api.PathHealthz, "", nil); resp.status != http.StatusUnauthorized {
		t.Fatalf("healthz without a SPIFFE ID: %d %s, want 401", resp.status, resp.raw)
	}
	// A second receiver, closed under its handler.
	r := openReceiver(t, t.TempDir(), false)
	_, env := activate(t, r, workerA, "a1")
	h, err := server.New(server.Options{Receiver: r, Authenticator: fixed(workerA)})
	if err != nil {
		t.Fatal(err)
	}
	head := r.Head()
	srv := httptest.NewServer(h)
	defer srv.Close()
	r.Close()
	got, err := do(srv.Client(), http.MethodPost, srv.URL+api.PathSubmit, api.ContentCBOR, env)
	if err != nil || got.status != http.StatusServiceUnavailable || got.errorCode() != "closed" {
		t.Fatalf("submit to a closed receiver: %v %d %s, want 503 closed", err, got.status, got.raw)
	}
	if r.Head() != head {
		t.Fatal("a submit to a closed receiver moved the head")
	}
}

// fixed authenticates every request as one identity.
type fixed string

func (f fixed) Authenticate(*http.Request) (string, error) { return string(f), nil }

// Ensure that a hold over the admin socket, racing submits over TLS, is
// the line after which the superseded grant applies nothing: read back
// from the audit chain, every submit entry under the old grant after the
// hold entry is a denial, and every answer a worker got is in the chain.
func TestHoldOverSocketRacesSubmitsOverTLS(t *testing.T) {
	for round := 0; round < 5; round++ {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			e := newEnv(t)
			admin, base := e.unixServer(uint32(os.Getuid()))
			// Several actions share nothing but the scope: each worker
			// holds its own grant in turn, so that some apply before the
			// hold and the rest race it.
			g, env := activate(t, e.r, workerA, fmt.Sprintf("raise-%d", round))
			workers := 8
			var wg sync.WaitGroup
			var stop atomic.Bool
			type answer struct {
				seq     uint64
				outcome string
			}
			answers := make([][]answer, workers)
			for i := range workers {
				c := e.client(workerA)
				wg.Go(func() {
					for !stop.Load() {
						resp, err := do(c, http.MethodPost, e.srv.URL+api.PathSubmit, api.ContentCBOR, env)
						if err != nil {
							t.Error(err)
							return
						}
						if resp.status != http.StatusOK && resp.status != http.StatusForbidden {
							t.Errorf("submit: %d %s", resp.status, resp.raw)
							return
						}
						answers[i] = append(answers[i], answer{uint64(resp.body["audit_seq"].(float64)), resp.body["outcome"].(string)})
					}
				})
			}
			time.Sleep(time.Duration(round) * 5 * time.Millisecond)
			body := []byte(fmt.Sprintf(`{"scopes":[%q],"reason":"race"}`, scope))
			resp, err := do(admin, http.MethodPost, base+api.PathHold, api.ContentJSON, body)
			if err != nil || resp.status != http.StatusOK {
				t.Fatalf("hold: %v %d %s", err, resp.status, resp.raw)
			}
			holdSeq := uint64(resp.body["audit_seq"].(float64))
			time.Sleep(20 * time.Millisecond)
			stop.Store(true)
			wg.Wait()

			evs := events(t, e.r)
			bySeq := map[uint64]kvfence.Event{}
			var holds, afterDenied int
			for _, ev := range evs {
				bySeq[ev.Seq] = ev
				if ev.Kind == kvfence.KindHold {
					holds++
					if ev.Seq != holdSeq {
						t.Fatalf("hold entry at %d, the answer said %d", ev.Seq, holdSeq)
					}
				}
				if ev.Kind == kvfence.KindSubmit && ev.Grant == g.ID && ev.Seq > holdSeq {
					if ev.Outcome != "denied" {
						t.Fatalf("entry %d after the hold at %d: %s under the superseded grant", ev.Seq, holdSeq, ev.Outcome)
					}
					afterDenied++
				}
			}
			if holds != 1 || afterDenied == 0 {
				t.Fatalf("%d holds, %d denials after the hold: the race was not run", holds, afterDenied)
			}
			for _, as := range answers {
				for _, a := range as {
					ev, ok := bySeq[a.seq]
					if !ok || ev.Outcome != a.outcome || ev.Kind != kvfence.KindSubmit {
						t.Fatalf("a worker was answered %s at seq %d; the chain has %+v", a.outcome, a.seq, ev.Entry)
					}
				}
			}
		})
	}
}
