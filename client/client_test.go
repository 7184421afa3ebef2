package client_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log"
	"log/slog"
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

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

const (
	scope    = "configmap/prod/backup-policy"
	workerA  = "spiffe://example.org/agent/worker-a"
	workerB  = "spiffe://example.org/agent/worker-b"
	operator = "spiffe://example.org/ops/alice"
)

// served is a receiver behind a TLS server and the CA of its certificates.
type served struct {
	t     *testing.T
	dir   string
	r     *kvfence.Receiver
	ca    pki.Pair
	srv   *httptest.Server
	conns atomic.Int64
}

func serve(t *testing.T) *served {
	t.Helper()
	return serveOn(t, func(path string, opts *kvfence.Options) (*kvfence.Receiver, error) { return kvfence.Open(path, opts) }, nil)
}

// serveOn is serve with the receiver opened by open, and the handler
// wrapped by wrap unless it is nil.
func serveOn(t *testing.T, open func(path string, opts *kvfence.Options) (*kvfence.Receiver, error),
	wrap func(http.Handler) http.Handler) *served {
	t.Helper()
	s := &served{t: t, dir: t.TempDir()}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	path, anchor := filepath.Join(s.dir, "r.db"), audit.FileAnchor{Path: filepath.Join(s.dir, "r.anchor")}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "r", Key: key, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	var err error
	if s.r, err = open(path, &kvfence.Options{Key: key, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.r.Close() })
	if s.ca, err = pki.NewCA("test CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	cert, err := pki.Issue(s.ca, pki.Options{Name: "receiver", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := server.New(server.Options{Receiver: s.r, Authenticator: server.SPIFFECertificate{}, Admins: []string{operator},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var hh http.Handler = h
	if wrap != nil {
		hh = wrap(h)
	}
	s.srv = httptest.NewUnstartedServer(hh)
	s.srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert.TLS()},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: s.ca.Pool()}
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

// client returns a client whose certificate carries id.
func (s *served) client(id string) *client.Client {
	s.t.Helper()
	cert, err := pki.Issue(s.ca, pki.Options{Name: id, URIs: []string{id}, Client: true})
	if err != nil {
		s.t.Fatal(err)
	}
	c, err := client.New(s.srv.URL, &tls.Config{RootCAs: s.ca.Pool(), Certificates: []tls.Certificate{cert.TLS()},
		MinVersion: tls.VersionTLS13})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(c.Close)
	return c
}

func request(t testing.TB, action string) []byte {
	t.Helper()
	b, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: action, Target: scope,
		Patch: []byte(`[{"op":"replace","path":"/data/retention_days","value":"45"}]`)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Ensure that an operator and a worker go through the whole flow with the
// client: the operator creates, activates and hands over an assignment as
// JSON; the worker submits it; after a hold the same assignment is denied;
// and errors come back as kvfence's sentinels.
func TestClient_Flow(t *testing.T) {
	s := serve(t)
	ctx := context.Background()
	op, a, b := s.client(operator), s.client(workerA), s.client(workerB)

	st, err := op.CreateScope(ctx, scope)
	if err != nil || st.Epoch != 1 || st.Mode != kvfence.ModeHeld || st.CreatedAt.IsZero() {
		t.Fatalf("CreateScope: %+v %v", st, err)
	}
	if _, err := op.CreateScope(ctx, scope); !errors.Is(err, kvfence.ErrScopeExists) {
		t.Fatalf("CreateScope again: %v, want ErrScopeExists", err)
	}
	tg, err := op.CreateTarget(ctx, scope, scope, []byte(`{"data":{"retention_days":"30"}}`))
	if err != nil || tg.Revision != 1 {
		t.Fatalf("CreateTarget: %+v %v", tg, err)
	}
	act, err := op.Activate(ctx, kvfence.ActivateRequest{Scope: scope, Executor: workerB, Claim: "claim-b",
		Request: request(t, "raise"), TTL: time.Minute, Decision: "review-1"})
	if err != nil || act.Epoch != 1 || act.NotAfter.Sub(act.NotBefore) != time.Minute {
		t.Fatalf("Activate: %+v %v", act, err)
	}
	// The assignment travels as JSON, as an operator would hand it over.
	blob, err := json.Marshal(act.Assignment())
	if err != nil {
		t.Fatal(err)
	}
	var asg client.Assignment
	if err := json.Unmarshal(blob, &asg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(blob), `"request_b64"`) {
		t.Fatalf("assignment JSON: %s", blob)
	}
	// A presenting B's assignment is refused by identity.
	res, err := a.SubmitAssignment(ctx, asg)
	if err != nil || res.Outcome != kvfence.Denied || res.Reason != kvfence.ReasonExecutorMismatch {
		t.Fatalf("A with B's assignment: %+v %v", res, err)
	}
	res, err = b.SubmitAssignment(ctx, asg)
	if err != nil || res.Outcome != kvfence.Applied || res.Revision != 2 {
		t.Fatalf("B: %+v %v", res, err)
	}
	rc, err := op.Receipt(ctx, scope, "raise")
	if err != nil || rc.Grant != act.ID || rc.RevAfter != 2 || rc.AuditSeq != res.AuditSeq {
		t.Fatalf("Receipt: %+v %v", rc, err)
	}
	if _, err := b.Hold(ctx, kvfence.HoldRequest{Scopes: []string{scope}, Reason: "x"}); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("a worker's hold: %v, want ErrForbidden", err)
	}
	hr, err := op.Hold(ctx, kvfence.HoldRequest{Scopes: []string{scope}, Reason: "incident"})
	if err != nil || len(hr.Scopes) != 1 || hr.Scopes[0].Epoch != 2 || hr.HoldCommittedAt.IsZero() {
		t.Fatalf("Hold: %+v %v", hr, err)
	}
	res, err = b.SubmitAssignment(ctx, asg)
	if err != nil || res.Outcome != kvfence.Denied || res.Reason != kvfence.ReasonReceiverHeld {
		t.Fatalf("B's assignment after the hold: %+v %v", res, err)
	}
	status, err := op.Status(ctx, "")
	if err != nil || len(status.Scopes) != 1 || status.Scopes[0].Epoch != 2 || status.Scopes[0].StaleRejections != 1 ||
		status.Scopes[0].Denials[kvfence.ReasonExecutorMismatch] != 1 || status.AuditSeq != s.r.Head().Seq {
		t.Fatalf("Status: %+v %v", status, err)
	}
	if _, err := op.Status(ctx, "nope"); !errors.Is(err, kvfence.ErrUnknownScope) {
		t.Fatalf("Status of an unknown scope: %v", err)
	}
	got, err := op.Target(ctx, scope)
	if err != nil || got.Revision != 2 || !strings.Contains(string(got.Value), `"45"`) {
		t.Fatalf("Target: %+v %v", got, err)
	}
	if _, err := op.Target(ctx, "nope"); !errors.Is(err, kvfence.ErrUnknownTarget) {
		t.Fatalf("Target unknown: %v", err)
	}
	// The events read back are the receiver's chain, entry for entry.
	var remote []kvfence.Event
	if err := op.Events(ctx, 0, func(ev kvfence.Event) bool { remote = append(remote, ev); return true }); err != nil {
		t.Fatal(err)
	}
	var local []kvfence.Event
	s.r.Events(0, func(ev kvfence.Event) bool { local = append(local, ev); return true })
	if len(remote) != len(local) || remote[len(remote)-1].Hash != local[len(local)-1].Hash {
		t.Fatalf("%d remote events, %d local", len(remote), len(local))
	}
	actors := 0
	for _, ev := range remote {
		if ev.Actor == operator {
			actors++
		}
	}
	if actors != 4 {
		t.Fatalf("%d entries with the operator as actor, want 4", actors)
	}
}

// Ensure that a worker's calls reuse their connections: sequential calls
// share one, concurrent ones no more than there are callers.
func TestClient_ConnectionReuse(t *testing.T) {
	s := serve(t)
	ctx := context.Background()
	op, w := s.client(operator), s.client(workerA)
	if _, err := op.CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	before := s.conns.Load()
	for range 30 {
		if _, err := w.Submit(ctx, []byte{0xa0}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.conns.Load() - before; n != 1 {
		t.Fatalf("30 sequential submits opened %d connections, want 1", n)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				if _, err := w.Submit(ctx, []byte{0xa0}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// The transport may dial one more connection for a caller while
	// another connection is being returned, and keeps it; what matters is
	// that 40 calls did not open 40.
	if n := s.conns.Load() - before; n > 8 {
		t.Fatalf("4 concurrent submitters making 40 calls opened %d connections in all", n)
	}
}

// unixServer serves h on a unix socket and returns a client for it.
func unixServer(t *testing.T, h http.Handler, connContext bool) *client.Client {
	t.Helper()
	// Socket paths are short (108 bytes); t.TempDir may be longer.
	dir, err := os.MkdirTemp("", "kvf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "admin.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	if connContext {
		srv.Config.ConnContext = server.ConnContext
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := client.New("unix://"+sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// Ensure that error answers map back to kvfence's sentinels and to the
// client's, including answers without a JSON body.
func TestClient_ErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   error
	}{
		{503, `{"error":{"code":"storage_busy","message":"busy"}}`, kvfence.ErrStorageBusy},
		{500, `{"error":{"code":"not_acknowledged","message":"anchor"}}`, kvfence.ErrNotAcknowledged},
		{404, `{"error":{"code":"unknown_scope","message":"x"}}`, kvfence.ErrUnknownScope},
		{409, `{"error":{"code":"not_held","message":"x"}}`, kvfence.ErrNotHeld},
		{401, `{"error":{"code":"unauthenticated","message":"x"}}`, client.ErrUnauthenticated},
		{403, `{"error":{"code":"forbidden","message":"x"}}`, client.ErrForbidden},
		{413, `{"error":{"code":"too_large","message":"x"}}`, client.ErrTooLarge},
		{500, `{"error":{"code":"integrity","message":"x"}}`, client.ErrIntegrity},
		{500, `{"error":{"code":"internal","message":"x"}}`, client.ErrServer},
		{503, `{"error":{"code":"outcome_unknown","message":"x"}}`, client.ErrOutcomeUnknown},
		{503, `{"error":{"code":"outcome_unknown","message":"x"}}`, kvfence.ErrOutcomeUnknown},
		// A submit answered 5xx by something other than the receiver
		// (a proxy that gave up waiting) may have been applied.
		{502, `bad gateway`, client.ErrOutcomeUnknown},
		{200, `{"outcome":"maybe"}`, client.ErrProtocol},
		{200, `{"error":{"code":"storage_busy","message":"busy"}}`, kvfence.ErrStorageBusy},
		{200, `{"outcome": "applied", "error": {"code":"unknown_scope","message":"x"}}`, kvfence.ErrUnknownScope},
		{307, `{"outcome":"applied"}`, client.ErrProtocol},
	} {
		var calls atomic.Int64
		c := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			if tc.status/100 == 3 {
				w.Header().Set("Location", api.PathSubmit+"?again")
			}
			w.WriteHeader(tc.status)
			io.WriteString(w, tc.body)
		}), false)
		_, err := c.Submit(context.Background(), []byte{0xa0})
		if !errors.Is(err, tc.want) {
			t.Errorf("%d %s: %v, want %v", tc.status, tc.body, err, tc.want)
		}
		// A redirect is not followed: the envelope is sent once, where
		// the caller said.
		if n := calls.Load(); n != 1 {
			t.Errorf("%d %s: %d requests, want 1", tc.status, tc.body, n)
		}
	}
}

// Ensure that a submit answer decodes to the same result whether it is in
// the receiver's canonical form, escaped, or spaced out.
func TestClient_SubmitAnswerForms(t *testing.T) {
	want := kvfence.Result{Outcome: kvfence.Denied, Reason: "executor_mismatch", Detail: "a \"quoted\"\ndetail é",
		Scope: "s", Epoch: 3, Grant: "g", Action: "a", Target: "t", Revision: 9, AuditSeq: 1 << 40}
	out := api.SubmitOf(want)
	canonical := out.AppendJSON(nil)
	plain := want
	plain.Detail = "plain detail"
	outPlain := api.SubmitOf(plain)
	for _, tc := range []struct {
		body string
		want kvfence.Result
	}{
		{string(canonical), want},
		{string(outPlain.AppendJSON(nil)), plain},
		{strings.ReplaceAll(string(outPlain.AppendJSON(nil)), ",", " , "), plain},
		{`{"audit_seq":1099511627776,"revision":9,"target":"t","action":"a","grant":"g","epoch":3,"scope":"s",` +
			`"detail":"plain detail","reason":"executor_mismatch","outcome":"denied"}`, plain},
	} {
		c := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, tc.body)
		}), false)
		got, err := c.Submit(context.Background(), []byte{0xa0})
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.body, got, err, tc.want)
		}
	}
}

// Ensure that the client refuses URLs that carry no identity or no TLS
// configuration.
func TestClient_New(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:1", "https://127.0.0.1:1", "unix://host/x", "unix://", "ftp://x",
		"https://127.0.0.1:1/v1?x=1"} {
		if _, err := client.New(u, nil); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	if _, err := client.New("https://127.0.0.1:1", &tls.Config{}); err != nil {
		t.Fatal(err)
	}
}

// Ensure that the admin socket works through the client, with the peer's
// uid as the hold's actor.
func TestClient_UnixSocket(t *testing.T) {
	s := serve(t)
	ctx := context.Background()
	if _, err := s.r.Admin().CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	uid := uint32(os.Getuid())
	h, err := server.New(server.Options{Receiver: s.r, Authenticator: server.UnixPeer{UIDs: []uint32{uid}},
		Admins: []string{server.UnixIdentity(uid)}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	c := unixServer(t, h, true)
	if err := c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}
	hr, err := c.Hold(ctx, kvfence.HoldRequest{Scopes: []string{scope}, Reason: "incident"})
	if err != nil {
		t.Fatal(err)
	}
	var actor string
	c.Events(ctx, hr.AuditSeq, func(ev kvfence.Event) bool { actor = ev.Actor; return false })
	if actor != server.UnixIdentity(uid) {
		t.Fatalf("hold actor %q", actor)
	}
}

// Ensure that Events refuses an entry whose fields do not hash to the hash
// sent with it, or that does not link to the entry before it.
func TestClient_EventsChecked(t *testing.T) {
	s := serve(t)
	ctx := context.Background()
	if _, err := s.r.Admin().CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	if _, err := s.r.Admin().CreateScope(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	var page api.Events
	s.r.Events(0, func(ev kvfence.Event) bool { page.Events = append(page.Events, ev.Entry.JSON(ev.Hash)); return true })
	for name, mangle := range map[string]func(p *api.Events){
		"altered note":  func(p *api.Events) { p.Events[1].Note = "nothing happened" },
		"altered actor": func(p *api.Events) { p.Events[1].Actor = operator },
		"missing entry": func(p *api.Events) { p.Events = append(p.Events[:0:0], p.Events[0], p.Events[2]) },
	} {
		p := api.Events{Events: append([]audit.EntryJSON(nil), page.Events...)}
		mangle(&p)
		c := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			json.NewEncoder(w).Encode(p)
		}), false)
		err := c.Events(ctx, 0, func(kvfence.Event) bool { return true })
		if !errors.Is(err, client.ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
}

// Ensure that an assignment refuses request bytes its grant does not bind,
// and builds the envelope the receiver accepts.
func TestNewAssignment(t *testing.T) {
	s := serve(t)
	ctx := context.Background()
	admin := s.r.Admin()
	if _, err := admin.CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateTarget(ctx, scope, scope, []byte(`{"data":{"retention_days":"30"}}`)); err != nil {
		t.Fatal(err)
	}
	req := request(t, "raise")
	g, err := admin.Activate(ctx, kvfence.ActivateRequest{Scope: scope, Executor: workerA, Claim: "c", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.NewAssignment(g, request(t, "other")); !errors.Is(err, kvfence.ErrInvalidArgument) {
		t.Fatalf("other bytes: %v", err)
	}
	a, err := client.NewAssignment(g, req)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.client(workerA).SubmitAssignment(ctx, a)
	if err != nil || res.Outcome != kvfence.Applied {
		t.Fatalf("%+v %v", res, err)
	}
}
