package main

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/internal/kubeproc"
	"github.com/kvfence/kvfence/internal/kubetest"
)

// kubeObject is the part of a ConfigMap the test reads.
type kubeObject struct {
	Metadata struct {
		ResourceVersion string            `json:"resourceVersion"`
		UID             string            `json:"uid"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
}

func getObject(t *testing.T, s *kubeproc.Server, path string) kubeObject {
	t.Helper()
	var o kubeObject
	if err := json.Unmarshal(s.Must(kubeproc.Admin, http.MethodGet, path, nil, http.StatusOK), &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// Ensure that the CLI fences a real Kubernetes object: a target of kind
// kubernetes is created through the receiver's kubeconfig; a worker paused
// across a hold is denied and the object unchanged; the worker's own
// credentials cannot write it; the successor's change is applied with the
// resourceVersion precondition and stamped; observe target reads the
// object live; a receiver without a kubeconfig denies rather than applies;
// and verify-chain accepts the chain.
func TestKube_TargetOverCLI(t *testing.T) {
	s := kubetest.StartDeployed(t, "prod")
	kubetest.CreateScoped(t, s, "prod", "backup-policy", map[string]string{"retention_days": "30"})
	const objPath = "/api/v1/namespaces/prod/configmaps/backup-policy"
	c := newCLI(t)
	c.env[envKubeconfig] = kubetest.Kubeconfig(t, s, kubeproc.Receiver, c.dir)
	c.receiver()
	out := c.json(0, "target", "create", "--scope", fixtureScope, "--target", "cm", "--kind", "kubernetes", "--object", "configmaps/prod/backup-policy")
	before := getObject(t, s, objPath)
	if out["kind"] != "kubernetes" || out["object"] != "configmaps/prod/backup-policy" || out["uid"] != before.Metadata.UID {
		t.Fatalf("target create: %v; object uid %s", out, before.Metadata.UID)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no object", []string{"--kind", "kubernetes"}, "needs --object"},
		{"a value", []string{"--kind", "kubernetes", "--object", "configmaps/prod/backup-policy", "--value", "x"}, "takes no --value"},
		{"an object of another kind", []string{"--object", "configmaps/prod/x", "--value", "x"}, "--kind kubernetes only"},
		{"a malformed object", []string{"--kind", "kubernetes", "--object", "configmaps/prod"}, "RESOURCE/NAMESPACE/NAME"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"target", "create", "--scope", fixtureScope, "--target", "refused"}, tt.args...)
			if r := c.must(ExitUsage, args...); !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("stderr %q, want %q", r.stderr, tt.want)
			}
		})
	}

	patch := func(name, from, to string) string {
		p := c.path(name + ".json")
		if err := os.WriteFile(p, []byte(`[{"op":"test","path":"/retention_days","value":"`+from+`"},{"op":"replace","path":"/retention_days","value":"`+to+`"}]`), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	envelope := func(w, claim, action, req, env string, p string) string {
		c.must(0, "request", "build", "--action", action, "--target", "cm", "--patch-file", p, "--out", c.path(req))
		g := c.json(0, "activate", "--scope", fixtureScope, "--executor", w, "--claim", claim, "--request", c.path(req))
		c.must(0, "envelope", "build", "--scope", fixtureScope, "--epoch", jsonNum(g["epoch"]), "--grant", g["grant"].(string),
			"--executor", w, "--claim", claim, "--request", c.path(req), "--out", c.path(env))
		return g["grant"].(string)
	}
	envelope("worker-a", "claim-a", "raise-a", "a.cbor", "a-env.cbor", patch("a", "30", "45"))
	// Worker A pauses; the operator holds and activates B.
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "worker-a lost its lease")
	if r := c.json(ExitDenied, "submit", "--as", "worker-a", "--envelope", c.path("a-env.cbor")); r["reason"] != "receiver_held" {
		t.Fatalf("A's submit while held: %v", r)
	}
	if o := getObject(t, s, objPath); o.Metadata.ResourceVersion != before.Metadata.ResourceVersion || o.Data["retention_days"] != "30" {
		t.Fatalf("the object changed under the hold: %+v", o)
	}
	// A's own Kubernetes credentials: refused by RBAC.
	if r, err := s.Do(kubeproc.Worker, http.MethodPatch, objPath, []byte(`[{"op":"replace","path":"/data/retention_days","value":"45"}]`)); err != nil || r.Status != http.StatusForbidden {
		t.Fatalf("the worker's own PATCH: %v %v, want 403", r, err)
	}
	grantB := envelope("worker-b", "claim-b", "raise-b", "b.cbor", "b-env.cbor", patch("b", "30", "45"))
	res := c.json(0, "submit", "--as", "worker-b", "--envelope", c.path("b-env.cbor"))
	after := getObject(t, s, objPath)
	if res["outcome"] != "applied" || after.Data["retention_days"] != "45" || after.Metadata.Annotations["kvfence.dev/grant"] != grantB {
		t.Fatalf("B's submit: %v; object %+v", res, after)
	}
	if res["version"] != after.Metadata.ResourceVersion {
		t.Fatalf("B's result names version %v, the object is at %s", res["version"], after.Metadata.ResourceVersion)
	}
	// A again, after B: still denied, the object as B left it.
	if r := c.json(ExitDenied, "submit", "--as", "worker-a", "--envelope", c.path("a-env.cbor")); r["reason"] != "stale_or_unknown_epoch" {
		t.Fatalf("A's submit after B: %v", r)
	}
	if o := getObject(t, s, objPath); o.Metadata.ResourceVersion != after.Metadata.ResourceVersion {
		t.Fatalf("the object changed after A's second submit: %+v", o)
	}
	live := c.json(0, "observe", "target", "cm")
	if live["resource_version"] != after.Metadata.ResourceVersion || live["last_dispatch"] != after.Metadata.Annotations["kvfence.dev/receipt"] ||
		!strings.Contains(live["value"].(string), `"45"`) {
		t.Fatalf("observe target: %v; object %+v", live, after)
	}
	c.must(0, "verify-chain", "--pub", c.path("receiver.key.pub"))

	// Without a kubeconfig the receiver denies; it never applies locally.
	delete(c.env, envKubeconfig)
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "rotate")
	envelope("worker-c", "claim-c", "raise-c", "c.cbor", "c-env.cbor", patch("c", "45", "60"))
	if r := c.json(ExitDenied, "submit", "--as", "worker-c", "--envelope", c.path("c-env.cbor")); !strings.Contains(r["detail"].(string), "dispatcher") {
		t.Fatalf("a submit without a dispatcher: %v", r)
	}
	if o := getObject(t, s, objPath); o.Data["retention_days"] != "45" {
		t.Fatalf("the object changed without a dispatcher: %+v", o)
	}
}
