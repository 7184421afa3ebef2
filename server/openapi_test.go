package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/backup"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// specFile is the API's contract, which these tests hold the server to.
const specFile = "../docs/openapi.yaml"

// The listeners an operation's x-kvfence-listeners names.
const (
	listenerAPI     = "api"
	listenerMetrics = "metrics"
)

var registerCBOR sync.Once

// loadSpec loads and validates the contract as OpenAPI 3.1.
func loadSpec(t testing.TB) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(specFile)
	if err != nil {
		t.Fatalf("loading %s: %v", specFile, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", specFile, err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("%s is OpenAPI %s, want 3.1", specFile, doc.OpenAPI)
	}
	// An envelope is opaque bytes to the document; its CBOR is checked by
	// the receiver, not by a schema.
	registerCBOR.Do(func() { openapi3filter.RegisterBodyDecoder(api.ContentCBOR, openapi3filter.FileBodyDecoder) })
	return doc
}

// specOps returns the document's operations served on listener, as
// "METHOD path".
func specOps(t testing.TB, doc *openapi3.T, listener string) map[string]*openapi3.Operation {
	t.Helper()
	out := map[string]*openapi3.Operation{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ls, ok := op.Extensions["x-kvfence-listeners"].([]any)
			if !ok || len(ls) == 0 {
				t.Errorf("%s %s: no x-kvfence-listeners", method, path)
				continue
			}
			for _, l := range ls {
				if l != listenerAPI && l != listenerMetrics {
					t.Errorf("%s %s: unknown listener %v", method, path, l)
				}
				if l == listener {
					out[method+" "+path] = op
				}
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Ensure that every route the handler and the probes register is in the
// contract with its method, listener and role, and that the contract has no
// operation the server does not register.
func TestOpenAPI_RoutesMatch(t *testing.T) {
	doc := loadSpec(t)
	h, err := server.New(server.Options{Receiver: openReceiver(t, t.TempDir(), false), Authenticator: server.SPIFFECertificate{}})
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for path, methods := range h.RouteMethods() {
		for _, m := range methods {
			served[m+" "+path] = true
		}
	}
	probes := map[string]bool{}
	for _, p := range server.ProbePatterns() {
		probes[p] = true
		// ServeMux serves HEAD wherever it serves GET.
		if m, path, ok := strings.Cut(p, " "); ok && m == http.MethodGet {
			probes[http.MethodHead+" "+path] = true
		}
	}
	for _, c := range []struct {
		listener string
		served   map[string]bool
	}{{listenerAPI, served}, {listenerMetrics, probes}} {
		ops := specOps(t, doc, c.listener)
		for _, k := range sortedKeys(c.served) {
			if ops[k] == nil {
				t.Errorf("listener %s serves %s, which %s does not describe", c.listener, k, specFile)
			}
		}
		for _, k := range sortedKeys(ops) {
			if !c.served[k] {
				t.Errorf("%s describes %s on listener %s, which the server does not register", specFile, k, c.listener)
			}
			op := ops[k]
			if op.Responses.Default() != nil {
				t.Errorf("%s: a default response would let any status through", k)
			}
			method, path, _ := strings.Cut(k, " ")
			// A GET route refuses any body (400).
			if (method == http.MethodGet || method == http.MethodHead) && op.RequestBody != nil {
				t.Errorf("%s: a request body for a route that takes none", k)
			}
			if admin, ok := op.Extensions["x-kvfence-admin"].(bool); !ok {
				t.Errorf("%s: no x-kvfence-admin", k)
			} else if c.listener == listenerAPI && admin != h.AdminRoute(path) {
				t.Errorf("%s: x-kvfence-admin is %v, the handler says %v", k, admin, h.AdminRoute(path))
			}
		}
	}
}

// constStrings returns the string constants of a Go file whose names pass
// keep, by value, read from the source so that a new one counts.
func constStrings(t *testing.T, file string, keep func(name string, typ ast.Expr) bool) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if i >= len(vs.Values) || !keep(n.Name, vs.Type) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, v)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no constants found in %s", file)
	}
	return out
}

// schemaEnum returns the string enum of a component schema, or of the code
// of an error schema.
func schemaEnum(t *testing.T, doc *openapi3.T, name string, path ...string) []string {
	t.Helper()
	ref := doc.Components.Schemas[name]
	if ref == nil {
		t.Fatalf("%s has no schema %s", specFile, name)
	}
	s := ref.Value
	for _, p := range path {
		if s.Properties[p] == nil {
			t.Fatalf("schema %s has no %s", name, strings.Join(path, "."))
		}
		s = s.Properties[p].Value
	}
	var out []string
	for _, v := range s.Enum {
		str, ok := v.(string)
		if !ok {
			t.Fatalf("schema %s: enum value %v is not a string", name, v)
		}
		out = append(out, str)
	}
	return out
}

// Ensure that every error code the server has (api's Code constants and
// kvfence's sentinels as api.Sentinels codes them) and every denial reason
// is in the contract's enums, each error code under the schema of the
// status the server answers it with, and that the contract names no code
// the server does not have.
func TestOpenAPI_Codes(t *testing.T) {
	doc := loadSpec(t)
	all := schemaEnum(t, doc, "ErrorCode")
	have := map[string]bool{}
	for _, c := range constStrings(t, "../internal/api/errors.go", func(n string, _ ast.Expr) bool { return strings.HasPrefix(n, "Code") }) {
		have[c] = true
		if !slices.Contains(all, c) {
			t.Errorf("error code %q (internal/api/errors.go) is not in ErrorCode", c)
		}
	}
	for _, s := range api.Sentinels {
		have[s.Code] = true
		if !slices.Contains(all, s.Code) {
			t.Errorf("error code %q (api.Sentinels) is not in ErrorCode", s.Code)
		}
		if !slices.Contains(schemaEnum(t, doc, fmt.Sprintf("Error%d", s.Status), "error", "code"), s.Code) {
			t.Errorf("error code %q is answered %d, but is not in Error%d", s.Code, s.Status, s.Status)
		}
	}
	// The statuses of the codes that are not sentinels are held by
	// TestOpenAPI_Answers, which makes the server answer each of them.
	var byStatus []string
	for name := range doc.Components.Schemas {
		if len(name) == len("Error000") && strings.HasPrefix(name, "Error") {
			for _, c := range schemaEnum(t, doc, name, "error", "code") {
				byStatus = append(byStatus, c)
				if !slices.Contains(all, c) {
					t.Errorf("%s names %q, which ErrorCode does not", name, c)
				}
			}
		}
	}
	for _, c := range all {
		if !have[c] {
			t.Errorf("ErrorCode names %q, which the server does not have", c)
		}
		if n := strings.Count(" "+strings.Join(byStatus, " ")+" ", " "+c+" "); n != 1 {
			t.Errorf("error code %q is in %d of the per-status error schemas, want 1", c, n)
		}
	}

	reasons := constStrings(t, "../kvfence/types.go", func(_ string, typ ast.Expr) bool {
		id, ok := typ.(*ast.Ident)
		return ok && id.Name == "Reason"
	})
	enum := schemaEnum(t, doc, "Reason")
	for _, r := range reasons {
		if !slices.Contains(enum, r) {
			t.Errorf("denial reason %q (kvfence/types.go) is not in Reason", r)
		}
	}
	for _, r := range enum {
		if !slices.Contains(reasons, r) {
			t.Errorf("Reason names %q, which kvfence does not have", r)
		}
	}
}

// Ensure that README's table of the served API's error codes lists exactly
// the contract's codes, each with the status the contract gives it.
func TestOpenAPI_READMECodes(t *testing.T) {
	doc := loadSpec(t)
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(b, []byte("<!-- http error codes -->"))
	end := bytes.Index(b, []byte("<!-- /http error codes -->"))
	if start < 0 || end < start {
		t.Fatal("README has no table between <!-- http error codes --> and <!-- /http error codes -->")
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(b[start:end]), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		status := strings.TrimSpace(cells[2])
		for _, f := range strings.Split(cells[1], ",") {
			code := strings.Trim(strings.TrimSpace(f), "`")
			documented[code] = true
			if _, ok := doc.Components.Schemas["Error"+status]; !ok {
				t.Errorf("README gives %s status %s, which has no error schema", code, status)
			} else if !slices.Contains(schemaEnum(t, doc, "Error"+status, "error", "code"), code) {
				t.Errorf("README gives %s status %s; %s does not", code, status, specFile)
			}
		}
	}
	for _, c := range schemaEnum(t, doc, "ErrorCode") {
		if !documented[c] {
			t.Errorf("README's served API table lacks %q", c)
		}
	}
	for c := range documented {
		if !slices.Contains(schemaEnum(t, doc, "ErrorCode"), c) {
			t.Errorf("README's served API table names %q, which %s does not", c, specFile)
		}
	}
}

// authFunc is an Authenticator of a test's choosing, for the answers that
// only an embedding service's Authenticator gives (403 of a known but
// refused identity, 500 of a failing one).
type authFunc func(*http.Request) (string, error)

func (f authFunc) Authenticate(r *http.Request) (string, error) { return f(r) }

// answer is one request and the server's answer to it, kept whole so that
// both can be checked against the contract.
type answer struct {
	listener string
	method   string
	target   string // path and query
	ctype    string
	reqBody  []byte
	status   int
	header   http.Header
	body     []byte
}

func (a answer) path() string { p, _, _ := strings.Cut(a.target, "?"); return p }

func (a answer) String() string {
	body := string(a.body)
	// A backup is binary and as large as the database: its length says
	// enough.
	if !strings.HasPrefix(a.header.Get("Content-Type"), api.ContentJSON) && !strings.HasPrefix(a.header.Get("Content-Type"), "text/") {
		body = fmt.Sprintf("<%d bytes of %s>", len(a.body), a.header.Get("Content-Type"))
	}
	return fmt.Sprintf("%s %s (%s) -> %d %s", a.method, a.target, a.listener, a.status, body)
}

// contract checks answers against the contract and records which
// operations and statuses they covered.
type contract struct {
	t       *testing.T
	doc     *openapi3.T
	covered map[string]bool // "METHOD path status", and "component:Name"
}

func (c *contract) request(a answer) *http.Request {
	req := httptest.NewRequest(a.method, a.target, bytes.NewReader(a.reqBody))
	if a.ctype != "" {
		req.Header.Set("Content-Type", a.ctype)
	}
	return req
}

func (c *contract) route(a answer) (*routers.Route, bool) {
	item := c.doc.Paths.Value(a.path())
	if item == nil {
		return nil, false
	}
	op := item.GetOperation(a.method)
	if op == nil {
		return nil, false
	}
	return &routers.Route{Spec: c.doc, Path: a.path(), PathItem: item, Method: a.method, Operation: op}, true
}

// check validates an answer: its status must be one the contract lists for
// the operation, and its content type and body must match that response.
// An answer to a path or method that is not served is checked against the
// contract's NoSuchEndpoint and MethodNotAllowed.
func (c *contract) check(a answer) {
	c.t.Helper()
	rt, ok := c.route(a)
	if !ok {
		c.checkUnrouted(a)
		return
	}
	key := fmt.Sprintf("%s %s %d", a.method, a.path(), a.status)
	if rt.Operation.Responses.Status(a.status) == nil {
		c.t.Errorf("%s: status %d is not in %s for %s %s", a, a.status, specFile, a.method, a.path())
		return
	}
	if a.method == http.MethodHead {
		if len(a.body) != 0 {
			c.t.Errorf("%s: a HEAD answer with a body", a)
		}
		c.covered[key] = true
		return
	}
	if len(rt.Operation.Responses.Status(a.status).Value.Content) == 0 || len(a.body) == 0 {
		c.t.Errorf("%s: the contract or the answer has no body", a)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: c.request(a), Route: rt},
		Status:                 a.status, Header: a.header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	in.SetBodyBytes(a.body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		c.t.Errorf("%s: the answer is not what %s says: %v", a, specFile, err)
		return
	}
	c.covered[key] = true
}

// checkRequest checks that the contract accepts a request the server took,
// or (refused) refuses one the server refused for its body or query.
func (c *contract) checkRequest(a answer, refused bool) {
	c.t.Helper()
	rt, ok := c.route(a)
	if !ok {
		c.t.Errorf("%s: no operation", a)
		return
	}
	err := openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: c.request(a), Route: rt,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}})
	switch {
	case refused && err == nil:
		c.t.Errorf("%s: the server refused the request, %s accepts it", a, specFile)
	case !refused && err != nil:
		c.t.Errorf("%s: the server took the request, %s refuses it: %v", a, specFile, err)
	}
}

// checkUnrouted checks an answer to a path or method not served: 404
// no_such_endpoint, or 405 with an Allow header naming exactly the methods
// the contract gives the path on the api listener.
func (c *contract) checkUnrouted(a answer) {
	c.t.Helper()
	name := "NoSuchEndpoint"
	if item := c.doc.Paths.Value(a.path()); item != nil {
		name = "MethodNotAllowed"
		var methods []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost} {
			if op := item.GetOperation(m); op != nil && slices.Contains(op.Extensions["x-kvfence-listeners"].([]any), any(listenerAPI)) {
				methods = append(methods, m)
			}
		}
		if got, want := a.header.Get("Allow"), strings.Join(methods, ", "); got != want {
			c.t.Errorf("%s: Allow %q, the contract's methods are %q", a, got, want)
		}
	}
	resp := c.doc.Components.Responses[name]
	if resp == nil {
		c.t.Errorf("%s has no response %s", specFile, name)
		return
	}
	want := map[string]int{"NoSuchEndpoint": http.StatusNotFound, "MethodNotAllowed": http.StatusMethodNotAllowed}[name]
	if a.status != want {
		c.t.Errorf("%s: want %d (%s)", a, want, name)
		return
	}
	mt := resp.Value.Content.Get(a.header.Get("Content-Type"))
	if mt == nil || a.header.Get("Content-Type") != api.ContentJSON {
		c.t.Errorf("%s: content type %q, not the %s response's", a, a.header.Get("Content-Type"), name)
		return
	}
	var v any
	if err := json.Unmarshal(a.body, &v); err != nil {
		c.t.Errorf("%s: %v", a, err)
		return
	}
	if err := mt.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		c.t.Errorf("%s: not the %s response: %v", a, name, err)
		return
	}
	c.covered["component:"+name] = true
}

// send makes one request over an HTTP client.
func send(t *testing.T, hc *http.Client, base, listener, method, target, ctype string, body []byte) answer {
	t.Helper()
	req, err := http.NewRequest(method, base+target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{listener: listener, method: method, target: target, ctype: ctype, reqBody: body,
		status: resp.StatusCode, header: resp.Header, body: b}
}

// serveTLS serves h over mTLS as newEnv serves its handler, with e's CA.
func serveTLS(t *testing.T, e *env, h http.Handler) *httptest.Server {
	t.Helper()
	cert, err := pki.Issue(e.ca, pki.Options{Name: "receiver", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert.TLS()},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: e.ca.Pool()}
	srv.Config.ErrorLog = slogDiscard()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// reopen initialises a receiver with the fixture scope and target in a new
// directory, lets prepare change it, and opens it again with opts (its key
// and anchor added).
func reopen(t *testing.T, opts kvfence.Options, prepare func(*kvfence.Receiver)) *kvfence.Receiver {
	t.Helper()
	dir := t.TempDir()
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
	ctx := context.Background()
	if _, err := r.Admin().CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admin().CreateTarget(ctx, scope, scope, []byte(initValue)); err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(r)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	opts.Key, opts.Anchor = key, anchor
	if r, err = kvfence.Open(path, &opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func jsonBody(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Ensure that the server's real answers, on every route and for every
// status the contract lists for it, are what the contract says: status,
// content type and body; that the contract accepts the requests the
// server takes and refuses the bodies it refuses; and that every
// (operation, status) of the contract was answered by the server here.
func TestOpenAPI_Answers(t *testing.T) {
	doc := loadSpec(t)
	c := &contract{t: t, doc: doc, covered: map[string]bool{}}
	e := newEnv(t)
	admin, worker, workerBc, anon := e.client(operator), e.client(workerA), e.client(workerB), e.client()
	ctx := context.Background()

	// call sends over mTLS to e's server and checks the answer; want is the
	// status the case is there to provoke.
	call := func(hc *http.Client, want int, method, target, ctype string, body []byte) answer {
		t.Helper()
		a := send(t, hc, e.srv.URL, listenerAPI, method, target, ctype, body)
		if a.status != want {
			t.Errorf("%s: want status %d", a, want)
		}
		c.check(a)
		return a
	}
	// ok is call for a request the contract must accept, refused for a
	// body or query the contract must refuse.
	ok := func(hc *http.Client, want int, method, target, ctype string, body []byte) answer {
		t.Helper()
		a := call(hc, want, method, target, ctype, body)
		c.checkRequest(a, false)
		return a
	}
	refused := func(hc *http.Client, want int, method, target, ctype string, body []byte) answer {
		t.Helper()
		a := call(hc, want, method, target, ctype, body)
		c.checkRequest(a, true)
		return a
	}
	post := func(hc *http.Client, want int, path string, v any) answer {
		t.Helper()
		return ok(hc, want, http.MethodPost, path, api.ContentJSON, jsonBody(t, v))
	}

	// Liveness on the api listener.
	ok(admin, 200, http.MethodGet, api.PathHealthz, "", nil)
	ok(worker, 200, http.MethodHead, api.PathHealthz, "", nil)

	// Scopes and targets.
	post(admin, 200, api.PathScopes, api.ScopeCreateRequest{Scope: "s2", MaxGrantTTL: "2h"})
	post(admin, 409, api.PathScopes, api.ScopeCreateRequest{Scope: "s2"})
	refused(admin, 400, http.MethodPost, api.PathScopes, api.ContentJSON, []byte(`{"scope":"s3","bogus":1}`))
	refused(admin, 400, http.MethodPost, api.PathScopes, api.ContentJSON, []byte(`{"scope":3}`))
	call(admin, 415, http.MethodPost, api.PathScopes, "text/plain", []byte(`{"scope":"s3"}`))
	post(admin, 200, api.PathTargets, map[string]any{"scope": "s2", "target": "t2", "value_b64": []byte{0xff, 0}})
	post(admin, 409, api.PathTargets, map[string]any{"scope": "s2", "target": "t2", "value_b64": []byte("x")})
	post(admin, 404, api.PathTargets, map[string]any{"scope": "nope", "target": "t3", "value_b64": []byte("x")})
	refused(admin, 400, http.MethodPost, api.PathTargets, api.ContentJSON, []byte(`{"scope":"s2","target":"t3"}`))
	refused(admin, 400, http.MethodPost, api.PathTargets, api.ContentJSON, []byte(`{"scope":"s2","target":"t3","kind":"kubernetes","object":"configmaps/a/b","value_b64":"eA=="}`))
	// A database file holds no etcd key, and this receiver has no Kubernetes identity.
	post(admin, 501, api.PathTargets, map[string]any{"scope": "s2", "target": "t3", "kind": "etcd", "target_key": "/app/x", "value_b64": []byte("x")})
	post(admin, 501, api.PathTargets, map[string]any{"scope": "s2", "target": "t3", "kind": "kubernetes", "object": "configmaps/a/b"})
	call(admin, 415, http.MethodPost, api.PathTargets, "", []byte(`{}`))

	// Activation, and submits under the grant.
	req := request(t, "raise-retention")
	act := post(admin, 200, api.PathActivate, api.ActivateRequest{Scope: scope, Executor: workerA, Claim: "claim-a", RequestB64: req})
	var g api.Activate
	if err := json.Unmarshal(act.body, &g); err != nil {
		t.Fatal(err)
	}
	post(admin, 409, api.PathActivate, api.ActivateRequest{Scope: scope, Executor: workerA, Claim: "claim-a", RequestB64: req})
	post(admin, 404, api.PathActivate, api.ActivateRequest{Scope: "nope", Executor: workerA, Claim: "c", RequestB64: req})
	post(admin, 400, api.PathActivate, api.ActivateRequest{Scope: "s2", Executor: workerA, Claim: "c", RequestB64: req, TTL: "soon"})
	call(admin, 415, http.MethodPost, api.PathActivate, "application/json-patch+json", []byte(`{}`))
	env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: scope, Epoch: g.Epoch, Grant: g.Grant,
		Executor: workerA, Claim: "claim-a", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	ok(worker, 200, http.MethodPost, api.PathSubmit, api.ContentCBOR, env)
	ok(worker, 200, http.MethodPost, api.PathSubmit, api.ContentCBOR, env)
	ok(workerBc, 403, http.MethodPost, api.PathSubmit, api.ContentCBOR, env)
	ok(worker, 403, http.MethodPost, api.PathSubmit, api.ContentCBOR, []byte{0xa0})
	call(worker, 415, http.MethodPost, api.PathSubmit, api.ContentJSON, env)
	// A batch: a decision or an error per envelope, or refused whole.
	oversized := bytes.Repeat([]byte{0xa0}, kvfence.DefaultMaxEnvelopeSize+1)
	ok(worker, 200, http.MethodPost, api.PathSubmitBatch, api.ContentCBOR, api.AppendBatch(nil, [][]byte{env, {0xa0}, oversized}))
	call(worker, 400, http.MethodPost, api.PathSubmitBatch, api.ContentCBOR, []byte{0x80})
	call(worker, 400, http.MethodPost, api.PathSubmitBatch, api.ContentCBOR, env)
	call(worker, 413, http.MethodPost, api.PathSubmitBatch, api.ContentCBOR, api.AppendBatch(nil, make([][]byte, api.MaxBatchItems+1)))
	call(worker, 415, http.MethodPost, api.PathSubmitBatch, api.ContentJSON, api.AppendBatch(nil, [][]byte{env}))

	// Extending the active grant: a later end, within the scope's maximum
	// from activation; a grant that is not active or whose window is over
	// is 409.
	ext := post(admin, 200, api.PathGrantExtend, api.GrantExtendRequest{Grant: g.Grant, TTL: "30m"})
	var ge api.GrantExtend
	if err := json.Unmarshal(ext.body, &ge); err != nil {
		t.Fatal(err)
	}
	if ge.Grant != g.Grant || *ge.NotAfter <= *g.NotAfter {
		t.Errorf("%s: not grant %s with its end later than %s", ext, g.Grant, *g.NotAfter)
	}
	post(admin, 400, api.PathGrantExtend, api.GrantExtendRequest{Grant: g.Grant, TTL: "soon"})
	post(admin, 400, api.PathGrantExtend, api.GrantExtendRequest{Grant: g.Grant, TTL: "1000h"})
	refused(admin, 400, http.MethodPost, api.PathGrantExtend, api.ContentJSON, []byte(`{"grant":"`+g.Grant+`"}`))
	post(admin, 409, api.PathGrantExtend, api.GrantExtendRequest{Grant: strings.Repeat("0", 32), TTL: "30m"})
	{
		var short kvfence.Grant
		exp := reopen(t, kvfence.Options{}, func(r *kvfence.Receiver) {
			var err error
			short, err = r.Admin().Activate(ctx, kvfence.ActivateRequest{Scope: scope, Executor: workerA, Claim: "c",
				Request: req, TTL: time.Nanosecond})
			if err != nil {
				t.Fatal(err)
			}
		})
		srv := serveTLS(t, e, mustNew(t, server.Options{Receiver: exp, Authenticator: server.SPIFFECertificate{}, Admins: []string{operator}}))
		a := send(t, admin, srv.URL, listenerAPI, http.MethodPost, api.PathGrantExtend, api.ContentJSON,
			jsonBody(t, api.GrantExtendRequest{Grant: short.ID, TTL: "30m"}))
		if a.status != 409 || !bytes.Contains(a.body, []byte(`"grant_expired"`)) {
			t.Errorf("%s: want 409 grant_expired", a)
		}
		c.check(a)
	}
	call(admin, 415, http.MethodPost, api.PathGrantExtend, "text/plain", []byte(`{}`))

	// Reads, with the scope open under the grant.
	ok(admin, 200, http.MethodGet, api.PathStatus, "", nil)
	ok(admin, 200, http.MethodGet, api.PathStatus+"?scope="+scope, "", nil)
	call(admin, 404, http.MethodGet, api.PathStatus+"?scope=nope", "", nil)
	// OpenAPI cannot say that a route takes no other query parameter; the
	// contract says it in words.
	call(admin, 400, http.MethodGet, api.PathStatus+"?bogus=1", "", nil)
	ok(admin, 200, http.MethodGet, api.PathTarget+"?target="+scope, "", nil)
	ok(admin, 200, http.MethodGet, api.PathTarget+"?target=t2", "", nil)
	call(admin, 404, http.MethodGet, api.PathTarget+"?target=nope", "", nil)
	refused(admin, 400, http.MethodGet, api.PathTarget, "", nil)
	ok(admin, 200, http.MethodGet, api.PathTargetList, "", nil)
	ok(admin, 200, http.MethodGet, api.PathTargetList+"?scope=s2", "", nil)
	call(admin, 404, http.MethodGet, api.PathTargetList+"?scope=nope", "", nil)
	refused(admin, 400, http.MethodGet, api.PathTargetList+"?scope=", "", nil)
	ok(admin, 200, http.MethodGet, api.PathGrant+"?id="+g.Grant, "", nil)
	call(admin, 404, http.MethodGet, api.PathGrant+"?id="+strings.Repeat("0", 32), "", nil)
	refused(admin, 400, http.MethodGet, api.PathGrant, "", nil)
	ok(admin, 200, http.MethodGet, api.PathReceipt+"?scope="+scope+"&action=raise-retention", "", nil)
	call(admin, 404, http.MethodGet, api.PathReceipt+"?scope="+scope+"&action=nope", "", nil)
	refused(admin, 400, http.MethodGet, api.PathReceipt+"?scope="+scope, "", nil)
	ok(admin, 200, http.MethodGet, api.PathReceipts+"?scope="+scope+"&claim=claim-a", "", nil)
	call(admin, 404, http.MethodGet, api.PathReceipts+"?scope=nope&claim=claim-a", "", nil)
	refused(admin, 400, http.MethodGet, api.PathReceipts+"?scope="+scope, "", nil)
	ok(admin, 200, http.MethodGet, api.PathEvents, "", nil)
	ok(admin, 200, http.MethodGet, api.PathEvents+"?since=2&limit=3", "", nil)
	refused(admin, 400, http.MethodGet, api.PathEvents+"?limit=0", "", nil)
	call(admin, 400, http.MethodGet, api.PathEvents, api.ContentJSON, []byte(`{}`))

	// The online verification and the backup of the running receiver.
	vc := ok(admin, 200, http.MethodGet, api.PathVerifyChain, "", nil)
	var rep api.VerifyChain
	if err := json.Unmarshal(vc.body, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Entries == 0 {
		t.Errorf("%s: want a verified chain", vc)
	}
	call(admin, 400, http.MethodGet, api.PathVerifyChain+"?bogus=1", "", nil)
	call(admin, 400, http.MethodGet, api.PathVerifyChain, api.ContentJSON, []byte(`{}`))
	bk := ok(admin, 200, http.MethodGet, api.PathBackup, "", nil)
	if got := bk.header.Get("Content-Type"); got != backup.ContentType {
		t.Errorf("backup: Content-Type %q, want %q", got, backup.ContentType)
	}
	var db bytes.Buffer
	if sc, err := backup.Unpack(bytes.NewReader(bk.body), &db); err != nil {
		t.Errorf("backup: the body does not unpack: %v", err)
	} else if sc.Receiver != e.r.ID() || db.Len() == 0 {
		t.Errorf("backup: checkpoint %+v and a database of %d bytes", sc.Checkpoint, db.Len())
	}
	call(admin, 400, http.MethodGet, api.PathBackup+"?bogus=1", "", nil)
	call(admin, 400, http.MethodGet, api.PathBackup, api.ContentJSON, []byte(`{}`))
	// A storage engine that cannot snapshot (etcd), as the handler answers
	// its sentinel.
	{
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, api.PathBackup, nil)
		e.handler(server.SPIFFECertificate{}, operator).WriteError(w, r, fmt.Errorf("etcd: %w", kvfence.ErrSnapshotUnsupported))
		a := answer{listener: listenerAPI, method: http.MethodGet, target: api.PathBackup, status: w.Code,
			header: w.Header(), body: w.Body.Bytes()}
		if a.status != 501 {
			t.Errorf("%s: want 501", a)
		}
		c.check(a)
	}

	// Holds; then a stale submit, and status with the denials counted.
	post(admin, 200, api.PathHold, api.HoldRequest{Scopes: []string{scope}, Reason: "stalled", HoldID: "incident-1"})
	post(admin, 200, api.PathHold, api.HoldRequest{Scopes: []string{scope}, Reason: "stalled", HoldID: "incident-1"})
	post(admin, 409, api.PathHold, api.HoldRequest{Scopes: []string{scope}, Reason: "other", HoldID: "incident-1"})
	post(admin, 404, api.PathHold, api.HoldRequest{Scopes: []string{"nope"}, Reason: "x"})
	set := []byte("y")
	req2, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: "set-t2", Target: "t2", Set: &set})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Admin().Activate(ctx, kvfence.ActivateRequest{Scope: "s2", Executor: workerB, Claim: "c2",
		Request: req2}); err != nil {
		t.Fatal(err)
	}
	post(admin, 200, api.PathHold, api.HoldRequest{All: true, Reason: "everything"})
	post(admin, 400, api.PathHold, api.HoldRequest{All: true, Scopes: []string{scope}, Reason: "x"})
	refused(admin, 400, http.MethodPost, api.PathHold, api.ContentJSON, []byte(`{"scopes":"one","reason":"x"}`))
	call(admin, 415, http.MethodPost, api.PathHold, "text/plain", []byte(`{}`))
	ok(worker, 403, http.MethodPost, api.PathSubmit, api.ContentCBOR, env)
	ok(admin, 200, http.MethodGet, api.PathStatus, "", nil)

	// Every route: an administrative one refuses a worker, every one
	// refuses a channel without an identity and answers another method
	// 405; an unknown path is 404.
	for path, methods := range e.handler(server.SPIFFECertificate{}, operator).RouteMethods() {
		for _, m := range methods {
			call(anon, 401, m, path, "", nil)
		}
		other := http.MethodPost
		if methods[0] == http.MethodPost {
			other = http.MethodGet
		}
		call(admin, 405, other, path, "", nil)
		if path != api.PathHealthz && path != api.PathSubmit && path != api.PathSubmitBatch {
			call(worker, 403, methods[0], path, "", nil)
		}
	}
	// Every media type the contract gives a body is one the route takes:
	// whatever else is wrong with the body, it is not answered 415.
	for k, op := range specOps(t, doc, listenerAPI) {
		if op.RequestBody == nil {
			continue
		}
		method, path, _ := strings.Cut(k, " ")
		for mt := range op.RequestBody.Value.Content {
			hc := admin
			if path == api.PathSubmit || path == api.PathSubmitBatch {
				hc = worker
			}
			if a := send(t, hc, e.srv.URL, listenerAPI, method, path, mt, []byte("{}")); a.status == http.StatusUnsupportedMediaType {
				t.Errorf("%s: %s gives %s a body of %s", a, specFile, k, mt)
			}
		}
	}
	call(admin, 404, http.MethodGet, "/v1/nope", "", nil)
	call(admin, 404, http.MethodPost, "/", "", nil)

	// Bodies over the limits: 413 before anything is read.
	small := serveTLS(t, e, mustNew(t, server.Options{Receiver: e.r, Authenticator: server.SPIFFECertificate{},
		Admins: []string{operator}, MaxEnvelopeSize: 64, MaxBodySize: 64}))
	big := []byte(`{"scope":"` + strings.Repeat("x", 100) + `"}`)
	for _, path := range []string{api.PathScopes, api.PathTargets, api.PathActivate, api.PathHold, api.PathGrantExtend} {
		a := send(t, admin, small.URL, listenerAPI, http.MethodPost, path, api.ContentJSON, big)
		if a.status != 413 {
			t.Errorf("%s: want 413", a)
		}
		c.check(a)
	}
	if a := send(t, worker, small.URL, listenerAPI, http.MethodPost, api.PathSubmit, api.ContentCBOR, env); a.status != 413 {
		t.Errorf("%s: want 413", a)
	} else {
		c.check(a)
	}
	smallBatch := serveTLS(t, e, mustNew(t, server.Options{Receiver: e.r, Authenticator: server.SPIFFECertificate{}, MaxBatchSize: 64}))
	if a := send(t, worker, smallBatch.URL, listenerAPI, http.MethodPost, api.PathSubmitBatch, api.ContentCBOR, api.AppendBatch(nil, [][]byte{env})); a.status != 413 {
		t.Errorf("%s: want 413", a)
	} else {
		c.check(a)
	}

	// An Authenticator that refuses a known identity (403), or fails
	// (500), on every route.
	for _, tc := range []struct {
		status int
		err    error
	}{{403, fmt.Errorf("%w: uid 1000 is not admitted", server.ErrForbidden)}, {500, errors.New("identity source down")}} {
		h := mustNew(t, server.Options{Receiver: e.r, Admins: []string{operator},
			Authenticator: authFunc(func(*http.Request) (string, error) { return "", tc.err })})
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		for path, methods := range h.RouteMethods() {
			for _, m := range methods {
				if a := send(t, srv.Client(), srv.URL, listenerAPI, m, path, "", nil); a.status != tc.status {
					t.Errorf("%s: want %d", a, tc.status)
				} else {
					c.check(a)
				}
			}
		}
	}

	// A submit whose body cannot be read is 400.
	{
		h := mustNew(t, server.Options{Receiver: e.r, Authenticator: authFunc(func(*http.Request) (string, error) { return workerA, nil })})
		r := httptest.NewRequest(http.MethodPost, api.PathSubmit, io.MultiReader(bytes.NewReader(env[:10]), errReader{}))
		r.ContentLength = -1
		r.Header.Set("Content-Type", api.ContentCBOR)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		a := answer{listener: listenerAPI, method: http.MethodPost, target: api.PathSubmit, ctype: api.ContentCBOR,
			status: w.Code, header: w.Header(), body: w.Body.Bytes()}
		if a.status != 400 {
			t.Errorf("%s: want 400", a)
		}
		c.check(a)
	}

	// A store at its record bound: 507 for every call that would add a
	// record.
	{
		var lenv []byte
		lim := reopen(t, kvfence.Options{MaxRecords: limitedRecords}, func(r *kvfence.Receiver) { lenv = activateFor(t, r, req) })
		srv := serveTLS(t, e, mustNew(t, server.Options{Receiver: lim, Authenticator: server.SPIFFECertificate{}, Admins: []string{operator}}))
		for _, tc := range []struct {
			hc    *http.Client
			path  string
			ctype string
			body  []byte
		}{
			{admin, api.PathScopes, api.ContentJSON, jsonBody(t, api.ScopeCreateRequest{Scope: "s9"})},
			{admin, api.PathTargets, api.ContentJSON, jsonBody(t, map[string]any{"scope": scope, "target": "t9", "value_b64": []byte("x")})},
			{worker, api.PathSubmit, api.ContentCBOR, lenv},
		} {
			a := send(t, tc.hc, srv.URL, listenerAPI, http.MethodPost, tc.path, tc.ctype, tc.body)
			if a.status != 507 {
				t.Errorf("%s: want 507", a)
			}
			c.check(a)
		}
		if _, err := lim.Admin().Hold(ctx, kvfence.HoldRequest{Scopes: []string{scope}, Reason: "x"}); err != nil {
			t.Fatal(err)
		}
		a := send(t, admin, srv.URL, listenerAPI, http.MethodPost, api.PathActivate, api.ContentJSON,
			jsonBody(t, api.ActivateRequest{Scope: scope, Executor: workerA, Claim: "c", RequestB64: req}))
		if a.status != 507 {
			t.Errorf("%s: want 507", a)
		}
		c.check(a)
	}

	// A closed receiver: 503 on every /v1 route; its probes say why.
	{
		closed := reopen(t, kvfence.Options{}, nil)
		h := mustNew(t, server.Options{Receiver: closed, Authenticator: server.SPIFFECertificate{}, Admins: []string{operator}})
		srv := serveTLS(t, e, h)
		bodies := map[string][]byte{
			api.PathSubmit:      env,
			api.PathSubmitBatch: api.AppendBatch(nil, [][]byte{env}),
			api.PathScopes:      jsonBody(t, api.ScopeCreateRequest{Scope: "s9"}),
			api.PathTargets:     jsonBody(t, map[string]any{"scope": scope, "target": "t9", "value_b64": []byte("x")}),
			api.PathActivate:    jsonBody(t, api.ActivateRequest{Scope: scope, Executor: workerA, Claim: "c", RequestB64: req}),
			api.PathHold:        jsonBody(t, api.HoldRequest{Scopes: []string{scope}, Reason: "x"}),
			api.PathGrantExtend: jsonBody(t, api.GrantExtendRequest{Grant: g.Grant, TTL: "1m"}),
		}
		queries := map[string]string{api.PathTarget: "?target=" + scope, api.PathGrant: "?id=" + g.Grant,
			api.PathReceipt: "?scope=" + scope + "&action=a", api.PathReceipts: "?scope=" + scope + "&claim=c"}
		probes, err := server.NewProbes(server.ProbeOptions{Receiver: closed})
		if err != nil {
			t.Fatal(err)
		}
		psrv := httptest.NewServer(probes)
		t.Cleanup(psrv.Close)
		for _, m := range []string{http.MethodGet, http.MethodHead} {
			for _, p := range []string{"/healthz", "/readyz"} {
				a := send(t, psrv.Client(), psrv.URL, listenerMetrics, m, p, "", nil)
				if a.status != 200 {
					t.Errorf("%s: want 200", a)
				}
				c.check(a)
			}
		}
		if err := closed.Close(); err != nil {
			t.Fatal(err)
		}
		for path, methods := range h.RouteMethods() {
			if path == api.PathHealthz {
				continue
			}
			ctype, hc, want := api.ContentJSON, admin, 503
			if path == api.PathSubmit || path == api.PathSubmitBatch {
				ctype, hc = api.ContentCBOR, worker
			}
			if methods[0] == http.MethodGet {
				ctype = ""
			}
			a := send(t, hc, srv.URL, listenerAPI, methods[0], path+queries[path], ctype, bodies[path])
			// A batch answers each envelope's 503 in its place.
			if path == api.PathSubmitBatch {
				want = 200
				if !bytes.Contains(a.body, []byte(`{"status":503,"error":{"code":"closed"`)) {
					t.Errorf("%s: want the envelope's 503 closed", a)
				}
			}
			if a.status != want {
				t.Errorf("%s: want %d", a, want)
			}
			c.check(a)
		}
		for _, m := range []string{http.MethodGet, http.MethodHead} {
			a := send(t, psrv.Client(), psrv.URL, listenerMetrics, m, "/readyz", "", nil)
			if a.status != 503 {
				t.Errorf("%s: want 503", a)
			}
			c.check(a)
		}
	}

	// Every operation and status the contract lists was answered above.
	for _, l := range []string{listenerAPI, listenerMetrics} {
		for k, op := range specOps(t, doc, l) {
			for status := range op.Responses.Map() {
				if !c.covered[k+" "+status] {
					t.Errorf("%s %s is in %s but no answer above had it", k, status, specFile)
				}
			}
		}
	}
	for _, name := range []string{"NoSuchEndpoint", "MethodNotAllowed"} {
		if !c.covered["component:"+name] {
			t.Errorf("no answer above was checked against %s", name)
		}
	}
}

// limitedRecords is the records of the fixture with one grant: its scope's
// control record, its target and the grant.
const limitedRecords = 3

// activateFor opens the fixture scope of r for workerA with req, and
// returns the envelope.
func activateFor(t *testing.T, r *kvfence.Receiver, req []byte) []byte {
	t.Helper()
	g, err := r.Admin().Activate(context.Background(), kvfence.ActivateRequest{Scope: scope, Executor: workerA, Claim: "c", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: scope, Epoch: g.Epoch, Grant: g.ID,
		Executor: workerA, Claim: "c", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func mustNew(t *testing.T, opts server.Options) *server.Handler {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	h, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// errReader fails every read, as a connection that breaks mid-body.
type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// Ensure that the validator the contract is checked with refuses what the
// schemas rule out, so that a schema it failed to apply (and let anything
// through) cannot pass for a kept contract.
func TestOpenAPI_SchemasRefuse(t *testing.T) {
	doc := loadSpec(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC).Format(time.RFC3339Nano)
	applied := func() map[string]any {
		return map[string]any{"outcome": "applied", "reason": "", "detail": "", "scope": "s", "epoch": 1, "grant": "g",
			"action": "a", "target": "t", "revision": 2, "audit_seq": 7}
	}
	receipt := func() map[string]any {
		return map[string]any{"scope": "s", "action": "a", "grant": strings.Repeat("ab", 16),
			"request_sha256": strings.Repeat("0f", 32), "target": "t", "rev_before": 1, "rev_after": 2, "audit_seq": 3, "at": now}
	}
	verify := func() map[string]any {
		return map[string]any{"ok": true, "problem": "ok", "entries": 3, "head": strings.Repeat("0f", 32), "head_seq": 3,
			"anchor_seq": 3, "anchor_head": strings.Repeat("0f", 32), "detail": "", "anchor_damage": nil, "base_seq": 0,
			"base_hash": "", "archived_entries": 0, "anchor_same_device": nil, "anchor_same_owner": nil}
	}
	target := func() map[string]any {
		return map[string]any{"target": "t", "scope": "s", "revision": 1, "value": nil,
			"value_b64": base64.StdEncoding.EncodeToString([]byte{0xff, 1}), "kind": "internal"}
	}
	for _, tc := range []struct {
		name   string
		schema string
		body   map[string]any
		edit   func(map[string]any)
		valid  bool
	}{
		{"applied", "SubmitApplied", applied(), func(map[string]any) {}, true},
		{"unknown member", "SubmitApplied", applied(), func(m map[string]any) { m["extra"] = 1 }, false},
		{"missing member", "SubmitApplied", applied(), func(m map[string]any) { delete(m, "audit_seq") }, false},
		{"renamed member", "SubmitApplied", applied(), func(m map[string]any) { m["auditSeq"] = m["audit_seq"]; delete(m, "audit_seq") }, false},
		{"reason on applied", "SubmitApplied", applied(), func(m map[string]any) { m["reason"] = "receiver_held" }, false},
		{"negative", "SubmitApplied", applied(), func(m map[string]any) { m["epoch"] = -1 }, false},
		{"denied with unknown reason", "SubmitDenied", applied(), func(m map[string]any) { m["outcome"], m["reason"] = "denied", "nope" }, false},
		{"denied", "SubmitDenied", applied(), func(m map[string]any) { m["outcome"], m["reason"], m["revision"] = "denied", "receiver_held", 0 }, true},
		{"receipt", "Receipt", receipt(), func(map[string]any) {}, true},
		{"time with offset", "Receipt", receipt(), func(m map[string]any) { m["at"] = "2026-01-02T04:04:05+01:00" }, false},
		{"time not a time", "Receipt", receipt(), func(m map[string]any) { m["at"] = "yesterday" }, false},
		{"null time", "Receipt", receipt(), func(m map[string]any) { m["at"] = nil }, true},
		{"upper-case hex", "Receipt", receipt(), func(m map[string]any) { m["request_sha256"] = strings.Repeat("0F", 32) }, false},
		{"short grant", "Receipt", receipt(), func(m map[string]any) { m["grant"] = "ab" }, false},
		{"verify", "VerifyChain", verify(), func(map[string]any) {}, true},
		{"unknown problem", "VerifyChain", verify(), func(m map[string]any) { m["problem"] = "fine" }, false},
		{"separation fact over the API", "VerifyChain", verify(), func(m map[string]any) { m["anchor_same_device"] = true }, false},
		{"short head", "VerifyChain", verify(), func(m map[string]any) { m["head"] = "0f" }, false},
		{"target", "Target", target(), func(map[string]any) {}, true},
		{"unpadded base64", "Target", target(), func(m map[string]any) { m["value_b64"] = "/wE" }, false},
		{"url base64", "Target", target(), func(m map[string]any) { m["value_b64"] = "_wE=" }, false},
		{"no kind", "Target", target(), func(m map[string]any) { delete(m, "kind") }, false},
		{"unknown kind", "Target", target(), func(m map[string]any) { m["kind"] = "Internal" }, false},
		{"kubernetes target read live", "Target", target(), func(m map[string]any) {
			m["kind"], m["object"], m["uid"] = "kubernetes", "configmaps/prod/p", "u-1"
			m["live"] = map[string]any{"resource_version": "7", "uid": "u-1", "last_dispatch": ""}
		}, true},
		{"live object without its version", "Target", target(), func(m map[string]any) {
			m["kind"], m["object"], m["uid"] = "kubernetes", "configmaps/prod/p", "u-1"
			m["live"] = map[string]any{"uid": "u-1", "last_dispatch": ""}
		}, false},
		{"kubernetes target not read", "Target", target(), func(m map[string]any) {
			m["kind"], m["object"], m["uid"], m["live_error"], m["live_error_code"] = "kubernetes", "configmaps/prod/p", "u-1", "no dispatcher", "no_dispatcher"
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.edit(tc.body)
			var v any
			if err := json.Unmarshal(jsonBody(t, tc.body), &v); err != nil {
				t.Fatal(err)
			}
			err := doc.Components.Schemas[tc.schema].Value.VisitJSON(v, openapi3.EnableJSONSchema2020())
			if (err == nil) != tc.valid {
				t.Errorf("%s: valid %v, want %v (%v)", tc.schema, err == nil, tc.valid, err)
			}
		})
	}
}
