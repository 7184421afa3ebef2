package kvfence

import (
	"crypto/ed25519"
	"errors"
	"github.com/kvfence/kvfence/engine"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
	bolt "go.etcd.io/bbolt"
)

// splice copies the named keys of the named buckets (every key when keys is
// nil) from the database at from into the one at to, with bbolt alone: what
// someone who can write the files does, without the receiver's key.
func splice(t *testing.T, from, to string, what map[string][]string) {
	t.Helper()
	src, err := bolt.Open(from, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := bolt.Open(to, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	err = src.View(func(stx *bolt.Tx) error {
		return dst.Update(func(dtx *bolt.Tx) error {
			for bucket, keys := range what {
				sb, db := stx.Bucket([]byte(bucket)), dtx.Bucket([]byte(bucket))
				put := func(k, v []byte) error { return db.Put(append([]byte(nil), k...), append([]byte(nil), v...)) }
				if keys == nil {
					if err := sb.ForEach(put); err != nil {
						return err
					}
					continue
				}
				for _, k := range keys {
					if err := put([]byte(k), sb.Get([]byte(k))); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// splicedFixture runs the paused-worker schedule, keeping a copy of the
// database from while worker A's grant was active; after the hold and B's
// write it copies the live database's history (and what else is named) into
// that copy and puts the copy in place. It returns A's envelope, which the
// copy's state still authorises.
func splicedFixture(t *testing.T, what map[string][]string) (*fixture, worker) {
	return pausedWorkerCopy(t, func(live, backup string) {
		splice(t, live, backup, what)
		copyFile(t, backup, live)
	})
}

// Ensure that a pre-hold backup with the live history spliced into it is
// refused at Open and reported by VerifyChain as state_mismatch, however
// much of the live database's bookkeeping is copied along, and that
// without the state check the splice would apply A's superseded grant.
func TestOpen_SplicedBackupIsStateMismatch(t *testing.T) {
	pub := testKey.Public().(ed25519.PublicKey)
	for _, tc := range []struct {
		name string
		what map[string][]string
	}{
		{"history only", map[string][]string{"audit": nil, "tree": nil}},
		{"history and high-water", map[string][]string{"audit": nil, "tree": nil, "meta": {"epoch_high_water"}}},
		{"history, high-water and checkpoint", map[string][]string{"audit": nil, "tree": nil, "meta": {"epoch_high_water"},
			"checkpoints": {"latest", "head"}}},
		{"history, high-water, checkpoint and digest", map[string][]string{"audit": nil, "tree": nil, "meta": {"epoch_high_water"},
			"checkpoints": {"latest", "state", "head"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, a := splicedFixture(t, tc.what)
			_, err := Open(f.path, f.opts())
			if !errors.Is(err, audit.ErrStateMismatch) || !IsIntegrityError(err) {
				t.Fatalf("Open(spliced) = %v, want ErrStateMismatch", err)
			}
			if _, err := Open(f.path, &Options{ReadOnly: true, Anchor: f.anchor}); !errors.Is(err, audit.ErrStateMismatch) {
				t.Fatalf("read-only Open(spliced) = %v, want ErrStateMismatch", err)
			}
			rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: pub})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Problem != audit.ProblemStateMismatch || !errors.Is(rep.Err(), audit.ErrStateMismatch) {
				t.Fatalf("VerifyChain = %+v, want state_mismatch", rep)
			}

			// The attack, kept on purpose: the chain alone does not tell
			// the splice from the real database, and the spliced state
			// still authorises A.
			v := mustOpenSkip(t, f)
			res, err := v.Submit(f.ctx, "worker-a", a.envelope)
			v.Close()
			if err != nil || res.Outcome != Applied {
				t.Fatalf("spliced copy without the state check: %+v, %v; the test cannot go red without it", res, err)
			}
			f.r = mustOpenSkip(t, f) // for the fixture's cleanup
			f.r.opts.Anchor = nil
		})
	}
}

// Ensure that a state record changed in place, with no change to the chain
// at all, is refused at Open and reported by VerifyChain.
func TestOpen_StateEditIsStateMismatch(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	f.hold("worker-a lease expired")
	f.r.Close()

	// Put the control record back as it was while A's grant was active:
	// open, at A's epoch, with A's grant.
	db, err := bolt.Open(f.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(seam(func(tx engine.Tx) error {
		c, err := getControl(tx, fixScope)
		if err != nil {
			return err
		}
		c.Mode, c.Epoch, c.ActiveGrant = ModeOpen, a.grant.Epoch, a.grant.ID
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
		t.Fatalf("Open(edited) = %v, want ErrStateMismatch", err)
	}
	rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Problem != audit.ProblemStateMismatch {
		t.Fatalf("VerifyChain = %+v, want state_mismatch", rep)
	}
	v := mustOpenSkip(t, f)
	if res, err := v.Submit(f.ctx, "worker-a", a.envelope); err != nil || res.Outcome != Applied {
		t.Fatalf("edited state without the state check: %+v, %v; the test cannot go red without it", res, err)
	}
	v.Close()
	f.r = mustOpenSkip(t, f)
	f.r.opts.Anchor = nil
}

// Ensure that the anchor's rules are checked before the commit: a
// checkpoint the anchor would refuse (here, one below its epoch high-water)
// leaves the database unchanged and the caller with an error, instead of a
// committed change and ErrNotAcknowledged.
func TestSubmit_AnchorRulesBeforeCommit(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	before := f.r.Head()
	f.r.wmu.Lock()
	f.r.anchor.EpochHighWater = 99 // an anchor that has seen a higher epoch than this database
	f.r.wmu.Unlock()
	_, err := f.r.Submit(f.ctx, "worker-a", a.envelope)
	if !errors.Is(err, audit.ErrAnchorRegression) || errors.Is(err, ErrNotAcknowledged) {
		t.Fatalf("Submit = %v, want ErrAnchorRegression before the commit", err)
	}
	if got := f.r.Head(); got != before {
		t.Fatalf("head moved from %v to %v: the refused checkpoint was committed", before, got)
	}
	f.wantTarget(1, fixValue)
	f.r.wmu.Lock()
	f.r.anchor.EpochHighWater = 1
	f.r.wmu.Unlock()
	if res := f.submit("worker-a", a.envelope); res.Outcome != Applied {
		t.Fatalf("after the anchor is consistent again: %+v", res)
	}
}

// Ensure that every kind of write keeps the stored digest equal to the one
// recomputed from the records: what Open checks after every test.
func TestStateDigest_KeptCurrent(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
		f.submit("worker-a", a.envelope)
		f.submit("worker-a", a.envelope)   // already applied
		f.submit("worker-x", a.envelope)   // denied: executor
		f.submit("worker-a", []byte{0xff}) // denied: malformed
		f.hold("done")
		f.submit("worker-a", a.envelope) // denied: held
		for i := 0; i < 3; i++ {
			f.reopen()
		}
		sc, err := f.r.checkState(nil)
		if err != nil {
			t.Fatal(err)
		}
		if sc.Computed != sc.Signed {
			t.Fatalf("computed %x, signed %x", sc.Computed, sc.Signed)
		}
	})
}
