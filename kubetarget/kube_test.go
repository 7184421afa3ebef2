package kubetarget

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/kubeproc"
	"github.com/kvfence/kvfence/internal/kubetest"
	"github.com/kvfence/kvfence/kubeclient"
	"github.com/kvfence/kvfence/kvfence"
)

// The tests below run on a real kube-apiserver (internal/kubeproc) with
// deploy/kubernetes's manifests applied, so that every write of this
// package meets the admission policy and RBAC it ships with.

const (
	testNS    = "prod"
	testColl  = "/api/v1/namespaces/" + testNS + "/configmaps"
	policyMsg = "change only through the kvfence receiver"
)

// kubeEnv is a server with the manifests applied.
type kubeEnv struct {
	t *testing.T
	s *kubeproc.Server
}

// in returns the environment as seen from the subtest t, so that its
// failures stop t and not the test that started the server: FailNow
// must be called from the goroutine of the test it fails.
func (e *kubeEnv) in(t *testing.T) *kubeEnv { return &kubeEnv{t: t, s: e.s} }

// startKube starts a server with the target namespace and the shipped
// manifests (internal/kubetest), and gives the editor identity RBAC write
// access to the namespace's ConfigMaps (so that what the editor is
// refused, the policy refuses).
func startKube(t *testing.T) *kubeEnv {
	t.Helper()
	e := &kubeEnv{t: t, s: kubetest.StartDeployed(t, testNS)}
	e.s.Must(kubeproc.Admin, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/clusterroles",
		[]byte(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"test-editor"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list","create","update","patch","delete"]}]}`), http.StatusCreated)
	e.s.Must(kubeproc.Admin, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/namespaces/"+testNS+"/rolebindings",
		[]byte(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"test-editor","namespace":"`+testNS+`"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"test-editor"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"`+kubeproc.EditorsGroup+`"}]}`), http.StatusCreated)
	return e
}

// config returns a kubeclient.Config that acts as identity, with wrap
// around its transport if not nil.
func (e *kubeEnv) config(identity string, wrap func(http.RoundTripper) http.RoundTripper) *kubeclient.Config {
	return &kubeclient.Config{
		Host:          e.s.URL,
		BearerToken:   e.s.Tokens[identity],
		CAData:        e.s.CAPEM,
		WrapTransport: wrap,
	}
}

// dispatcher returns a Dispatcher that acts as identity.
func (e *kubeEnv) dispatcher(identity string, wrap func(http.RoundTripper) http.RoundTripper) *Dispatcher {
	e.t.Helper()
	d, err := New(Options{Config: e.config(identity, wrap)})
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// waitStatus repeats a request that changes nothing (a read or a dry run)
// until it answers want: RBAC and admission policies take effect a moment
// after their objects are created.
func (e *kubeEnv) waitStatus(identity, method, path, body string, want int, bodyHas string) {
	e.t.Helper()
	kubetest.WaitStatus(e.t, e.s, identity, method, path, body, want, bodyHas)
}

// create makes a ConfigMap as the administrator, with an extra label, an
// unrelated annotation and binaryData that every write must leave alone,
// and, if scoped, has the receiver add the label kvfence.dev/scope, as
// only it may once the policy stands. It waits until the policy refuses
// the administrator's change to it.
func (e *kubeEnv) create(name string, scoped bool) kvfence.RemoteObject {
	e.t.Helper()
	e.s.Must(kubeproc.Admin, http.MethodPost, testColl, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+name+
		`","labels":{"team":"storage"},"annotations":{"note":"keep me"}},"data":{"retention_days":"30","mode":"full"},"binaryData":{"blob":"AAEC"}}`), http.StatusCreated)
	if scoped {
		label := `[{"op":"add","path":"/metadata/labels/kvfence.dev~1scope","value":"backup"}]`
		e.waitStatus(kubeproc.Receiver, http.MethodPatch, testColl+"/"+name+"?dryRun=All", label, http.StatusOK, "")
		e.s.Must(kubeproc.Receiver, http.MethodPatch, testColl+"/"+name, []byte(label), http.StatusOK)
		e.waitStatus(kubeproc.Admin, http.MethodPatch, testColl+"/"+name+"?dryRun=All",
			`[{"op":"replace","path":"/data/mode","value":"none"}]`, http.StatusForbidden, policyMsg)
	}
	return cm(testNS, name)
}

// stored is a ConfigMap as the administrator reads it, raw.
type stored struct {
	Metadata struct {
		ResourceVersion string            `json:"resourceVersion"`
		UID             string            `json:"uid"`
		Labels          map[string]string `json:"labels"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
	Data       map[string]string `json:"data"`
	BinaryData map[string]string `json:"binaryData"`
}

func (e *kubeEnv) get(obj kvfence.RemoteObject) stored {
	e.t.Helper()
	var o stored
	if err := json.Unmarshal(e.s.Must(kubeproc.Admin, http.MethodGet, testColl+"/"+obj.Name, nil, http.StatusOK), &o); err != nil {
		e.t.Fatal(err)
	}
	return o
}

// checkKept fails the test unless what no write of this package may
// change is as create left it.
func (e *kubeEnv) checkKept(o stored) {
	e.t.Helper()
	if o.Metadata.Labels["team"] != "storage" || o.Metadata.Labels[LabelScope] != "backup" ||
		o.Metadata.Annotations["note"] != "keep me" || o.BinaryData["blob"] != "AAEC" {
		e.t.Errorf("a write changed what it must leave: %+v", o)
	}
}

// holdPUT is a fault-injecting transport: the first PUT after it is armed
// waits, before it reaches the server, until the test releases it, or runs
// a function first; every other request goes straight through.
type holdPUT struct {
	next    http.RoundTripper
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
	before  func()
	puts    atomic.Int32
}

func newHoldPUT(before func()) *holdPUT {
	return &holdPUT{held: make(chan struct{}), release: make(chan struct{}), before: before}
}

func (h *holdPUT) wrap(rt http.RoundTripper) http.RoundTripper { h.next = rt; return h }

func (h *holdPUT) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut {
		h.puts.Add(1)
		if h.armed.CompareAndSwap(true, false) {
			if h.before != nil {
				h.before()
			} else {
				close(h.held)
				select {
				case <-h.release:
				case <-req.Context().Done():
					return nil, req.Context().Err()
				}
			}
		}
	}
	return h.next.RoundTrip(req)
}

var (
	stampA     = kvfence.Stamp{Scope: "prod/backup", Epoch: 1, Grant: "grant-a", Receipt: "receipt-1"}
	fenceStamp = kvfence.Stamp{Scope: "prod/backup", Epoch: 2, Receipt: "fence-2"}
)

// Ensure, on a real API server with the shipped policy and RBAC, that the
// receiver's Apply under the version read changes the data and stamps the
// object and nothing else; that a stale version, and another incarnation
// of the object under the same name, are ErrRemoteConflict and change
// nothing; that Fence makes an update held in flight with the old
// precondition fail; that Fence does not overwrite a change made between
// its read and its write; and that the worker's and an editor's
// credentials are refused through this package too.
func TestAgainstAPIServer(t *testing.T) {
	e := startKube(t)
	recv := e.dispatcher(kubeproc.Receiver, nil)
	ctx := context.Background()

	t.Run("apply under the version read stamps the object", func(t *testing.T) {
		e := e.in(t)
		obj := e.create("apply", true)
		before, err := recv.Read(ctx, obj)
		if err != nil {
			t.Fatal(err)
		}
		if string(before.Value) != `{"mode":"full","retention_days":"30"}` || before.Stamp != (kvfence.Stamp{}) {
			t.Fatalf("read %+v (value %s)", before, before.Value)
		}
		st, err := recv.Apply(ctx, kvfence.DispatchInput{Object: obj, UID: before.UID, Precondition: before.Version,
			Value: []byte(`{"retention_days":"45","mode":"full"}`), Stamp: stampA})
		if err != nil {
			t.Fatal(err)
		}
		o := e.get(obj)
		if st.Version == before.Version || st.Version != o.Metadata.ResourceVersion || st.UID != before.UID || st.Stamp != stampA ||
			string(st.Value) != `{"mode":"full","retention_days":"45"}` {
			t.Errorf("Apply returned %+v (value %s); stored version %s", st, st.Value, o.Metadata.ResourceVersion)
		}
		if o.Data["retention_days"] != "45" || o.Metadata.Annotations[AnnotationReceipt] != "receipt-1" ||
			o.Metadata.Annotations[AnnotationEpoch] != "1" || o.Metadata.Annotations[AnnotationGrant] != "grant-a" {
			t.Errorf("stored %+v", o)
		}
		e.checkKept(o)
		again, err := recv.Read(ctx, obj)
		if err != nil || again.Stamp != stampA || again.Version != st.Version {
			t.Errorf("read back %+v, %v", again, err)
		}
	})

	t.Run("a stale version is a conflict and changes nothing", func(t *testing.T) {
		e := e.in(t)
		obj := e.create("stale", true)
		old, _ := recv.Read(ctx, obj)
		if _, err := recv.Apply(ctx, kvfence.DispatchInput{Object: obj, UID: old.UID, Precondition: old.Version, Value: []byte(`{"retention_days":"45"}`), Stamp: stampA}); err != nil {
			t.Fatal(err)
		}
		cur := e.get(obj)
		_, err := recv.Apply(ctx, kvfence.DispatchInput{Object: obj, UID: old.UID, Precondition: old.Version, Value: []byte(`{"retention_days":"1"}`),
			Stamp: kvfence.Stamp{Scope: "prod/backup", Epoch: 1, Grant: "grant-stale", Receipt: "receipt-stale"}})
		var se *StatusError
		if !errors.Is(err, kvfence.ErrRemoteConflict) || !errors.As(err, &se) || !strings.Contains(se.Message, "modified") {
			t.Fatalf("stale Apply: %v; want ErrRemoteConflict with the server's message", err)
		}
		after := e.get(obj)
		if after.Metadata.ResourceVersion != cur.Metadata.ResourceVersion || after.Data["retention_days"] != "45" ||
			after.Metadata.Annotations[AnnotationReceipt] != "receipt-1" {
			t.Errorf("a refused write changed the object: %+v", after)
		}
	})

	t.Run("another incarnation under the same name is refused", func(t *testing.T) {
		e := e.in(t)
		obj := e.create("reborn", true)
		first, _ := recv.Read(ctx, obj)
		// Only the receiver may unlabel a scoped object; then the
		// administrator deletes it and creates another under the name.
		e.s.Must(kubeproc.Receiver, http.MethodPatch, testColl+"/reborn", []byte(`[{"op":"remove","path":"/metadata/labels/kvfence.dev~1scope"}]`), http.StatusOK)
		e.s.Must(kubeproc.Admin, http.MethodDelete, testColl+"/reborn", nil, http.StatusOK)
		e.create("reborn", true)
		second, _ := recv.Read(ctx, obj)
		if second.UID == first.UID {
			t.Fatal("recreated object has the same UID")
		}
		for _, tc := range []struct {
			name         string
			uid, version string
		}{
			{"the old incarnation's version and UID", first.UID, first.Version},
			// Only the UID tells this from a valid write: the server
			// refuses it because metadata.uid is sent as precondition.
			{"the current version with the old UID", first.UID, second.Version},
		} {
			_, err := recv.Apply(ctx, kvfence.DispatchInput{Object: obj, UID: tc.uid, Precondition: tc.version, Value: []byte(`{"retention_days":"99"}`), Stamp: stampA})
			if !errors.Is(err, kvfence.ErrRemoteConflict) {
				t.Errorf("%s: %v; want ErrRemoteConflict", tc.name, err)
			}
		}
		if o := e.get(obj); o.Data["retention_days"] != "30" || o.Metadata.ResourceVersion != second.Version {
			t.Errorf("a refused write changed the new incarnation: %+v", o)
		}
		// The control: the new incarnation's own UID and version succeed.
		if _, err := recv.Apply(ctx, kvfence.DispatchInput{Object: obj, UID: second.UID, Precondition: second.Version, Value: []byte(`{"retention_days":"99"}`), Stamp: stampA}); err != nil {
			t.Errorf("Apply to the new incarnation: %v", err)
		}
	})

	t.Run("fence makes an update in flight fail", func(t *testing.T) {
		e := e.in(t)
		obj := e.create("inflight", true)
		before, _ := recv.Read(ctx, obj)
		hold := newHoldPUT(nil)
		held := e.dispatcher(kubeproc.Receiver, hold.wrap)
		hold.armed.Store(true)
		result := make(chan error, 1)
		go func() {
			_, err := held.Apply(ctx, kvfence.DispatchInput{Object: obj, UID: before.UID, Precondition: before.Version, Value: []byte(`{"retention_days":"45"}`), Stamp: stampA})
			result <- err
		}()
		select {
		case <-hold.held:
		case err := <-result:
			t.Fatalf("Apply returned before its update was held: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("the update was not held within 30 s")
		}
		fenced, err := recv.Fence(ctx, obj, fenceStamp)
		if err != nil {
			t.Fatal(err)
		}
		close(hold.release)
		if err := <-result; !errors.Is(err, kvfence.ErrRemoteConflict) {
			t.Fatalf("the held update after the fence: %v; want ErrRemoteConflict", err)
		}
		o := e.get(obj)
		if o.Metadata.ResourceVersion != fenced.Version || fenced.Stamp != fenceStamp || o.Data["retention_days"] != "30" ||
			o.Metadata.Annotations[AnnotationReceipt] != "fence-2" || o.Metadata.Annotations[AnnotationEpoch] != "2" || o.Metadata.Annotations[AnnotationGrant] != "" {
			t.Errorf("after the fence and the held update: %+v; fence returned %+v", o, fenced)
		}
		e.checkKept(o)
	})

	t.Run("fence rereads after a change between its read and write", func(t *testing.T) {
		e := e.in(t)
		obj := e.create("racefence", true)
		var once sync.Once
		// Between the fence's read and its update, the receiver applies a
		// change on its own: the fence's update is refused, and its retry
		// must keep that change, not write the older data back.
		hold := newHoldPUT(func() {
			once.Do(func() {
				cur, err := recv.Read(ctx, obj)
				if err == nil {
					_, err = recv.Apply(ctx, kvfence.DispatchInput{Object: obj, UID: cur.UID, Precondition: cur.Version, Value: []byte(`{"retention_days":"60"}`), Stamp: stampA})
				}
				if err != nil {
					t.Errorf("the change between the fence's read and write: %v", err)
				}
			})
		})
		fencer := e.dispatcher(kubeproc.Receiver, hold.wrap)
		hold.armed.Store(true)
		st, err := fencer.Fence(ctx, obj, fenceStamp)
		if err != nil {
			t.Fatal(err)
		}
		if n := hold.puts.Load(); n != 2 {
			t.Errorf("the fence sent %d updates; want 2 (one refused, one after reading again)", n)
		}
		if o := e.get(obj); o.Data["retention_days"] != "60" || st.Stamp != fenceStamp || string(st.Value) != `{"retention_days":"60"}` {
			t.Errorf("the fence lost the change made under it: %+v; returned %+v", o, st)
		}
	})

	t.Run("other identities are refused through this package", func(t *testing.T) {
		e := e.in(t)
		obj := e.create("identities", true)
		cur, _ := recv.Read(ctx, obj)
		in := kvfence.DispatchInput{Object: obj, UID: cur.UID, Precondition: cur.Version, Value: []byte(`{"retention_days":"1"}`), Stamp: stampA}
		// The worker's RBAC binding lets it read; wait until it does.
		e.waitStatus(kubeproc.Worker, http.MethodGet, testColl+"/identities", "", http.StatusOK, "")
		for _, tc := range []struct {
			identity, refusal string
		}{
			{kubeproc.Worker, "cannot update"},
			{kubeproc.Editor, policyMsg},
			{kubeproc.Admin, policyMsg},
		} {
			d := e.dispatcher(tc.identity, nil)
			if _, err := d.Read(ctx, obj); err != nil {
				t.Errorf("%s's read: %v", tc.identity, err)
			}
			for op, call := range map[string]func() error{
				"apply": func() error { _, err := d.Apply(ctx, in); return err },
				"fence": func() error { _, err := d.Fence(ctx, obj, fenceStamp); return err },
			} {
				err := call()
				var se *StatusError
				if !errors.As(err, &se) || se.Code != http.StatusForbidden || !strings.Contains(se.Message, tc.refusal) ||
					errors.Is(err, kvfence.ErrRemoteConflict) || errors.Is(err, kvfence.ErrRemoteNotFound) {
					t.Errorf("%s's %s: %v; want 403 with %q", tc.identity, op, err, tc.refusal)
				}
			}
		}
		if o := e.get(obj); o.Metadata.ResourceVersion != cur.Version || o.Data["retention_days"] != "30" {
			t.Errorf("refused writes changed the object: %+v", o)
		}
	})

	t.Run("an unlabelled object is not written", func(t *testing.T) {
		e := e.in(t)
		obj := e.create("unguarded", false)
		cur, err := recv.Read(ctx, obj)
		if err != nil {
			t.Fatal(err)
		}
		_, err = recv.Apply(ctx, kvfence.DispatchInput{Object: obj, UID: cur.UID, Precondition: cur.Version, Value: []byte(`{"retention_days":"1"}`), Stamp: stampA})
		if !errors.Is(err, ErrUnguarded) {
			t.Errorf("Apply to an unlabelled object: %v; want ErrUnguarded", err)
		}
		if o := e.get(obj); o.Metadata.ResourceVersion != cur.Version {
			t.Errorf("the unlabelled object changed: %+v", o)
		}
	})

	t.Run("a missing object is not found", func(t *testing.T) {
		obj := cm(testNS, "missing")
		if _, err := recv.Read(ctx, obj); !errors.Is(err, kvfence.ErrRemoteNotFound) {
			t.Errorf("Read: %v", err)
		}
		if _, err := recv.Apply(ctx, kvfence.DispatchInput{Object: obj, UID: "u", Precondition: "1", Value: []byte(`{}`), Stamp: stampA}); !errors.Is(err, kvfence.ErrRemoteNotFound) {
			t.Errorf("Apply: %v", err)
		}
		if _, err := recv.Fence(ctx, obj, fenceStamp); !errors.Is(err, kvfence.ErrRemoteNotFound) {
			t.Errorf("Fence: %v", err)
		}
	})

	t.Run("from a kubeconfig file", func(t *testing.T) {
		e := e.in(t)
		obj := e.create("kubeconfig", true)
		path := filepath.Join(t.TempDir(), "kubeconfig")
		kc := map[string]any{
			"apiVersion": "v1", "kind": "Config", "current-context": "worker",
			"clusters": []any{map[string]any{"name": "test", "cluster": map[string]any{"server": e.s.URL, "certificate-authority-data": e.s.CAPEM}}},
			"users": []any{
				map[string]any{"name": "receiver", "user": map[string]any{"token": e.s.Tokens[kubeproc.Receiver]}},
				map[string]any{"name": "worker", "user": map[string]any{"token": e.s.Tokens[kubeproc.Worker]}},
			},
			"contexts": []any{
				map[string]any{"name": "receiver", "context": map[string]any{"cluster": "test", "user": "receiver"}},
				map[string]any{"name": "worker", "context": map[string]any{"cluster": "test", "user": "worker"}},
			},
		}
		b, _ := json.Marshal(kc) // []byte fields marshal as base64, as the file wants
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		d, err := FromKubeconfig(path, "receiver")
		if err != nil {
			t.Fatal(err)
		}
		cur, err := d.Read(ctx, obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Apply(ctx, kvfence.DispatchInput{Object: obj, UID: cur.UID, Precondition: cur.Version, Value: []byte(`{"retention_days":"45"}`), Stamp: stampA}); err != nil {
			t.Errorf("Apply as the kubeconfig's receiver context: %v", err)
		}
		// The file's current context is the worker's: named context, not
		// the current one, is used.
		w, err := FromKubeconfig(path, "")
		if err != nil {
			t.Fatal(err)
		}
		cur, _ = d.Read(ctx, obj)
		if _, err := w.Apply(ctx, kvfence.DispatchInput{Object: obj, UID: cur.UID, Precondition: cur.Version, Value: []byte(`{}`), Stamp: stampA}); err == nil {
			t.Error("the worker's context wrote")
		}
		if _, err := FromKubeconfig(path, "nosuch"); err == nil {
			t.Error("a context the file does not hold was accepted")
		}
	})
}

// Ensure that a kubeconfig is never looked for elsewhere when its path is
// empty (no silent fallback to $KUBECONFIG or ~/.kube/config), and that
// the in-cluster constructor refuses outside a pod.
func TestFromKubeconfigNeedsAPath(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "elsewhere"))
	if _, err := FromKubeconfig("", ""); !errors.Is(err, ErrNoConfig) {
		t.Errorf("FromKubeconfig(\"\"): %v; want ErrNoConfig", err)
	}
	if _, err := FromKubeconfig(filepath.Join(t.TempDir(), "absent"), ""); err == nil {
		t.Error("a missing kubeconfig file was accepted")
	}
	if _, err := New(Options{}); !errors.Is(err, ErrNoConfig) {
		t.Errorf("New without a config: %v", err)
	}
	// Outside a pod, InCluster refuses rather than fall back to anything.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	if _, err := InCluster(); err == nil {
		t.Error("InCluster outside a pod succeeded")
	}
}
