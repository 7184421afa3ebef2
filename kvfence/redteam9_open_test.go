//go:build redteam9open

package kvfence

import (
	"errors"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/defect"
)

// Finding (open): the receiver-wide maximum grant lifetime recorded at
// Init (meta "max_grant_ttl") is outside the state digest and is not a
// known record, yet a scope's creation decides on it: the scope's own
// maximum defaults to it and may not exceed it. Someone who can write the
// store but not sign raises it, with the receiver running or not; a scope
// created after that gets a maximum far above the operator's ceiling, and
// its grants may stay valid that long (until a hold). SECURITY.md says
// records outside the fence state are "checked by what depends on them";
// nothing checks this one. The init entry's note names the ceiling, but
// archiving removes that entry from the store; a fix needs the ceiling
// under a signature the receiver checks at Open (the checkpoints, or the
// base record), which is a format change, so it is left open here. Seen
// failing on both engines: a grant valid for 50 years against a 24h
// ceiling.
func TestRedteam9_MaxGrantTTLCeilingEditedInStore(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		ceiling, err := f.r.MaxGrantTTL()
		if err != nil {
			t.Fatal(err)
		}
		storePut(t, f, bucketMeta, string(metaMaxGrantTTL), encodeMaxGrantTTL(100*365*24*time.Hour))
		_, err = f.admin.CreateScope(f.ctx, "wide")
		if err != nil {
			if errors.Is(err, ErrStateMismatch) {
				return // refused: held
			}
			t.Fatal(err)
		}
		if _, err := f.admin.CreateTarget(f.ctx, "wide", "wide-target", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		req := f.request(&Request{V: 1, Action: "a", Target: "wide-target", Patch: []byte(fixPatch)})
		g, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: "wide", Executor: "w", Claim: "c", Request: req, TTL: 50 * 365 * 24 * time.Hour})
		if err == nil {
			t.Errorf("a grant valid for %s was minted; the receiver's ceiling at Init was %s", g.NotAfter.Sub(g.NotBefore), ceiling)
		}
		storePut(t, f, bucketMeta, string(metaMaxGrantTTL), encodeMaxGrantTTL(ceiling))
	})
}
