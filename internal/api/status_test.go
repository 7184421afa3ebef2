package api

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that a scope's status, with its active grant and maximum grant
// lifetime, crosses the wire unchanged, and that a malformed maximum is
// refused.
func TestScopeStatus_RoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	g := kvfence.Grant{ID: "0123456789abcdef0123456789abcdef", Scope: "s", Epoch: 3, Executor: "w", Claim: "c",
		Action: "a", NotBefore: at, NotAfter: at.Add(time.Hour), Decision: "d", CreatedAt: at, AuditSeq: 9, RevokedSeq: 0}
	g.RequestSHA256[0] = 1
	for _, st := range []kvfence.ScopeStatus{
		{Scope: "s", Epoch: 3, Mode: kvfence.ModeOpen, ActiveGrant: g.ID, CreatedAt: at, ActivatedAt: at,
			Grant: &g, GrantExpired: true, MaxGrantTTL: 90 * time.Minute},
		{Scope: "s", Epoch: 4, Mode: kvfence.ModeHeld, CreatedAt: at, MaxGrantTTL: 24 * time.Hour},
	} {
		raw, err := json.Marshal(ScopeStatusOf(st))
		if err != nil {
			t.Fatal(err)
		}
		var back ScopeStatus
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		got, err := back.Status()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, st) {
			t.Fatalf("round trip:\n got %+v\nwant %+v\n%s", got, st, raw)
		}
	}
	for _, bad := range []string{"soon", "-1h", "0s"} {
		if _, err := (ScopeStatus{Scope: "s", Epoch: 1, Mode: "held", MaxGrantTTL: bad}).Status(); err == nil {
			t.Errorf("max_grant_ttl %q accepted", bad)
		}
	}
}
