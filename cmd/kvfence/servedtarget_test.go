package main

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/engine/boltengine"
	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that target create --kind etcd works through a served receiver
// on etcd: the key holds the value as any etcd client reads it, the
// output names the kind, the key and its mod revision, and observe target
// --server prints what the local observe target prints; that a served
// receiver without a Kubernetes identity refuses --kind kubernetes with
// no_dispatcher; and that --kubeconfig does not go with --server (the
// kubeconfig is the server's). Nothing refused is created.
func TestServedTargetKinds(t *testing.T) {
	c := newCLI(t)
	_, cli := c.etcdReceiver()
	c.pki("t")
	c.clientCert("t", "operator", spiffeOperator)
	rn := c.serve("--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
		"--client-ca", c.path("t-ca.crt"), "--admin", spiffeOperator)
	as := func(args ...string) []string {
		return append(args, "--server", "https://"+rn.addrs.Listen, "--tls-cert", c.path("t-operator.crt"),
			"--tls-key", c.path("t-operator.key"), "--tls-ca", c.path("t-ca.crt"))
	}
	out := c.json(0, as("target", "create", "--scope", fixtureScope, "--target", "served", "--kind", "etcd", "--target-key", "/app/served",
		"--value", `{"retention_days":"30"}`)...)
	resp, err := cli.Get(context.Background(), "/app/served")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != `{"retention_days":"30"}` {
		t.Fatalf("the key after create: %v %v", resp, err)
	}
	if out["kind"] != "etcd" || out["key"] != "/app/served" || out["revision"].(float64) != float64(resp.Kvs[0].ModRevision) {
		t.Fatalf("target create --server: %v; key at %d", out, resp.Kvs[0].ModRevision)
	}
	served := c.json(0, as("observe", "target", "served")...)
	local := c.json(0, "observe", "target", "served")
	if !reflect.DeepEqual(served, local) || served["kind"] != "etcd" || served["key"] != "/app/served" || served["writes"].(float64) != 1 {
		t.Fatalf("observe target --server %v; local %v", served, local)
	}
	list := c.json(0, as("target", "list")...)
	if !reflect.DeepEqual(list, c.json(0, "target", "list")) {
		t.Fatalf("target list --server %v; local %v", list, c.json(0, "target", "list"))
	}
	if e := list["targets"].([]any)[1].(map[string]any); e["target"] != "served" || e["kind"] != "etcd" || e["key"] != "/app/served" {
		t.Fatalf("target list --server: %v", list)
	}
	if r := c.must(0, as("observe", "target", "served")...); !strings.Contains(r.stdout, "/app/served") || !strings.Contains(r.stdout, "fence writes") {
		t.Fatalf("observe target --server:\n%s", r.stdout)
	}

	for _, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"kubernetes without the server's identity", as("--kind", "kubernetes", "--object", "configmaps/prod/p"), ExitError, "no dispatcher"},
		{"--kubeconfig with --server", as("--kind", "kubernetes", "--object", "configmaps/prod/p", "--kubeconfig", c.path("kubeconfig")), ExitUsage, "the server reaches Kubernetes through its own identity"},
		{"a value for kubernetes", as("--kind", "kubernetes", "--object", "configmaps/prod/p", "--value", "v"), ExitUsage, "takes no --value"},
		{"another target's key", as("--kind", "etcd", "--target-key", "/app/served", "--value", "v"), ExitDenied, "in use"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"target", "create", "--scope", fixtureScope, "--target", "refused"}, tt.args...)
			if r := c.must(tt.code, args...); !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("stderr %q, want %q", r.stderr, tt.want)
			}
			c.must(ExitDenied, as("observe", "target", "refused")...)
		})
	}
	if code := rn.wait(t); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, rn.stderr.String())
	}
}

// fakeKube is one ConfigMap behind the Dispatcher interface, enough for a
// target's creation and its live read.
type fakeKube struct {
	mu      sync.Mutex
	state   kvfence.RemoteState
	readErr error
}

func (f *fakeKube) Read(_ context.Context, obj kvfence.RemoteObject) (kvfence.RemoteState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if obj.String() != "configmaps/prod/policy" {
		return kvfence.RemoteState{}, kvfence.ErrRemoteNotFound
	}
	return f.state, f.readErr
}

func (f *fakeKube) Apply(context.Context, kvfence.DispatchInput) (kvfence.RemoteState, error) {
	return kvfence.RemoteState{}, errors.New("fakeKube: no writes in this test")
}

func (f *fakeKube) Fence(context.Context, kvfence.RemoteObject, kvfence.Stamp) (kvfence.RemoteState, error) {
	return kvfence.RemoteState{}, errors.New("fakeKube: no writes in this test")
}

// Ensure that target create --kind kubernetes works through a served
// receiver with a Kubernetes identity (here a fake dispatcher), and that
// observe target --server prints the object as the receiver read it
// live (its resourceVersion, UID, last dispatch and value), in JSON and
// text, and when the read fails still shows the target, with a warning
// that says why; a missing object is remote_not_found.
func TestServedKubernetesTarget(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	kube := &fakeKube{state: kvfence.RemoteState{Version: "7", UID: "uid-1", Value: []byte(`{"retention_days":"30"}`),
		Stamp: kvfence.Stamp{Receipt: "d-1"}}}
	e, err := boltengine.OpenFile(c.env[envDB], boltengine.FileOptions{Timeout: time.Second, CheckPages: true})
	if err != nil {
		t.Fatal(err)
	}
	url := c.serveEngineWith(e, map[kvfence.TargetKind]kvfence.Dispatcher{kvfence.TargetKubernetes: kube})
	out := c.json(0, "target", "create", "--server", url, "--scope", fixtureScope, "--target", "policy", "--kind", "kubernetes",
		"--object", "configmaps/prod/policy")
	if out["kind"] != "kubernetes" || out["object"] != "configmaps/prod/policy" || out["uid"] != "uid-1" {
		t.Fatalf("target create --server: %v", out)
	}
	out = c.json(0, "observe", "target", "policy", "--server", url)
	if out["kind"] != "kubernetes" || out["object"] != "configmaps/prod/policy" || out["uid"] != "uid-1" || out["resource_version"] != "7" ||
		out["live_uid"] != "uid-1" || out["last_dispatch"] != "d-1" || out["value"] != `{"retention_days":"30"}` {
		t.Fatalf("observe target --server: %v", out)
	}
	r := c.must(0, "observe", "target", "policy", "--server", url)
	for _, want := range []string{"configmaps/prod/policy", "resource version", "7", "last dispatch", "d-1", `{"retention_days":"30"}`} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("observe target --server lacks %q:\n%s", want, r.stdout)
		}
	}
	kube.mu.Lock()
	kube.readErr = errors.New("apiserver unreachable")
	kube.mu.Unlock()
	r = c.must(0, "observe", "target", "policy", "--server", url)
	if !strings.Contains(r.stderr, "apiserver unreachable") || !strings.Contains(r.stdout, "the read failed") || strings.Contains(r.stdout, "resource version") {
		t.Fatalf("observe target --server, the object unreadable:\nstdout %s\nstderr %s", r.stdout, r.stderr)
	}
	if r := c.must(ExitError, "target", "create", "--server", url, "--scope", fixtureScope, "--target", "missing", "--kind", "kubernetes",
		"--object", "configmaps/prod/missing", "--json"); !strings.Contains(r.stdout, "remote_not_found") {
		t.Fatalf("a missing object: %s", r.stdout)
	}
}
