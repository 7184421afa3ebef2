package kubeproc

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// configMap is the part of a ConfigMap these tests read.
type configMap struct {
	Metadata struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
}

func decode(t *testing.T, b []byte) configMap {
	t.Helper()
	var cm configMap
	if err := json.Unmarshal(b, &cm); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return cm
}

const cmPath = "/api/v1/namespaces/default/configmaps"

// Ensure that the server the tests get is a real kube-apiserver that
// answers /readyz, authenticates each identity of the token file, and
// authorizes by RBAC: the worker, bound to nothing, may not list
// configmaps; the admin may; a wrong token is 401.
func TestServer(t *testing.T) {
	Require(t)
	s := Start(t, Config{})
	if s.Pid() == 0 || !strings.HasPrefix(s.URL, "https://127.0.0.1:") {
		t.Fatalf("server pid %d url %s", s.Pid(), s.URL)
	}
	for _, tc := range []struct {
		identity, method, path string
		want                   int
	}{
		{Admin, http.MethodGet, "/readyz", http.StatusOK},
		{Admin, http.MethodGet, cmPath, http.StatusOK},
		{Worker, http.MethodGet, cmPath, http.StatusForbidden},
		{Receiver, http.MethodGet, cmPath, http.StatusForbidden},
		{Editor, http.MethodGet, cmPath, http.StatusForbidden},
	} {
		r, err := s.Do(tc.identity, tc.method, tc.path, nil)
		if err != nil || r.Status != tc.want {
			t.Errorf("%s %s as %s: %v %v; want %d", tc.method, tc.path, tc.identity, r, err, tc.want)
		}
	}
	// The server sees each identity as the token file names it.
	r := s.Must(Worker, http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews",
		[]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`), http.StatusCreated)
	if !strings.Contains(string(r), `"username":"`+s.Users[Worker]+`"`) || !strings.Contains(string(r), WorkersGroup) {
		t.Errorf("worker's self review: %s", r)
	}
	bad := *s
	bad.Tokens = map[string]string{Admin: "not-a-token"}
	if r, err := bad.Do(Admin, http.MethodGet, cmPath, nil); err != nil || r.Status != http.StatusUnauthorized {
		t.Errorf("wrong token: %v %v; want 401", r, err)
	}
	if _, err := s.Do("nobody", http.MethodGet, "/readyz", nil); err == nil {
		t.Error("an unknown identity was sent")
	}
}

// Ensure that the server enforces the preconditions a receiver relies on:
// an update with a stale resourceVersion is 409 and changes nothing; a
// JSON Patch whose test op fails is 422 (not 409) and changes nothing; a
// current one of each applies.
func TestPreconditions(t *testing.T) {
	Require(t)
	s := Start(t, Config{})
	created := decode(t, s.Must(Admin, http.MethodPost, cmPath,
		[]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"backup-policy"},"data":{"retention_days":"30"}}`),
		http.StatusCreated))
	obj := cmPath + "/backup-policy"
	put := func(rv, retention string) *Response {
		t.Helper()
		body, _ := json.Marshal(map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "backup-policy", "resourceVersion": rv},
			"data":     map[string]string{"retention_days": retention},
		})
		r, err := s.Do(Admin, http.MethodPut, obj, body)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := put(created.Metadata.ResourceVersion, "45")
	if r.Status != http.StatusOK {
		t.Fatalf("current update: %v", r)
	}
	current := decode(t, r.Body)
	for _, tc := range []struct {
		name   string
		do     func() *Response
		status int
		reason string
	}{
		{"stale resourceVersion", func() *Response { return put(created.Metadata.ResourceVersion, "60") }, http.StatusConflict, `"reason":"Conflict"`},
		{"failed JSON Patch test", func() *Response {
			r, err := s.Do(Admin, http.MethodPatch, obj, []byte(`[{"op":"test","path":"/data/retention_days","value":"30"},{"op":"replace","path":"/data/retention_days","value":"60"}]`))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}, http.StatusUnprocessableEntity, `"reason":"Invalid"`},
		{"failed JSON Patch test on resourceVersion", func() *Response {
			r, err := s.Do(Admin, http.MethodPatch, obj, []byte(`[{"op":"test","path":"/metadata/resourceVersion","value":"`+created.Metadata.ResourceVersion+`"},{"op":"replace","path":"/data/retention_days","value":"60"}]`))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}, http.StatusUnprocessableEntity, `"reason":"Invalid"`},
	} {
		r := tc.do()
		if r.Status != tc.status || !strings.Contains(string(r.Body), tc.reason) {
			t.Errorf("%s: %v; want %d with %s", tc.name, r, tc.status, tc.reason)
		}
		now := decode(t, s.Must(Admin, http.MethodGet, obj, nil, http.StatusOK))
		if now.Metadata.ResourceVersion != current.Metadata.ResourceVersion || now.Data["retention_days"] != "45" {
			t.Errorf("%s changed the object: %+v", tc.name, now)
		}
	}
	// A patch whose test holds applies.
	r, err := s.Do(Admin, http.MethodPatch, obj, []byte(`[{"op":"test","path":"/metadata/resourceVersion","value":"`+current.Metadata.ResourceVersion+`"},{"op":"replace","path":"/data/retention_days","value":"60"}]`))
	if err != nil || r.Status != http.StatusOK || decode(t, r.Body).Data["retention_days"] != "60" {
		t.Errorf("current JSON Patch: %v %v", r, err)
	}
}
