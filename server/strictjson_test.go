package server_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/internal/api"
)

// Ensure that every administrative body is read strictly: a member in
// another case than the API's (alone, or after the right one, where
// encoding/json would let it win: {"scopes":["nope"],"Scopes":["cfg/zz"]}
// held cfg/zz), a member given twice, an unknown member, and data after
// the object are each refused 400 bad_request with a message naming the
// member, and nothing is recorded.
func TestAdmin_StrictJSONBodies(t *testing.T) {
	e := newEnv(t)
	admin := e.client(operator)
	reqB64 := base64.StdEncoding.EncodeToString(request(t, "a1"))
	for _, route := range []struct {
		path string
		// members of a valid body, in order, as JSON member text.
		members []string
		// the member that each variant plays with, and another value.
		name, other string
	}{
		{api.PathScopes, []string{`"scope":"s2"`, `"max_grant_ttl":"1h"`}, "scope", `"s3"`},
		{api.PathTargets, []string{`"scope":"` + scope + `"`, `"target":"t2"`, `"value_b64":"dg=="`}, "target", `"t3"`},
		{api.PathActivate, []string{`"scope":"` + scope + `"`, `"executor":"` + workerA + `"`, `"claim":"c"`,
			`"request_b64":"` + reqB64 + `"`, `"ttl":"1m"`}, "executor", `"` + workerB + `"`},
		{api.PathHold, []string{`"scopes":["nope"]`, `"reason":"incident"`}, "scopes", `["` + scope + `"]`},
		{api.PathHold, []string{`"reason":"incident"`, `"all":false`}, "all", `true`},
	} {
		body := "{" + strings.Join(route.members, ",") + "}"
		upper := strings.ToUpper(route.name[:1]) + route.name[1:]
		for _, tc := range []struct {
			name, body, want string
		}{
			{"case variant after", strings.TrimSuffix(body, "}") + fmt.Sprintf(`,%q:%s}`, upper, route.other),
				fmt.Sprintf(`member %q of the body: member names are case-sensitive, and this one is %q`, upper, route.name)},
			{"case variant alone", strings.Replace(body, `"`+route.name+`"`, `"`+strings.ToUpper(route.name)+`"`, 1),
				fmt.Sprintf(`member %q`, strings.ToUpper(route.name))},
			{"long s or kelvin", strings.Replace(body, `"`+route.name+`"`, `"`+foldVariant(route.name)+`"`, 1),
				fmt.Sprintf(`member %q`, foldVariant(route.name))},
			{"duplicate", strings.TrimSuffix(body, "}") + fmt.Sprintf(`,%q:%s}`, route.name, route.other),
				fmt.Sprintf(`member %q of the body is given twice`, route.name)},
			{"escaped duplicate", strings.TrimSuffix(body, "}") + fmt.Sprintf(`,"\u%04x%s":%s}`, route.name[0], route.name[1:], route.other),
				fmt.Sprintf(`member %q of the body is given twice`, route.name)},
			{"unknown", strings.TrimSuffix(body, "}") + `,"actor":"spiffe://example.org/ops/mallory"}`,
				`the body has no member "actor"`},
			{"trailing", body + `]`, `data after`},
		} {
			head := e.r.Head()
			resp := e.must(admin, http.MethodPost, route.path, api.ContentJSON, []byte(tc.body))
			eb, _ := resp.body["error"].(map[string]any)
			msg, _ := eb["message"].(string)
			if resp.status != http.StatusBadRequest || resp.errorCode() != api.CodeBadRequest || !strings.Contains(msg, tc.want) {
				t.Errorf("%s %s: %s: %d %s; want 400 bad_request naming %q", route.path, tc.name, tc.body, resp.status, resp.raw, tc.want)
			}
			if e.r.Head() != head {
				t.Fatalf("%s %s: %s was recorded", route.path, tc.name, tc.body)
			}
		}
	}
	// The scope that the case variant would have held is open to no one
	// and was never touched: the hold of "nope" alone is refused as an
	// unknown scope.
	resp := e.must(admin, http.MethodPost, api.PathHold, api.ContentJSON, []byte(`{"scopes":["nope"],"reason":"incident"}`))
	if resp.status != http.StatusNotFound {
		t.Fatalf("hold of an unknown scope: %d %s", resp.status, resp.raw)
	}
}

// foldVariant spells name with a letter that encoding/json folds onto
// one of its own: the long s for s, the Kelvin sign for k, else its
// first letter in upper case.
func foldVariant(name string) string {
	switch {
	case strings.Contains(name, "s"):
		return strings.Replace(name, "s", "\u017f", 1)
	case strings.Contains(name, "k"):
		return strings.Replace(name, "k", "\u212a", 1)
	}
	return strings.ToUpper(name[:1]) + name[1:]
}
