package kvfence

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/defect"
)

// shortScope is a scope whose maximum grant lifetime is one hour, with its
// own target, for the tests of the extension cap.
const (
	shortScope  = "configmap/prod/short"
	shortTarget = "configmap/prod/short-target"
)

// activateShort creates shortScope (maximum 1h) and its target, and
// activates a 15-minute grant there for worker w.
func activateShort(f *fixture, w string) worker {
	f.t.Helper()
	if _, err := f.admin.CreateScopeWith(f.ctx, shortScope, ScopeOptions{MaxGrantTTL: time.Hour}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.admin.CreateTarget(f.ctx, shortScope, shortTarget, []byte(fixValue)); err != nil {
		f.t.Fatal(err)
	}
	req := f.request(&Request{V: 1, Action: "act-short", Target: shortTarget, Patch: []byte(fixPatch)})
	g, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: shortScope, Executor: w, Claim: "claim-s", Request: req})
	if err != nil {
		f.t.Fatal(err)
	}
	return worker{name: w, grant: g, envelope: f.envelope(&Envelope{V: 1, Scope: shortScope, Epoch: g.Epoch,
		Grant: g.ID, Executor: w, Claim: "claim-s", Request: req})}
}

// storedNotAfter is the grant's end of validity as the store keeps it.
func storedNotAfter(f *fixture, id string) time.Time {
	f.t.Helper()
	g, err := f.r.Grant(id)
	if err != nil {
		f.t.Fatal(err)
	}
	return g.NotAfter
}

// verifyFence runs the chain verifier, fence replay included, on the open
// receiver and fails the test unless the chain verifies.
func verifyFence(f *fixture) {
	f.t.Helper()
	rep, err := f.r.verifyChain(VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil {
		f.t.Fatal(err)
	}
	if !rep.OK() {
		f.t.Fatalf("verify-chain: %s: %s", rep.Problem, rep.Detail)
	}
}

// Ensure that ExtendGrant moves the active grant's end to now+TTL, writes
// one grant_extended entry that names the grant, its scope, epoch and the
// actor, that the extended grant is honoured past its first end and the
// change survives a reopen (the state digest covers it), on both engines.
func TestExtendGrant_Extends(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		w := f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
		f.clock.Add(10 * time.Minute)
		before := f.r.Head().Seq
		g, err := f.admin.As("spiffe://example.org/admin").ExtendGrant(f.ctx, ExtendRequest{Grant: w.grant.ID, TTL: 30 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		want := f.clock.Now().Add(30 * time.Minute)
		if !g.NotAfter.Equal(want) || !storedNotAfter(f, w.grant.ID).Equal(want) {
			t.Fatalf("NotAfter returned %s, stored %s; want %s", g.NotAfter, storedNotAfter(f, w.grant.ID), want)
		}
		if g.ID != w.grant.ID || g.Epoch != w.grant.Epoch || !g.NotBefore.Equal(w.grant.NotBefore) || !g.CreatedAt.Equal(w.grant.CreatedAt) {
			t.Fatalf("extended grant %+v changed more than its end (was %+v)", g, w.grant)
		}
		if head := f.r.Head().Seq; head != before+1 {
			t.Fatalf("head %d after the extension, want %d", head, before+1)
		}
		var ext *audit.Entry
		if err := f.r.Events(before+1, func(e Event) bool { ext = &e.Entry; return false }); err != nil {
			t.Fatal(err)
		}
		if ext.Kind != KindGrantExtended || ext.Grant != w.grant.ID || ext.Scope != fixScope || ext.Epoch != w.grant.Epoch ||
			ext.Actor != "spiffe://example.org/admin" || !strings.Contains(ext.Note, want.Format(time.RFC3339Nano)) {
			t.Fatalf("entry %+v", ext)
		}
		// Past the first end (15m after activation), inside the new one.
		f.clock.Add(20 * time.Minute)
		if res := f.submit("worker-a", w.envelope); res.Outcome != Applied {
			t.Fatalf("submit after the first end = %s/%s (%s), want applied", res.Outcome, res.Reason, res.Detail)
		}
		f.reopen()
		if got := storedNotAfter(f, w.grant.ID); !got.Equal(want) {
			t.Fatalf("after reopen NotAfter %s, want %s", got, want)
		}
		verifyFence(f)
	})
}

// Ensure that every extension the rules refuse returns its sentinel and
// writes nothing: no entry, the grant's end unchanged. Each case is red
// without the check it names.
func TestExtendGrant_Refused(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup returns the grant to extend and the TTL to ask for.
		setup func(f *fixture) (string, time.Duration)
		want  error
		// msg is a part of the error's message that names the check.
		msg string
	}{
		{"after a hold", func(f *fixture) (string, time.Duration) {
			w := f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
			f.hold("lease lost")
			return w.grant.ID, 30 * time.Minute
		}, ErrGrantNotActive, "is held at epoch 2"},
		{"superseded by a later activation", func(f *fixture) (string, time.Duration) {
			w := f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
			f.hold("lease lost")
			f.activate("worker-b", "claim-2", f.patchRequest("act-2"))
			return w.grant.ID, 30 * time.Minute
		}, ErrGrantNotActive, "was minted at epoch 1"},
		{"control record names it at another epoch", func(f *fixture) (string, time.Duration) {
			w := f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
			forgeRecord(f, bucketControl, fixScope, func(c *controlRecord) { c.Epoch++ })
			return w.grant.ID, 30 * time.Minute
		}, ErrGrantNotActive, "was minted at epoch 1"},
		{"control record names another grant at its epoch", func(f *fixture) (string, time.Duration) {
			w := f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
			forgeActiveGrant(f, "0123456789abcdef0123456789abcdef")
			return w.grant.ID, 30 * time.Minute
		}, ErrGrantNotActive, "with grant 0123456789abcdef0123456789abcdef"},
		{"grant of a scope that does not exist", func(f *fixture) (string, time.Duration) {
			w := f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
			forgeRecord(f, bucketGrants, w.grant.ID, func(g *grantRecord) { g.Scope = "configmap/prod/none" })
			return w.grant.ID, 30 * time.Minute
		}, ErrGrantNotActive, "does not exist"},
		{"unknown grant", func(f *fixture) (string, time.Duration) {
			f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
			return "00000000000000000000000000000000", 30 * time.Minute
		}, ErrGrantNotActive, "no grant"},
		{"revoked, though the control record names it", func(f *fixture) (string, time.Duration) {
			w := f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
			forgeRecord(f, bucketGrants, w.grant.ID, func(g *grantRecord) { g.RevokedSeq = 1 })
			return w.grant.ID, 30 * time.Minute
		}, ErrGrantNotActive, "revoked"},
		{"expired", func(f *fixture) (string, time.Duration) {
			w := f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
			f.clock.Add(DefaultGrantTTL)
			return w.grant.ID, 30 * time.Minute
		}, ErrGrantExpired, "expired at"},
		{"past the scope's maximum from activation", func(f *fixture) (string, time.Duration) {
			w := activateShort(f, "worker-a")
			f.clock.Add(10 * time.Minute)
			return w.grant.ID, 50*time.Minute + time.Nanosecond
		}, ErrTTLTooLong, "plus scope configmap/prod/short's maximum of 1h0m0s"},
		{"not later than the current end", func(f *fixture) (string, time.Duration) {
			w := f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
			f.clock.Add(time.Minute)
			return w.grant.ID, 14 * time.Minute
		}, ErrInvalidWindow, "is not later than"},
		{"zero ttl", func(f *fixture) (string, time.Duration) {
			w := f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
			return w.grant.ID, 0
		}, ErrInvalidWindow, "must be positive"},
		{"negative ttl", func(f *fixture) (string, time.Duration) {
			w := f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
			return w.grant.ID, -time.Minute
		}, ErrInvalidWindow, "must be positive"},
		{"grant id that is no name", func(f *fixture) (string, time.Duration) {
			f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
			return "bad\x00id", time.Minute
		}, ErrInvalidArgument, "grant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, defect.Variant{})
			id, ttl := tc.setup(f)
			var was time.Time
			if g, err := f.r.Grant(id); err == nil {
				was = g.NotAfter
			}
			head := f.r.Head()
			_, err := f.admin.ExtendGrant(f.ctx, ExtendRequest{Grant: id, TTL: ttl})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("ExtendGrant = %v, want %v saying %q", err, tc.want, tc.msg)
			}
			if !IsRefusal(err) && !errors.Is(err, ErrInvalidWindow) && !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%v is not a refusal", err)
			}
			if got := f.r.Head(); got != head {
				t.Fatalf("head moved from %d to %d on a refused extension", head.Seq, got.Seq)
			}
			if g, err := f.r.Grant(id); err == nil && !g.NotAfter.Equal(was) {
				t.Fatalf("NotAfter moved from %s to %s on a refused extension", was, g.NotAfter)
			}
		})
	}
}

// forgeRecord rewrites the record of key in bucket with edit applied, to
// reach a check past the others with a state no receiver writes; the
// receiver is then told to trust the store as it is.
func forgeRecord[T any](f *fixture, bucket []byte, key string, edit func(*T)) {
	f.t.Helper()
	err := f.r.rawUpdate(func(tx engine.Tx) error {
		raw, err := tx.Get(bucket, []byte(key))
		if err != nil {
			return err
		}
		var rec T
		if err := decodeRecord(bucket, []byte(key), raw, &rec); err != nil {
			return err
		}
		edit(&rec)
		if raw, err = encodeCanonical(&rec); err != nil {
			return err
		}
		return tx.Put(bucket, []byte(key), raw)
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.r.trustStore(f.t)
}

// Ensure that the cap counts from the grant's activation, not from each
// extension: extensions within it succeed, and once it is reached no
// repetition moves the end further.
func TestExtendGrant_CapFromActivation(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	w := activateShort(f, "worker-a")
	activated := w.grant.CreatedAt
	// Every 10 minutes, ask for 15 more: allowed while now+15m is within
	// activation+1h.
	for i := 1; i <= 4; i++ {
		f.clock.Add(10 * time.Minute)
		if _, err := f.admin.ExtendGrant(f.ctx, ExtendRequest{Grant: w.grant.ID, TTL: 15 * time.Minute}); err != nil {
			t.Fatalf("extension %d: %v", i, err)
		}
	}
	// At +50m, +15m would end at +65m.
	f.clock.Add(10 * time.Minute)
	if _, err := f.admin.ExtendGrant(f.ctx, ExtendRequest{Grant: w.grant.ID, TTL: 15 * time.Minute}); !errors.Is(err, ErrTTLTooLong) {
		t.Fatalf("extension past the cap = %v, want ErrTTLTooLong", err)
	}
	// Exactly to the cap is allowed, and is the end for good.
	g, err := f.admin.ExtendGrant(f.ctx, ExtendRequest{Grant: w.grant.ID, TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !g.NotAfter.Equal(activated.Add(time.Hour)) {
		t.Fatalf("NotAfter %s, want the cap %s", g.NotAfter, activated.Add(time.Hour))
	}
	f.clock.Add(9 * time.Minute)
	if _, err := f.admin.ExtendGrant(f.ctx, ExtendRequest{Grant: w.grant.ID, TTL: 5 * time.Minute}); !errors.Is(err, ErrTTLTooLong) {
		t.Fatalf("extension after the cap = %v, want ErrTTLTooLong", err)
	}
	f.clock.Add(time.Minute)
	wantDenied(t, f.submit("worker-a", w.envelope), ReasonGrantExpired)
	verifyFence(f)
}

// Ensure that a hold and an extension racing on one scope are ordered by
// the one-write-transaction rule: whichever commits second sees the
// first, so that after both the scope is held, the grant is refused, and
// the chain's fence replay finds no extension after the hold, on both
// engines.
func TestExtendGrant_RaceWithHold(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		var extended, refused int
		for i := range 20 {
			w := f.activate("worker-a", "claim-1", f.patchRequest("act-"+string(rune('a'+i))))
			var wg sync.WaitGroup
			var extErr, holdErr error
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, extErr = f.admin.ExtendGrant(f.ctx, ExtendRequest{Grant: w.grant.ID, TTL: time.Hour})
			}()
			go func() {
				defer wg.Done()
				_, holdErr = f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "race"})
			}()
			wg.Wait()
			if holdErr != nil {
				t.Fatal(holdErr)
			}
			switch {
			case extErr == nil:
				extended++
			case errors.Is(extErr, ErrGrantNotActive):
				refused++
			default:
				t.Fatalf("extension: %v", extErr)
			}
			st, err := f.r.Status(fixScope)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode != ModeHeld || st.ActiveGrant != "" {
				t.Fatalf("after the race: %+v", st)
			}
			wantDenied(t, f.submit("worker-a", w.envelope), ReasonReceiverHeld)
			// After the hold, whatever the order was, the grant stays fenced.
			if _, err := f.admin.ExtendGrant(f.ctx, ExtendRequest{Grant: w.grant.ID, TTL: time.Hour}); !errors.Is(err, ErrGrantNotActive) {
				t.Fatalf("extension after the hold = %v", err)
			}
		}
		t.Logf("%d extensions committed before their hold, %d after it and refused", extended, refused)
		verifyFence(f)
	})
}

// Ensure that an activation whose TTL is centuries long is refused as over
// the scope's maximum (what the caller must change), not as a window
// outside the years a time can be stored in, and writes nothing.
func TestActivate_CenturiesTTLIsTooLong(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	if _, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "setup"}); err != nil {
		t.Fatal(err)
	}
	head := f.r.Head()
	_, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: fixScope, Executor: "worker-a", Claim: "c",
		Request: f.patchRequest("act-1"), TTL: 250 * 365 * 24 * time.Hour})
	if !errors.Is(err, ErrTTLTooLong) || !strings.Contains(err.Error(), "maximum") {
		t.Fatalf("Activate with a 250-year TTL = %v, want ErrTTLTooLong", err)
	}
	if f.r.Head() != head {
		t.Fatal("the refused activation wrote to the chain")
	}
}
