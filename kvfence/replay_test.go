package kvfence

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
)

// replayFixture runs the first half of the replay attack on a lost anchor:
// the anchor deleted, a lost-anchor admission with epoch floor 10 applied
// (every scope held at 11), then a new grant activated at epoch 11. It
// returns the admission and a copy of the database from before the
// recovery. The receiver is closed.
func replayFixture(t *testing.T) (f *fixture, adm []byte, before string, b worker) {
	t.Helper()
	f, _ = lostAnchorFixture(t)
	before = filepath.Join(t.TempDir(), "before.db")
	copyFile(t, f.path, before)
	adm = signed(t, recoveryKey, f.lostAnchorAdmission(10))
	res, err := Recover(f.path, adm, f.recoverOpts())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Scopes {
		if s.Epoch != 11 {
			t.Fatalf("recovered scope %+v, want epoch 11", s)
		}
	}
	r, err := Open(f.path, f.opts())
	if err != nil {
		t.Fatal(err)
	}
	f.r, f.admin = r, r.Admin()
	if b = f.activate("worker-b", "claim-2", f.patchRequest("raise-retention")); b.grant.Epoch != 11 {
		t.Fatalf("new grant at epoch %d, want 11", b.grant.Epoch)
	}
	if res := f.submit("worker-b", b.envelope); res.Outcome != Applied {
		t.Fatalf("B's write after the recovery: %+v", res)
	}
	f.r.Close()
	f.r = nil
	return f, adm, before, b
}

// spoilNewestSlot overwrites the anchor text of the anchor file's current
// slot, keeping its header, as whoever can write the file can: Load then
// returns the other slot.
func spoilNewestSlot(t *testing.T, anchor audit.FileAnchor) {
	t.Helper()
	rep, err := anchor.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(anchor.Path)
	if err != nil {
		t.Fatal(err)
	}
	off := rep.Slot*audit.AnchorSlotSize + 129
	copy(b[off:off+64], bytes.Repeat([]byte{'x'}, 64))
	if err := os.WriteFile(anchor.Path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := anchor.Load(); err != nil {
		t.Fatalf("the older slot does not load after the damage: %v", err)
	}
}

// Ensure that a lost-anchor admission, once applied, cannot re-admit a
// copy of the database from before its recovery: with the anchor the
// recovery created still there (or any later one), the anchor names the
// admission as consumed; with the anchor deleted too, the admission is
// refused once it has expired on the recovering machine's clock. Every
// refusal leaves the database and the anchor as they were. Within the
// admission's validity, a deleted anchor lets the copy back in, held, as
// SECURITY.md says.
func TestRecover_LostAnchorReplayAgainstPutBackCopy(t *testing.T) {
	for _, tc := range []struct {
		name         string
		deleteAnchor bool
		damageSlot   bool
		after        time.Duration // clock advance after the recovery
		want         error         // nil: the residual, re-admitted
	}{
		{"anchor kept", false, false, 0, audit.ErrAdmissionReplayed},
		{"anchor kept, its newest slot damaged", false, true, 0, audit.ErrAdmissionReplayed},
		{"anchor kept, admission expired", false, false, time.Hour, audit.ErrAdmissionExpired},
		{"anchor deleted, admission expired", true, false, time.Hour, audit.ErrAdmissionExpired},
		{"anchor deleted, admission long expired", true, false, 30 * 24 * time.Hour, audit.ErrAdmissionExpired},
		{"anchor deleted, within the validity", true, false, 59 * time.Minute, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, adm, before, b := replayFixture(t)
			if tc.damageSlot {
				spoilNewestSlot(t, f.anchor)
			}
			if tc.deleteAnchor {
				if err := os.Remove(f.anchor.Path); err != nil {
					t.Fatal(err)
				}
			}
			copyFile(t, before, f.path)
			f.clock.Add(tc.after)
			dbBefore, _ := os.ReadFile(f.path)
			anchorBefore, _ := os.ReadFile(f.anchor.Path)

			res, err := Recover(f.path, adm, f.recoverOpts())
			if tc.want != nil {
				if !errors.Is(err, tc.want) || !IsIntegrityError(err) {
					t.Fatalf("replay: %v, want %v", err, tc.want)
				}
				if b, _ := os.ReadFile(f.path); !bytes.Equal(b, dbBefore) {
					t.Fatal("the refused replay changed the database")
				}
				if b, _ := os.ReadFile(f.anchor.Path); !bytes.Equal(b, anchorBefore) {
					t.Fatal("the refused replay changed the anchor")
				}
				return
			}
			// What remains within the validity when the anchor is deleted
			// as well: the copy is re-admitted with every scope held at
			// the floor plus one again, every grant it knows revoked, and
			// the grant activated after the first recovery unknown to it.
			if err != nil {
				t.Fatalf("replay within the validity: %v", err)
			}
			for _, s := range res.Scopes {
				if s.Epoch != 11 {
					t.Errorf("re-admitted scope %+v, want epoch 11", s)
				}
			}
			r, err := Open(f.path, f.opts())
			if err != nil {
				t.Fatal(err)
			}
			f.r, f.admin = r, r.Admin()
			defer func() { f.r.Close() }()
			if st, err := r.Status(fixScope); err != nil || st.Mode != ModeHeld || st.ActiveGrant != "" {
				t.Fatalf("re-admitted scope: %+v, %v", st, err)
			}
			// B's write is gone with the copy, and B stays fenced: its
			// grant is unknown here, even once epoch 11 is used again
			// by a new grant.
			f.wantTarget(1, fixValue)
			wantDenied(t, f.submit("worker-b", b.envelope), ReasonReceiverHeld)
			if c := f.activate("worker-c", "claim-3", f.patchRequest("raise-retention")); c.grant.Epoch != 11 {
				t.Fatalf("the next grant at epoch %d, want 11 again", c.grant.Epoch)
			}
			if res := f.submit("worker-b", b.envelope); res.Outcome == Applied {
				t.Fatalf("B's envelope applied on the re-admitted copy: %+v", res)
			}
			a, err := f.anchor.Load()
			digest := sha256.Sum256(adm)
			if err != nil || a.Admission.SHA256 != digest {
				t.Fatalf("the new anchor does not name the admission: %+v, %v", a.Admission, err)
			}
		})
	}
}

// Ensure that an ordinary admission, once applied, cannot be replayed
// against a copy put back from before its recovery by damaging the anchor
// file's newest slot, which would otherwise make the older slot, the
// anchor the admission superseded, current again.
func TestRecover_OrdinaryReplayAfterSlotDamage(t *testing.T) {
	withoutDefects(t)
	f, path, anchor, clock := recoverableFixture(t)
	f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	f.r.Close()
	backup := filepath.Join(t.TempDir(), "backup.db")
	copyFile(t, path, backup)
	f.reopen()
	f.hold("incident")
	f.r.Close()
	copyFile(t, backup, path)

	q, err := Inspect(path, anchor)
	if err != nil {
		t.Fatal(err)
	}
	adm := signed(t, recoveryKey, audit.Admission{Receiver: "rcv", SupersededAnchor: q.Anchor, AdmittedHead: q.Head,
		AdmittedState: q.State, At: clock.Now().UnixNano(), Expires: clock.Now().Add(time.Hour).UnixNano(), Reason: "restored"})
	ropts := RecoverOptions{Key: testKey, Anchor: anchor, RecoveryKey: recoveryKey.Public().(ed25519.PublicKey), Now: clock.Now}
	pre := filepath.Join(t.TempDir(), "pre.db")
	copyFile(t, path, pre)
	if _, err := Recover(path, adm, ropts); err != nil {
		t.Fatal(err)
	}
	rep, err := anchor.Inspect()
	if err != nil || rep.Current.Admission.SHA256 != sha256.Sum256(adm) {
		t.Fatalf("anchor after recovery: %+v, %v", rep, err)
	}

	spoilNewestSlot(t, anchor)
	copyFile(t, pre, path)
	dbBefore, _ := os.ReadFile(path)
	anchorBefore, _ := os.ReadFile(anchor.Path)
	if _, err := Recover(path, adm, ropts); !errors.Is(err, audit.ErrAdmissionReplayed) {
		t.Fatalf("replay after damaging the newest slot: %v, want ErrAdmissionReplayed", err)
	}
	if cur, err := anchor.Load(); err != nil || (audit.Head{Seq: cur.Seq, Hash: cur.Head}) == q.Anchor {
		t.Fatalf("the damaged file's current anchor is %v (seq %d), the superseded one", err, cur.Seq)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, dbBefore) {
		t.Fatal("the refused replay changed the database")
	}
	if b, _ := os.ReadFile(anchor.Path); !bytes.Equal(b, anchorBefore) {
		t.Fatal("the refused replay changed the anchor")
	}
}

// Ensure that every checkpoint after a recovery carries the admission it
// consumed, in the database and in the anchor, however many writes
// follow, and that a later recovery with a newer admission replaces it.
func TestRecover_AnchorKeepsConsumedAdmission(t *testing.T) {
	f, adm, _, _ := replayFixture(t)
	want := audit.AdmissionRecord{SHA256: sha256.Sum256(adm)}
	sa, err := audit.ParseSignedAdmission(adm)
	if err != nil {
		t.Fatal(err)
	}
	want.At = sa.At
	r, err := Open(f.path, f.opts())
	if err != nil {
		t.Fatal(err)
	}
	f.r, f.admin = r, r.Admin()
	f.hold("after the recovery")
	f.activate("worker-c", "claim-3", f.patchRequest("raise-retention"))
	f.r.Close()
	f.r = nil
	a, err := f.anchor.Load()
	if err != nil || a.Admission != want {
		t.Fatalf("anchor after later writes names %+v, %v; want %+v", a.Admission, err, want)
	}
	latest, err := func() (audit.SignedCheckpoint, error) {
		r, err := Open(f.path, &Options{ReadOnly: true, anchorUnchecked: true})
		if err != nil {
			return audit.SignedCheckpoint{}, err
		}
		defer r.Close()
		return r.latestSigned()
	}()
	if err != nil || latest.Admission != want {
		t.Fatalf("database's checkpoint names %+v, %v; want %+v", latest.Admission, err, want)
	}

	// A second lost-anchor recovery, later: its admission replaces the
	// record; the first admission stays refused, as older.
	if err := os.Remove(f.anchor.Path); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(time.Minute)
	adm2 := signed(t, recoveryKey, f.lostAnchorAdmission(20))
	if _, err := Recover(f.path, adm2, f.recoverOpts()); err != nil {
		t.Fatal(err)
	}
	if a, err := f.anchor.Load(); err != nil || a.Admission.SHA256 != sha256.Sum256(adm2) {
		t.Fatalf("anchor after the second recovery names %+v, %v", a.Admission, err)
	}
	if _, err := Recover(f.path, adm, f.recoverOpts()); !errors.Is(err, audit.ErrAdmissionReplayed) {
		t.Fatalf("the first admission after a later one: %v, want ErrAdmissionReplayed", err)
	}
}

// Ensure that an admission signed further ahead of the recovering
// machine's clock than audit.MaxAdmissionSkew is refused, changing nothing,
// and one within it is accepted.
func TestRecover_AdmissionFromTheFuture(t *testing.T) {
	f, _ := lostAnchorFixture(t)
	ahead := f.lostAnchorAdmission(10)
	ahead.At += int64(audit.MaxAdmissionSkew + time.Second)
	ahead.Expires = ahead.At + int64(time.Hour)
	if _, err := Recover(f.path, signed(t, recoveryKey, ahead), f.recoverOpts()); !errors.Is(err, audit.ErrAdmissionNotYetValid) {
		t.Fatalf("admission from the future: %v, want ErrAdmissionNotYetValid", err)
	}
	if _, err := f.anchor.Load(); !errors.Is(err, ErrAnchorMissing) {
		t.Fatalf("the refused recovery wrote an anchor: %v", err)
	}
	within := f.lostAnchorAdmission(10)
	within.At += int64(audit.MaxAdmissionSkew)
	within.Expires = within.At + int64(time.Hour)
	if _, err := Recover(f.path, signed(t, recoveryKey, within), f.recoverOpts()); err != nil {
		t.Fatalf("admission within the skew: %v", err)
	}
}

// Ensure that a lost-anchor admission replayed against a put-back copy
// with its new anchor written somewhere else, while the recovery's anchor
// is kept where the receiver reads it, gains nothing: the receiver opened
// with its own anchor refuses the copy as a rollback or fork.
func TestRecover_ReplayToAnotherAnchorPath(t *testing.T) {
	f, adm, before, _ := replayFixture(t)
	copyFile(t, before, f.path)
	elsewhere := audit.FileAnchor{Path: filepath.Join(t.TempDir(), "elsewhere.anchor")}
	opts := f.recoverOpts()
	opts.Anchor = elsewhere
	if _, err := Recover(f.path, adm, opts); err != nil {
		t.Fatalf("replay with a fresh anchor path: %v", err)
	}
	_, err := Open(f.path, f.opts())
	if !errors.Is(err, ErrRollbackDetected) && !errors.Is(err, ErrForkDetected) {
		t.Fatalf("Open with the receiver's own anchor after the replay: %v, want a rollback or fork", err)
	}
}
