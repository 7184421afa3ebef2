package server_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// panickyKube is fakeKube whose reads panic once armed, as a dispatcher
// with a bug an object's content reaches.
type panickyKube struct {
	fakeKube
	armed atomic.Bool
}

func (p *panickyKube) Read(ctx context.Context, obj kvfence.RemoteObject) (kvfence.RemoteState, error) {
	if p.armed.Load() {
		panic("dispatcher bug")
	}
	return p.fakeKube.Read(ctx, obj)
}

// fixedCaller authenticates every request as one identity.
type fixedCaller string

func (f fixedCaller) Authenticate(*http.Request) (string, error) { return string(f), nil }

// Ensure that a panic while a batch's envelope is decided (here in the
// dispatcher's read of a remote target) is answered as one in a single
// submit is: a 500 fault, the server still serving, not a crash of the
// process that serves every other caller.
func TestSubmitBatch_PanicAnswered(t *testing.T) {
	kube := &panickyKube{fakeKube: fakeKube{objects: map[string]kvfence.RemoteState{
		"configmaps/prod/policy": {Version: "7", UID: "uid-1", Value: []byte(`{"a":"1"}`)},
	}}}
	r := openWith(t, map[kvfence.TargetKind]kvfence.Dispatcher{kvfence.TargetKubernetes: kube})
	ctx := context.Background()
	obj, err := kvfence.ParseObject("configmaps/prod/policy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admin().CreateTargetSpec(ctx, kvfence.TargetSpec{Scope: scope, Name: "policy", Kind: kvfence.TargetKubernetes, Object: &obj}); err != nil {
		t.Fatal(err)
	}
	req, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: "act", Target: "policy", Set: new([]byte(`{"a":"2"}`))})
	if err != nil {
		t.Fatal(err)
	}
	env := activateFor(t, r, req)
	h := mustNew(t, server.Options{Receiver: r, Authenticator: fixedCaller(workerA)})
	kube.armed.Store(true)
	for _, tc := range []struct {
		path string
		body []byte
	}{
		{api.PathSubmit, env},
		{api.PathSubmitBatch, api.AppendBatch(nil, [][]byte{env, env})},
	} {
		rq := httptest.NewRequest(http.MethodPost, tc.path, bytes.NewReader(tc.body))
		rq.Header.Set("Content-Type", api.ContentCBOR)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, rq)
		if tc.path == api.PathSubmit {
			if w.Code != http.StatusInternalServerError {
				t.Errorf("%s: %d %s, want 500", tc.path, w.Code, w.Body)
			}
			continue
		}
		// The batch is answered whole 500, or 200 with a fault for each
		// envelope.
		var out api.Batch
		if w.Code == http.StatusInternalServerError {
			continue
		}
		if err := api.DecodeAnswer(w.Body.Bytes(), &out); w.Code != http.StatusOK || err != nil || len(out.Results) != 2 {
			t.Fatalf("%s: %d %s, want 500 or 200 with two results", tc.path, w.Code, w.Body)
		}
		for i, res := range out.Results {
			if res.Status != http.StatusInternalServerError || res.Error == nil || res.Error.Code != api.CodeInternal {
				t.Errorf("result %d: %s, want a 500 internal", i, itemOutcome(res))
			}
		}
	}
}
