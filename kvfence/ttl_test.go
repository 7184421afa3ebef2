package kvfence

import (
	"context"
	"errors"
	"github.com/kvfence/kvfence/engine"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	bolt "go.etcd.io/bbolt"
)

// newTTLFixture is a fixture whose receiver was initialised with the given
// maximum grant lifetime, and whose scope was created with scopeMax.
func newTTLFixture(t *testing.T, receiverMax, scopeMax time.Duration) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{t: t, path: filepath.Join(dir, "receiver.db"), clock: newClock(), ctx: context.Background(),
		anchor: audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}}
	if err := Init(f.path, &InitOptions{ReceiverID: "test-receiver", Key: testKey, Anchor: f.anchor, Now: f.clock.Now,
		MaxGrantTTL: receiverMax}); err != nil {
		t.Fatalf("Init: %v", err)
	}
	r, err := Open(f.path, f.opts())
	if err != nil {
		t.Fatal(err)
	}
	f.r, f.admin = r, r.Admin()
	t.Cleanup(func() { checkChain(t, f.r); f.r.Close() })
	if _, err := f.admin.CreateScopeWith(f.ctx, fixScope, ScopeOptions{MaxGrantTTL: scopeMax}); err != nil {
		t.Fatalf("CreateScopeWith: %v", err)
	}
	if _, err := f.admin.CreateTarget(f.ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
		t.Fatal(err)
	}
	return f
}

// Ensure that an activation whose grant would outlive the scope's maximum
// is refused with ErrTTLTooLong and writes nothing.
func TestActivate_MaxGrantTTL(t *testing.T) {
	const day = 24 * time.Hour
	for _, tc := range []struct {
		name                  string
		receiverMax, scopeMax time.Duration
		wantScopeMax          time.Duration
		ttl                   time.Duration
		notBefore, notAfter   time.Duration // from now; zero means unset
		wantErr               error
	}{
		{"default maximum, at it", 0, 0, day, day, 0, 0, nil},
		{"default maximum, over it", 0, 0, day, day + time.Nanosecond, 0, 0, ErrTTLTooLong},
		{"receiver maximum is the scope's", time.Hour, 0, time.Hour, time.Hour, 0, 0, nil},
		{"receiver maximum, over it", time.Hour, 0, time.Hour, time.Hour + time.Minute, 0, 0, ErrTTLTooLong},
		{"scope maximum, at it", day, 10 * time.Minute, 10 * time.Minute, 10 * time.Minute, 0, 0, nil},
		{"scope maximum below the default ttl", day, 10 * time.Minute, 10 * time.Minute, 0, 0, 0, ErrTTLTooLong},
		{"a later start cannot stretch it", 0, 0, day, 2 * time.Hour, 23 * time.Hour, 0, ErrTTLTooLong},
		{"explicit end over it", 0, 0, day, 0, 0, day + time.Second, ErrTTLTooLong},
		{"explicit end at it", 0, 0, day, 0, 0, day, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTTLFixture(t, tc.receiverMax, tc.scopeMax)
			st, err := f.r.Status(fixScope)
			if err != nil || st.MaxGrantTTL != tc.wantScopeMax {
				t.Fatalf("scope maximum %s (%v), want %s", st.MaxGrantTTL, err, tc.wantScopeMax)
			}
			now := f.clock.Now()
			req := ActivateRequest{Scope: fixScope, Executor: "worker-a", Claim: "claim-1",
				Request: f.patchRequest("act"), TTL: tc.ttl}
			if tc.notBefore != 0 {
				req.NotBefore = now.Add(tc.notBefore)
			}
			if tc.notAfter != 0 {
				req.NotAfter = now.Add(tc.notAfter)
			}
			head := f.r.Head()
			g, err := f.admin.Activate(f.ctx, req)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Activate = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil {
				if g.NotAfter.Sub(now) > tc.wantScopeMax {
					t.Fatalf("grant valid until %s, past the maximum", g.NotAfter)
				}
				return
			}
			if st, _ := f.r.Status(fixScope); f.r.Head() != head || st.Mode != ModeHeld {
				t.Fatalf("a refused activation changed something: head %v -> %v, mode %s", head, f.r.Head(), st.Mode)
			}
		})
	}
}

// Ensure that a scope's maximum may tighten the receiver's but not widen
// it, and that a refused creation writes nothing.
func TestCreateScopeWith_MaxGrantTTL(t *testing.T) {
	f := newTTLFixture(t, time.Hour, 0)
	if d, err := f.r.MaxGrantTTL(); err != nil || d != time.Hour {
		t.Fatalf("MaxGrantTTL = %s, %v", d, err)
	}
	for _, tc := range []struct {
		max     time.Duration
		wantErr error
	}{
		{time.Hour + time.Nanosecond, ErrTTLTooLong},
		{-time.Second, ErrInvalidArgument},
		{time.Hour, nil},
		{time.Minute, nil},
	} {
		scope := "s-" + tc.max.String()
		head := f.r.Head()
		_, err := f.admin.CreateScopeWith(f.ctx, scope, ScopeOptions{MaxGrantTTL: tc.max})
		if !errors.Is(err, tc.wantErr) {
			t.Fatalf("CreateScopeWith(%s) = %v, want %v", tc.max, err, tc.wantErr)
		}
		if tc.wantErr != nil {
			if _, serr := f.r.Status(scope); !errors.Is(serr, ErrUnknownScope) || f.r.Head() != head {
				t.Fatalf("a refused scope creation wrote something: %v", serr)
			}
			continue
		}
		var note string
		f.r.Events(f.r.Head().Seq, func(e Event) bool { note = e.Note; return false })
		if want := "max grant ttl " + tc.max.String(); note != want {
			t.Fatalf("scope_created note %q, want %q", note, want)
		}
	}
	if err := Init(filepath.Join(t.TempDir(), "r.db"), &InitOptions{ReceiverID: "x", Key: testKey,
		Anchor: audit.FileAnchor{Path: filepath.Join(t.TempDir(), "a")}, MaxGrantTTL: -1}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Init with a negative maximum = %v", err)
	}
}

// Ensure that the maximum an activation is checked against is covered by
// the state digest: raising it in the control record, apart from the
// history, makes Open refuse the database.
func TestMaxGrantTTL_CoveredByStateDigest(t *testing.T) {
	f := newTTLFixture(t, time.Hour, 0)
	f.r.Close()
	db, err := bolt.Open(f.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(seam(func(tx engine.Tx) error {
		c, err := getControl(tx, fixScope)
		if err != nil {
			return err
		}
		c.MaxGrantTTL = int64(365 * 24 * time.Hour)
		raw, err := encodeCanonical(c)
		if err != nil {
			return err
		}
		return tx.Put(bucketControl, []byte(fixScope), raw)
	}))
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(f.path, f.opts()); !errors.Is(err, audit.ErrStateMismatch) {
		t.Fatalf("Open(edited maximum) = %v, want ErrStateMismatch", err)
	}
	// The fixture's cleanup checks a receiver; give it one that skips the
	// anchor, as the state-digest tests do.
	f.r = mustOpenSkip(t, f)
	f.r.opts.Anchor = nil
}
