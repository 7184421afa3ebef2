package server_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/etcdtest"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// fakeKube is an in-memory Kubernetes object store behind the Dispatcher
// interface: enough for a target's creation and its live read.
type fakeKube struct {
	mu      sync.Mutex
	objects map[string]kvfence.RemoteState
	readErr error
}

func (f *fakeKube) Read(_ context.Context, obj kvfence.RemoteObject) (kvfence.RemoteState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readErr != nil {
		return kvfence.RemoteState{}, f.readErr
	}
	st, ok := f.objects[obj.String()]
	if !ok {
		return kvfence.RemoteState{}, kvfence.ErrRemoteNotFound
	}
	return st, nil
}

func (f *fakeKube) Apply(context.Context, kvfence.DispatchInput) (kvfence.RemoteState, error) {
	return kvfence.RemoteState{}, errors.New("fakeKube: no writes in these tests")
}

func (f *fakeKube) Fence(context.Context, kvfence.RemoteObject, kvfence.Stamp) (kvfence.RemoteState, error) {
	return kvfence.RemoteState{}, errors.New("fakeKube: no writes in these tests")
}

// serveUnix serves r on a unix socket admitting the test's uid as an
// administrator and returns a client of it.
func serveUnix(t *testing.T, r *kvfence.Receiver) *client.Client {
	t.Helper()
	me := uint32(os.Getuid())
	h, err := server.New(server.Options{Receiver: r, Authenticator: server.UnixPeer{UIDs: []uint32{me}},
		Admins: []string{server.UnixIdentity(me)}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kvf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := net.Listen("unix", filepath.Join(dir, "admin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Config.ConnContext = server.ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	cl, err := client.New("unix://"+filepath.Join(dir, "admin.sock"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// openWith opens a receiver in a database file with the fixture scope and
// the given dispatchers.
func openWith(t *testing.T, ds map[kvfence.TargetKind]kvfence.Dispatcher) *kvfence.Receiver {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, anchor := filepath.Join(dir, "receiver.db"), audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "kinds", Key: key, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor, Dispatchers: ds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		verifyChain(t, r, key.Public().(ed25519.PublicKey), anchor)
		r.Close()
	})
	if _, err := r.Admin().CreateScope(context.Background(), scope); err != nil {
		t.Fatal(err)
	}
	return r
}

// Ensure that a served receiver on the etcd engine creates a target of
// kind etcd: the key holds the value as any etcd client reads it, the
// answer and GET /v1/target name the kind and the key with the key's mod
// revision, the target list shows them, and a second target on the same
// key is target_key_in_use (409) with nothing created.
func TestTargetKinds_Etcd(t *testing.T) {
	c := etcdtest.Start(t)
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	anchor := audit.FileAnchor{Path: filepath.Join(t.TempDir(), "receiver.anchor")}
	e, err := etcdengine.New(c.Client(t), &etcdengine.Options{Prefix: "/kinds/"})
	if err != nil {
		t.Fatal(err)
	}
	if err := kvfence.InitEngine(e, &kvfence.InitOptions{ReceiverID: "etcd-kinds", Key: key, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	e.Close()
	if e, err = etcdengine.New(c.Client(t), &etcdengine.Options{Prefix: "/kinds/"}); err != nil {
		t.Fatal(err)
	}
	r, err := kvfence.OpenEngine(e, &kvfence.Options{Key: key, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cl := serveUnix(t, r)
	ctx := context.Background()
	if _, err := cl.CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	created, err := cl.CreateTargetSpec(ctx, kvfence.TargetSpec{Scope: scope, Name: "policy", Kind: kvfence.TargetEtcd, Key: "/app/policy", Value: []byte(initValue)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Client(t).Get(ctx, "/app/policy")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != initValue {
		t.Fatalf("the key after create: %v %v", resp, err)
	}
	if created.Kind != kvfence.TargetEtcd || created.Key != "/app/policy" || created.Revision != uint64(resp.Kvs[0].ModRevision) {
		t.Fatalf("created %+v; key at %d", created, resp.Kvs[0].ModRevision)
	}
	got, err := cl.ObserveTarget(ctx, "policy")
	if err != nil || got.Kind != kvfence.TargetEtcd || got.Key != "/app/policy" || got.Writes != 1 ||
		got.Revision != uint64(resp.Kvs[0].ModRevision) || string(got.Value) != initValue || got.Live != nil || got.LiveErr != nil {
		t.Fatalf("observe: %+v %v", got, err)
	}
	ts, err := cl.Targets(ctx, scope)
	if err != nil || len(ts) != 1 || ts[0].Kind != kvfence.TargetEtcd || ts[0].Key != "/app/policy" {
		t.Fatalf("targets: %+v %v", ts, err)
	}
	head := r.Head()
	_, err = cl.CreateTargetSpec(ctx, kvfence.TargetSpec{Scope: scope, Name: "again", Kind: kvfence.TargetEtcd, Key: "/app/policy", Value: []byte(initValue)})
	if !errors.Is(err, kvfence.ErrTargetKeyInUse) {
		t.Fatalf("a second target on the key: %v", err)
	}
	if _, err := r.Target("again"); !errors.Is(err, kvfence.ErrUnknownTarget) || r.Head() != head {
		t.Fatalf("the refused target: %v; head %v -> %v", err, head, r.Head())
	}
}

// Ensure that a served receiver with a Kubernetes dispatcher creates a
// target of kind kubernetes for an existing object, recording its UID;
// that GET /v1/target shows the object and, read live, its
// resourceVersion, UID, last dispatch and value; that the target list
// names the object without reading it; that a read that fails leaves the
// target shown with the reason; and that a missing object is
// remote_not_found with nothing created.
func TestTargetKinds_Kubernetes(t *testing.T) {
	kube := &fakeKube{objects: map[string]kvfence.RemoteState{
		"configmaps/prod/policy": {Version: "7", UID: "uid-1", Value: []byte(`{"retention_days":"30"}`), Stamp: kvfence.Stamp{Receipt: "d-1"}},
	}}
	r := openWith(t, map[kvfence.TargetKind]kvfence.Dispatcher{kvfence.TargetKubernetes: kube})
	cl := serveUnix(t, r)
	ctx := context.Background()
	obj, err := kvfence.ParseObject("configmaps/prod/policy")
	if err != nil {
		t.Fatal(err)
	}
	created, err := cl.CreateTargetSpec(ctx, kvfence.TargetSpec{Scope: scope, Name: "policy", Kind: kvfence.TargetKubernetes, Object: &obj})
	if err != nil {
		t.Fatal(err)
	}
	if created.Kind != kvfence.TargetKubernetes || created.UID != "uid-1" || created.Object == nil || *created.Object != obj {
		t.Fatalf("created %+v", created)
	}
	got, err := cl.ObserveTarget(ctx, "policy")
	if err != nil || got.Kind != kvfence.TargetKubernetes || got.UID != "uid-1" || got.Object == nil || *got.Object != obj ||
		got.Live == nil || got.Live.Version != "7" || got.Live.UID != "uid-1" || got.Live.Stamp.Receipt != "d-1" ||
		string(got.Value) != `{"retention_days":"30"}` || got.LiveErr != nil {
		t.Fatalf("observe: %+v live %+v %v", got, got.Live, err)
	}
	ts, err := cl.Targets(ctx, "")
	if err != nil || len(ts) != 1 || ts[0].Object == nil || *ts[0].Object != obj || ts[0].UID != "uid-1" {
		t.Fatalf("targets: %+v %v", ts, err)
	}
	kube.mu.Lock()
	kube.readErr = errors.New("apiserver unreachable")
	kube.mu.Unlock()
	got, err = cl.ObserveTarget(ctx, "policy")
	if err != nil || got.Live != nil || got.LiveErr == nil || got.Object == nil || len(got.Value) != 0 {
		t.Fatalf("observe with the object unreadable: %+v %v", got, err)
	}
	kube.mu.Lock()
	kube.readErr = nil
	kube.mu.Unlock()
	head := r.Head()
	missing, _ := kvfence.ParseObject("configmaps/prod/missing")
	_, err = cl.CreateTargetSpec(ctx, kvfence.TargetSpec{Scope: scope, Name: "missing", Kind: kvfence.TargetKubernetes, Object: &missing})
	if !errors.Is(err, kvfence.ErrRemoteNotFound) {
		t.Fatalf("a missing object: %v", err)
	}
	if _, err := r.Target("missing"); !errors.Is(err, kvfence.ErrUnknownTarget) || r.Head() != head {
		t.Fatalf("the refused target: %v; head %v -> %v", err, head, r.Head())
	}
}

// Ensure that POST /v1/targets refuses, with a precise code and status
// and nothing created or recorded, what the served receiver cannot create
// or what does not fit the kind: an etcd target on a database file
// (kind_unsupported, 501), a kubernetes target without a dispatcher
// (no_dispatcher, 501), a func target (kind_unsupported, 501: never
// remotely), a value for a kubernetes target, an unknown member, a key or
// an object for another kind, an unknown kind, a missing value (400), and
// an object that is not RESOURCE/NAMESPACE/NAME (invalid_argument, 400).
func TestTargetKinds_Refused(t *testing.T) {
	e := newEnv(t)
	op := e.client(operator)
	for _, tt := range []struct {
		name   string
		body   map[string]any
		status int
		code   string
	}{
		{"etcd on bbolt", map[string]any{"kind": "etcd", "target_key": "/app/x", "value_b64": "dg=="}, http.StatusNotImplemented, "kind_unsupported"},
		{"kubernetes without a dispatcher", map[string]any{"kind": "kubernetes", "object": "configmaps/prod/x", "value_b64": nil}, http.StatusNotImplemented, "no_dispatcher"},
		{"func", map[string]any{"kind": "func", "value_b64": "dg=="}, http.StatusNotImplemented, "kind_unsupported"},
		{"a value for kubernetes", map[string]any{"kind": "kubernetes", "object": "configmaps/prod/x", "value_b64": "dg=="}, http.StatusBadRequest, api.CodeBadRequest},
		{"an empty value for kubernetes", map[string]any{"kind": "kubernetes", "object": "configmaps/prod/x", "value_b64": ""}, http.StatusBadRequest, api.CodeBadRequest},
		{"an unknown member", map[string]any{"kind": "internal", "value_b64": "dg==", "effect": "e"}, http.StatusBadRequest, api.CodeBadRequest},
		{"a key for internal", map[string]any{"target_key": "/app/x", "value_b64": "dg=="}, http.StatusBadRequest, api.CodeBadRequest},
		{"an object for etcd", map[string]any{"kind": "etcd", "target_key": "/app/x", "object": "configmaps/prod/x", "value_b64": "dg=="}, http.StatusBadRequest, api.CodeBadRequest},
		{"etcd without a key", map[string]any{"kind": "etcd", "value_b64": "dg=="}, http.StatusBadRequest, api.CodeBadRequest},
		{"kubernetes without an object", map[string]any{"kind": "kubernetes", "value_b64": nil}, http.StatusBadRequest, api.CodeBadRequest},
		{"an unknown kind", map[string]any{"kind": "Internal", "value_b64": "dg=="}, http.StatusBadRequest, api.CodeBadRequest},
		{"no value", map[string]any{"kind": "internal", "value_b64": nil}, http.StatusBadRequest, api.CodeBadRequest},
		{"a malformed object", map[string]any{"kind": "kubernetes", "object": "configmaps/x", "value_b64": nil}, http.StatusBadRequest, "invalid_argument"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			head := e.r.Head()
			tt.body["scope"], tt.body["target"] = scope, "refused"
			resp := e.postJSON(op, api.PathTargets, tt.body)
			if resp.status != tt.status || resp.errorCode() != tt.code {
				t.Fatalf("answer %d %s, want %d %s", resp.status, resp.raw, tt.status, tt.code)
			}
			if _, err := e.r.Target("refused"); !errors.Is(err, kvfence.ErrUnknownTarget) || e.r.Head() != head {
				t.Fatalf("after the refusal: %v; head %v -> %v", err, head, e.r.Head())
			}
		})
	}
	// The client refuses a func target without a call, with the same sentinel.
	_, err := (&client.Client{}).CreateTargetSpec(context.Background(), kvfence.TargetSpec{Scope: scope, Name: "f", Kind: kvfence.TargetFunc, Effect: "e"})
	if !errors.Is(err, kvfence.ErrKindUnsupported) {
		t.Fatalf("client, func kind: %v", err)
	}
}

// Ensure that GET /v1/target shows an internal target's kind, and no key,
// object or live object.
func TestTargetKinds_InternalShown(t *testing.T) {
	e := newEnv(t)
	resp := e.must(e.client(operator), http.MethodGet, api.PathTarget+"?target="+scope, "", nil)
	if resp.status != http.StatusOK || resp.body["kind"] != "internal" {
		t.Fatalf("%d %s", resp.status, resp.raw)
	}
	for _, k := range []string{"target_key", "object", "uid", "live", "live_error", "writes", "effect"} {
		if _, ok := resp.body[k]; ok {
			t.Fatalf("%s in an internal target's answer: %s", k, resp.raw)
		}
	}
}
