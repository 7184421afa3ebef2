package kubetarget

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/kvfence"
)

func cm(ns, name string) kvfence.RemoteObject {
	return kvfence.RemoteObject{Version: "v1", Resource: "configmaps", Namespace: ns, Name: name}
}

// Ensure that only namespaced core v1 ConfigMaps with names the API
// server could hold get a path, so that a hostile name never reaches
// another path of the server.
func TestObjectPath(t *testing.T) {
	for _, tc := range []struct {
		name    string
		obj     kvfence.RemoteObject
		want    string
		wantErr error
	}{
		{"configmap", cm("prod", "backup-policy"), "/api/v1/namespaces/prod/configmaps/backup-policy", nil},
		{"dotted name", cm("prod", "a.b-c.0"), "/api/v1/namespaces/prod/configmaps/a.b-c.0", nil},
		{"secrets", kvfence.RemoteObject{Version: "v1", Resource: "secrets", Namespace: "prod", Name: "x"}, "", ErrUnsupportedResource},
		{"another group", kvfence.RemoteObject{Group: "apps", Version: "v1", Resource: "configmaps", Namespace: "prod", Name: "x"}, "", ErrUnsupportedResource},
		{"another version", kvfence.RemoteObject{Version: "v2", Resource: "configmaps", Namespace: "prod", Name: "x"}, "", ErrUnsupportedResource},
		{"singular resource", kvfence.RemoteObject{Version: "v1", Resource: "configmap", Namespace: "prod", Name: "x"}, "", ErrUnsupportedResource},
		{"cluster-scoped", cm("", "x"), "", ErrInvalidObjectName},
		{"no name", cm("prod", ""), "", ErrInvalidObjectName},
		{"path traversal", cm("prod", "../../secrets/x"), "", ErrInvalidObjectName},
		{"slash in namespace", cm("prod/configmaps/x", "y"), "", ErrInvalidObjectName},
		{"query", cm("prod", "x?dryRun=All"), "", ErrInvalidObjectName},
		{"escape", cm("prod", "x%2fy"), "", ErrInvalidObjectName},
		{"upper case", cm("prod", "Backup"), "", ErrInvalidObjectName},
		{"dot in namespace", cm("a.b", "x"), "", ErrInvalidObjectName},
		{"leading dash", cm("prod", "-x"), "", ErrInvalidObjectName},
		{"empty label", cm("prod", "a..b"), "", ErrInvalidObjectName},
		{"long namespace", cm(strings.Repeat("n", 64), "x"), "", ErrInvalidObjectName},
		{"long name", cm("prod", strings.Repeat("n.", 127)+"n"), "", ErrInvalidObjectName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := objectPath(tc.obj)
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Errorf("objectPath(%+v) = %q, %v; want %q, %v", tc.obj, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// Ensure that an answer that is not a readable ConfigMap is
// ErrMalformedObject, and that malformed stamp annotations on a readable
// one are read as no stamp.
func TestDecodeObject(t *testing.T) {
	const meta = `"metadata":{"name":"x","resourceVersion":"5","uid":"u1"`
	for _, tc := range []struct {
		name, body, wantErr string
		want                kvfence.RemoteState
	}{
		{"no data", `{"kind":"ConfigMap",` + meta + `}}`, "", kvfence.RemoteState{Version: "5", UID: "u1", Value: []byte(`{}`)}},
		{"null data", `{"kind":"ConfigMap",` + meta + `},"data":null}`, "", kvfence.RemoteState{Version: "5", UID: "u1", Value: []byte(`{}`)}},
		{"data and stamp", `{"kind":"ConfigMap",` + meta + `,"annotations":{"kvfence.dev/scope":"s","kvfence.dev/epoch":"2","kvfence.dev/grant":"g","kvfence.dev/receipt":"r"}},"data":{"b":"2","a":"1"}}`, "",
			kvfence.RemoteState{Version: "5", UID: "u1", Value: []byte(`{"a":"1","b":"2"}`), Stamp: kvfence.Stamp{Scope: "s", Epoch: 2, Grant: "g", Receipt: "r"}}},
		{"forged partial stamp", `{"kind":"ConfigMap",` + meta + `,"annotations":{"kvfence.dev/receipt":"r"}}}`, "", kvfence.RemoteState{Version: "5", UID: "u1", Value: []byte(`{}`)}},
		{"not JSON", `<html>`, "invalid character", kvfence.RemoteState{}},
		{"another kind", `{"kind":"Secret",` + meta + `}}`, "not ConfigMap", kvfence.RemoteState{}},
		{"no kind", `{` + meta + `}}`, "not ConfigMap", kvfence.RemoteState{}},
		{"no version", `{"kind":"ConfigMap","metadata":{"uid":"u"}}`, "no resourceVersion", kvfence.RemoteState{}},
		{"no uid", `{"kind":"ConfigMap","metadata":{"resourceVersion":"1"}}`, "no resourceVersion or uid", kvfence.RemoteState{}},
		{"number annotation", `{"kind":"ConfigMap",` + meta + `,"annotations":{"a":1}}}`, "metadata.annotations", kvfence.RemoteState{}},
		{"number data", `{"kind":"ConfigMap",` + meta + `},"data":{"a":1}}`, "data", kvfence.RemoteState{}},
		{"metadata array", `{"kind":"ConfigMap","metadata":[]}`, "metadata", kvfence.RemoteState{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := decodeObject([]byte(tc.body))
			if tc.wantErr != "" {
				if !errors.Is(err, ErrMalformedObject) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("decodeObject = %v; want ErrMalformedObject with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := o.state()
			if got.Version != tc.want.Version || got.UID != tc.want.UID || string(got.Value) != string(tc.want.Value) || got.Stamp != tc.want.Stamp {
				t.Errorf("state = %+v (value %s); want %+v (value %s)", got, got.Value, tc.want, tc.want.Value)
			}
		})
	}
}

// Ensure that an update sends back every field it does not change
// (labels, other annotations, binaryData, unknown fields, numbers as
// written) and sets the preconditions, the stamp and the data.
func TestUpdateBodyKeepsTheRest(t *testing.T) {
	in := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"prod","resourceVersion":"9","uid":"u-now","generation":12345678901234567890,` +
		`"labels":{"kvfence.dev/scope":"s","team":"a"},"annotations":{"note":"keep","kvfence.dev/receipt":"old"},"managedFields":[{"manager":"m"}]},` +
		`"binaryData":{"bin":"AAE="},"immutable":false,"future":{"x":[1,2]},"data":{"a":"1"}}`
	o, err := decodeObject([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	stamp, _ := StampAnnotations(kvfence.Stamp{Scope: "s", Epoch: 3, Grant: "g", Receipt: "r-new"})
	for _, tc := range []struct {
		name     string
		data     map[string]string
		wantData string
	}{
		{"apply", map[string]string{"a": "2", "b": "3"}, `{"a":"2","b":"3"}`},
		{"fence leaves data", nil, `{"a":"1"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := o.updateBody("7", "u-decided", stamp, tc.data)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			var md map[string]json.RawMessage
			json.Unmarshal(got["metadata"], &md)
			for _, c := range []struct{ field, got, want string }{
				{"apiVersion", string(got["apiVersion"]), `"v1"`},
				{"binaryData", string(got["binaryData"]), `{"bin":"AAE="}`},
				{"immutable", string(got["immutable"]), `false`},
				{"future", string(got["future"]), `{"x":[1,2]}`},
				{"data", string(got["data"]), tc.wantData},
				{"resourceVersion", string(md["resourceVersion"]), `"7"`},
				{"uid", string(md["uid"]), `"u-decided"`},
				{"generation", string(md["generation"]), `12345678901234567890`},
				{"labels", string(md["labels"]), `{"kvfence.dev/scope":"s","team":"a"}`},
				{"managedFields", string(md["managedFields"]), `[{"manager":"m"}]`},
				{"annotations", string(md["annotations"]), `{"kvfence.dev/epoch":"3","kvfence.dev/grant":"g","kvfence.dev/receipt":"r-new","kvfence.dev/scope":"s","note":"keep"}`},
			} {
				if c.got != c.want {
					t.Errorf("%s = %s; want %s", c.field, c.got, c.want)
				}
			}
		})
	}
}
