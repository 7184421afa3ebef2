package kvfence

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// lostAnchorFixture is a receiver with a recovery key, the fixture scope
// open with worker A's grant, a second scope held twice (epoch 3), and
// then its anchor deleted. The receiver is closed.
func lostAnchorFixture(t *testing.T) (*fixture, worker) {
	t.Helper()
	dir := t.TempDir()
	clock := newClock()
	f := &fixture{t: t, path: filepath.Join(dir, "r.db"), clock: clock, ctx: t.Context(),
		anchor: audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}}
	if err := Init(f.path, &InitOptions{ReceiverID: "rcv", Key: testKey, Anchor: f.anchor,
		RecoveryKey: recoveryKey.Public().(ed25519.PublicKey), Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	r, err := Open(f.path, f.opts())
	if err != nil {
		t.Fatal(err)
	}
	f.r, f.admin = r, r.Admin()
	for _, s := range []string{fixScope, "second"} {
		if _, err := f.admin.CreateScope(f.ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.admin.CreateTarget(f.ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{"second"}, Reason: "drill"}); err != nil {
			t.Fatal(err)
		}
	}
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	f.r.Close()
	f.r = nil
	if err := os.Remove(f.anchor.Path); err != nil {
		t.Fatal(err)
	}
	return f, a
}

// signed returns the encoded admission a signed with key.
func signed(t *testing.T, key ed25519.PrivateKey, a audit.Admission) []byte {
	t.Helper()
	sa, err := audit.SignAdmission(key, a)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sa.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// lostAnchorAdmission is a lost-anchor admission for exactly what
// InspectDatabase reports of f, with epoch floor floor.
func (f *fixture) lostAnchorAdmission(floor uint64) audit.Admission {
	f.t.Helper()
	q, err := InspectDatabase(f.path)
	if err != nil {
		f.t.Fatal(err)
	}
	return audit.Admission{Receiver: q.Receiver, LostAnchor: true, AdmittedHead: q.Head, AdmittedState: q.State, EpochFloor: floor,
		At: f.clock.Now().UnixNano(), Expires: f.clock.Now().Add(time.Hour).UnixNano(), Reason: "anchor volume lost"}
}

func (f *fixture) recoverOpts() RecoverOptions {
	return RecoverOptions{Key: testKey, Anchor: f.anchor, RecoveryKey: recoveryKey.Public().(ed25519.PublicKey), Now: f.clock.Now}
}

// Ensure that a receiver whose anchor was deleted is refused, and that a
// lost-anchor admission signed by the recovery key re-anchors it: every
// scope held above the database's high-water, its own epoch and the
// admission's floor, every grant revoked, a "reanchored" entry naming the
// admission, a new anchor, and a chain that verifies.
func TestRecover_LostAnchor(t *testing.T) {
	for _, tc := range []struct {
		name       string
		floor      uint64
		wantEpochs map[string]uint64 // database high-water is 3
	}{
		{"no floor", 0, map[string]uint64{fixScope: 4, "second": 4}},
		{"floor below the high-water", 2, map[string]uint64{fixScope: 4, "second": 4}},
		{"floor above the high-water", 40, map[string]uint64{fixScope: 41, "second": 41}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, a := lostAnchorFixture(t)
			if _, err := Open(f.path, f.opts()); !errors.Is(err, ErrAnchorMissing) {
				t.Fatalf("Open without its anchor = %v, want ErrAnchorMissing", err)
			}
			if _, err := Inspect(f.path, f.anchor); !errors.Is(err, ErrAnchorMissing) {
				t.Fatalf("Inspect without its anchor = %v, want ErrAnchorMissing", err)
			}
			q, err := InspectDatabase(f.path)
			if err != nil {
				t.Fatal(err)
			}
			if q.Receiver != "rcv" || q.Head.Seq == 0 || q.Anchor != (audit.Head{}) || q.DatabaseEpochHighWater != 3 {
				t.Fatalf("InspectDatabase = %+v", q)
			}
			adm := signed(t, recoveryKey, f.lostAnchorAdmission(tc.floor))
			res, err := Recover(f.path, adm, f.recoverOpts())
			if err != nil {
				t.Fatalf("Recover: %v", err)
			}
			if !res.LostAnchor || res.AuditSeq != q.Head.Seq+1 || res.Anchor.Seq != res.AuditSeq ||
				res.GrantsRevoked != 1 || len(res.Scopes) != 2 {
				t.Fatalf("Recover = %+v", res)
			}
			for _, s := range res.Scopes {
				if s.Epoch != tc.wantEpochs[s.Scope] {
					t.Errorf("scope %s at epoch %d, want %d", s.Scope, s.Epoch, tc.wantEpochs[s.Scope])
				}
			}

			r, err := Open(f.path, f.opts())
			if err != nil {
				t.Fatalf("Open after the lost-anchor recovery: %v", err)
			}
			f.r, f.admin = r, r.Admin()
			for scope, want := range tc.wantEpochs {
				st, err := f.r.Status(scope)
				if err != nil || st.Mode != ModeHeld || st.ActiveGrant != "" || st.Epoch != want {
					t.Fatalf("status of %s: %+v, %v", scope, st, err)
				}
			}
			g, err := f.r.Grant(a.grant.ID)
			if err != nil || g.RevokedSeq != res.AuditSeq {
				t.Fatalf("A's grant after recovery: %+v, %v; want revoked at %d", g, err, res.AuditSeq)
			}
			var last Event
			f.r.Events(res.AuditSeq, func(e Event) bool { last = e; return true })
			if last.Kind != KindReanchored || !strings.Contains(last.Note, "admission sha256 ") ||
				!strings.Contains(last.Note, "anchor volume lost") || last.Epoch != tc.wantEpochs[fixScope] {
				t.Fatalf("recovery entry: %+v", last.Entry)
			}
			wantDenied(t, f.submit("worker-a", a.envelope), ReasonReceiverHeld)
			f.activate("worker-b", "claim-2", f.patchRequest("raise-retention"))
			wantDenied(t, f.submit("worker-a", a.envelope), ReasonStaleEpoch)
			f.wantTarget(1, fixValue)
			checkChain(t, f.r)
			f.r.Close()
			rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
			if err != nil || !rep.OK() {
				t.Fatalf("VerifyChain after recovery = %+v, %v", rep, err)
			}
		})
	}
}

// Ensure that a lost-anchor admission works once: presented again while
// the new anchor exists it is refused, because the anchor names it as
// consumed, and after the anchor is deleted again it is refused too,
// because the database's own checkpoint names it (and its head has moved
// past the one it names). Neither refusal changes anything.
func TestRecover_LostAnchorNotReplayable(t *testing.T) {
	f, _ := lostAnchorFixture(t)
	adm := signed(t, recoveryKey, f.lostAnchorAdmission(10))
	if _, err := Recover(f.path, adm, f.recoverOpts()); err != nil {
		t.Fatal(err)
	}
	anchorAfter, _ := os.ReadFile(f.anchor.Path)
	q, _ := InspectDatabase(f.path)

	_, err := Recover(f.path, adm, f.recoverOpts())
	if !errors.Is(err, audit.ErrAdmissionReplayed) || !IsIntegrityError(err) {
		t.Fatalf("replay with the anchor present: %v, want ErrAdmissionReplayed", err)
	}
	if b, _ := os.ReadFile(f.anchor.Path); !bytes.Equal(b, anchorAfter) {
		t.Fatal("the refused replay changed the anchor")
	}
	if err := os.Remove(f.anchor.Path); err != nil {
		t.Fatal(err)
	}
	if _, err := Recover(f.path, adm, f.recoverOpts()); !errors.Is(err, audit.ErrAdmissionReplayed) || errors.Is(err, ErrAnchorPresent) {
		t.Fatalf("replay after deleting the anchor again: %v, want ErrAdmissionReplayed", err)
	}
	if q2, _ := InspectDatabase(f.path); q2 != q {
		t.Fatalf("a refused replay changed the database: %+v, was %+v", q2, q)
	}
	if _, err := f.anchor.Load(); !errors.Is(err, ErrAnchorMissing) {
		t.Fatalf("a refused replay wrote an anchor: %v", err)
	}
}

// Ensure that a lost-anchor recovery is refused, changing nothing, unless
// the admission is a lost-anchor one signed by the recovery key recorded
// at init for exactly this receiver and head, and the anchor is missing;
// an ordinary admission is no substitute, nor the reverse.
func TestRecover_LostAnchorRefusals(t *testing.T) {
	f, _ := lostAnchorFixture(t)
	good := f.lostAnchorAdmission(10)
	otherHead, otherHash, otherReceiver := good, good, good
	otherHead.AdmittedHead.Seq--
	otherHash.AdmittedHead.Hash[0] ^= 1
	otherReceiver.Receiver = "other"
	ordinary := good
	ordinary.LostAnchor, ordinary.EpochFloor, ordinary.SupersededAnchor = false, 0, good.AdmittedHead
	receiverPub := testKey.Public().(ed25519.PublicKey)
	withKey := func(k ed25519.PublicKey) RecoverOptions { o := f.recoverOpts(); o.RecoveryKey = k; return o }

	for name, tc := range map[string]struct {
		raw  []byte
		opts RecoverOptions
		want error
	}{
		"signed by the receiver key": {signed(t, testKey, good), f.recoverOpts(), audit.ErrBadSignature},
		"signed by the receiver key, verified with it": {signed(t, testKey, good), withKey(receiverPub),
			ErrRecoveryKeyIsReceiverKey},
		"another head seq":              {signed(t, recoveryKey, otherHead), f.recoverOpts(), audit.ErrAdmissionMismatch},
		"another head hash":             {signed(t, recoveryKey, otherHash), f.recoverOpts(), audit.ErrAdmissionMismatch},
		"another receiver":              {signed(t, recoveryKey, otherReceiver), f.recoverOpts(), audit.ErrAdmissionMismatch},
		"ordinary admission, no anchor": {signed(t, recoveryKey, ordinary), f.recoverOpts(), ErrAnchorMissing},
	} {
		if _, err := Recover(f.path, tc.raw, tc.opts); !errors.Is(err, tc.want) {
			t.Errorf("%s: Recover = %v, want %v", name, err, tc.want)
		}
	}
	// Another signer's bytes under the recovery key's name: a lost-anchor
	// body with an ordinary admission's signature.
	sa, _ := audit.SignAdmission(recoveryKey, ordinary)
	forged := sa
	forged.Admission = good
	raw, _ := forged.Marshal()
	if _, err := Recover(f.path, raw, f.recoverOpts()); !errors.Is(err, audit.ErrBadSignature) {
		t.Errorf("ordinary signature on a lost-anchor body: %v", err)
	}

	// A damaged anchor file is evidence: refused, and left as it is.
	damaged := bytes.Repeat([]byte{0x5a}, audit.AnchorFileSize)
	if err := os.WriteFile(f.anchor.Path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Recover(f.path, signed(t, recoveryKey, good), f.recoverOpts()); !errors.Is(err, audit.ErrBadAnchor) ||
		!strings.Contains(err.Error(), "move it aside") {
		t.Errorf("damaged anchor: %v, want ErrBadAnchor", err)
	}
	if b, _ := os.ReadFile(f.anchor.Path); !bytes.Equal(b, damaged) {
		t.Fatal("Recover changed a damaged anchor file")
	}
	if err := os.Rename(f.anchor.Path, f.anchor.Path+".damaged"); err != nil {
		t.Fatal(err)
	}

	// A valid anchor, even one that the database disagrees with, is not
	// lost: the ordinary admission is the way.
	if err := f.anchor.Store(nil, mustInitCheckpoint(t, f)); err != nil {
		t.Fatal(err)
	}
	if _, err := Recover(f.path, signed(t, recoveryKey, good), f.recoverOpts()); !errors.Is(err, ErrAnchorPresent) {
		t.Errorf("lost-anchor admission with an anchor present: %v, want ErrAnchorPresent", err)
	}
	if err := os.Remove(f.anchor.Path); err != nil {
		t.Fatal(err)
	}

	if q, _ := InspectDatabase(f.path); q.Head != good.AdmittedHead {
		t.Fatalf("refused admissions changed the database: head %v, was %v", q.Head, good.AdmittedHead)
	}
	if _, err := Recover(f.path, signed(t, recoveryKey, good), f.recoverOpts()); err != nil {
		t.Fatalf("the good admission after all refusals: %v", err)
	}
}

// mustInitCheckpoint returns a valid checkpoint of f's receiver at its
// first entry, as an old anchor would hold.
func mustInitCheckpoint(t *testing.T, f *fixture) audit.SignedCheckpoint {
	t.Helper()
	var first Event
	r, err := open(f.path, &Options{ReadOnly: true}, defect.Variant{SkipAnchor: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Events(1, func(e Event) bool { first = e; return false })
	sc, err := audit.Sign(testKey, audit.Checkpoint{Receiver: "rcv", Seq: 1, Root: audit.Hash{0x7e}, Head: first.Hash, At: first.At})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// Ensure that a grant record marked revoked by a recovery is refused by
// Submit even if the scope names it as active at its epoch again, which
// only a database edited behind the receiver's back could show: the
// revocation holds in the record, not only in the epoch arithmetic.
func TestSubmit_RevokedGrant(t *testing.T) {
	f, a := lostAnchorFixture(t)
	if _, err := Recover(f.path, signed(t, recoveryKey, f.lostAnchorAdmission(0)), f.recoverOpts()); err != nil {
		t.Fatal(err)
	}
	r, err := Open(f.path, f.opts())
	if err != nil {
		t.Fatal(err)
	}
	f.r = r
	defer r.Close()
	err = f.r.exec(0, func(w *wtx) error {
		ctl, err := w.control(fixScope)
		if err != nil {
			return err
		}
		ctl.Epoch, ctl.Mode, ctl.ActiveGrant = a.grant.Epoch, ModeOpen, a.grant.ID
		return w.putControl(fixScope, ctl)
	})
	if err != nil {
		t.Fatal(err)
	}
	res := f.submit("worker-a", a.envelope)
	wantDenied(t, res, ReasonUnknownGrant)
	if !strings.Contains(res.Detail, "revoked by the recovery") {
		t.Fatalf("denial detail %q does not name the revocation", res.Detail)
	}
	f.wantTarget(1, fixValue)
}
