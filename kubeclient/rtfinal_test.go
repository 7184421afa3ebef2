package kubeclient

import (
	"encoding/json"
	"testing"
)

// client-go decodes an ExecCredential case-sensitively: "Token" is no
// token for it. A plugin output that Go's decoder reads otherwise (a key
// spelled in another case, or twice in two cases) must be refused, or the
// receiver acts as another identity than kubectl would with the same file.
func TestExecDecode_KeysSpelledOtherwise(t *testing.T) {
	p := &execPlugin{conf: &ExecConfig{APIVersion: ExecAPIv1}}
	for name, out := range map[string]string{
		"Token only":      `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"Token":"other-identity"}}`,
		"token and Token": `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"mine","Token":"other-identity"}}`,
		"Status":          `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","Status":{"token":"other-identity"}}`,
	} {
		cred, err := p.decode([]byte(out))
		if err == nil {
			t.Errorf("%s: accepted, token %q; client-go would not read this output so", name, cred.token)
		}
	}
}

// client-go tells a plugin with provideClusterInfo the cluster's
// proxy-url and disable-compression (spec.cluster); a plugin told less
// than kubectl tells it may reach its token issuer otherwise, or choose
// another identity, as the refused exec extension would.
func TestExecInfo_CarriesProxyURL(t *testing.T) {
	c := &Config{Host: "https://api.example:6443", ProxyURL: "http://proxy.example:3128", DisableCompression: true}
	p, err := newExecPlugin(&ExecConfig{APIVersion: ExecAPIv1, Command: "x", ProvideClusterInfo: true}, c)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Spec struct {
			Cluster map[string]any `json:"cluster"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(p.info, &info); err != nil {
		t.Fatal(err)
	}
	if info.Spec.Cluster["proxy-url"] != c.ProxyURL || info.Spec.Cluster["disable-compression"] != true {
		t.Errorf("KUBERNETES_EXEC_INFO cluster = %v; client-go gives proxy-url %q and disable-compression true", info.Spec.Cluster, c.ProxyURL)
	}
}
