package kubeclient

import "testing"

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
