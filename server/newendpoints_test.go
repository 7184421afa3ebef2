package server_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/kvfence/kvfence/internal/api"
)

// Ensure that the grant, target-list and hold-all endpoints are for
// administrators only and refuse malformed or refused calls with nothing
// recorded.
func TestNewEndpoints_Refusals(t *testing.T) {
	e := newEnv(t)
	worker, admin := e.client(workerA), e.client(operator)
	head := e.r.Head()
	for _, tc := range []struct {
		c            *http.Client
		method, path string
		body         string
		status       int
		code         string
	}{
		{worker, http.MethodGet, api.PathGrant + "?id=x", "", http.StatusForbidden, api.CodeForbidden},
		{worker, http.MethodGet, api.PathTargetList, "", http.StatusForbidden, api.CodeForbidden},
		{worker, http.MethodPost, api.PathHold, `{"scopes":[],"reason":"r","all":true}`, http.StatusForbidden, api.CodeForbidden},
		{admin, http.MethodGet, api.PathGrant, "", http.StatusBadRequest, api.CodeBadRequest},
		{admin, http.MethodGet, api.PathGrant + "?id=0123", "", http.StatusNotFound, "not_found"},
		{admin, http.MethodGet, api.PathTargetList + "?scope=", "", http.StatusBadRequest, api.CodeBadRequest},
		{admin, http.MethodGet, api.PathTargetList + "?scope=nope", "", http.StatusNotFound, "unknown_scope"},
		{admin, http.MethodGet, api.PathTargetList + "?other=1", "", http.StatusBadRequest, api.CodeBadRequest},
		{admin, http.MethodPost, api.PathHold, fmt.Sprintf(`{"scopes":[%q],"reason":"r","all":true}`, scope), http.StatusBadRequest, api.CodeBadRequest},
		{admin, http.MethodPost, api.PathHold, `{"scopes":[],"reason":"","all":true}`, http.StatusBadRequest, "invalid_argument"},
		{admin, http.MethodPost, api.PathScopes, `{"scope":"s2","max_grant_ttl":"soon"}`, http.StatusBadRequest, api.CodeBadRequest},
		{admin, http.MethodPost, api.PathScopes, `{"scope":"s2","max_grant_ttl":"-1h"}`, http.StatusBadRequest, api.CodeBadRequest},
		{admin, http.MethodPost, api.PathScopes, `{"scope":"s2","max_grant_ttl":"48h"}`, http.StatusBadRequest, "ttl_too_long"},
	} {
		ctype := ""
		if tc.body != "" {
			ctype = api.ContentJSON
		}
		resp := e.must(tc.c, tc.method, tc.path, ctype, []byte(tc.body))
		if resp.status != tc.status || resp.errorCode() != tc.code {
			t.Errorf("%s %s %s: %d %s, want %d %s", tc.method, tc.path, tc.body, resp.status, resp.raw, tc.status, tc.code)
		}
	}
	if e.r.Head() != head {
		t.Fatal("a refused call was recorded")
	}
}
