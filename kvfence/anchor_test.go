package kvfence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

var recoveryKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32))

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// restoredFixture runs the paused-worker schedule, keeping a copy of the
// database from before the hold, and then restores that copy over the
// current database (the anchor stays where it is). It returns worker A's
// envelope, valid under the restored copy's state.
func restoredFixture(t *testing.T) (*fixture, worker) {
	return pausedWorkerCopy(t, func(live, backup string) { copyFile(t, backup, live) })
}

// pausedWorkerCopy runs the paused-worker schedule, keeping a copy of the
// database from while worker A's grant was active; after the hold and B's
// write it closes the receiver and calls restore with the live database's
// path and the copy's. It returns A's envelope.
func pausedWorkerCopy(t *testing.T, restore func(live, backup string)) (*fixture, worker) {
	t.Helper()
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	backup := filepath.Join(t.TempDir(), "pre-hold.db")
	f.r.Close()
	copyFile(t, f.path, backup)
	f.reopen()
	f.hold("worker-a lease expired")
	b := f.activate("worker-b", "claim-2", f.patchRequest("raise-retention"))
	if res := f.submit("worker-b", b.envelope); res.Outcome != Applied {
		t.Fatalf("worker B: %+v", res)
	}
	f.r.Close()
	restore(f.path, backup)
	return f, a
}

// Ensure that a pre-hold copy of the database restored over the current one
// is refused at open and by VerifyChain, so the old grant cannot be used.
func TestOpen_RestoredDatabaseIsRollback(t *testing.T) {
	f, a := restoredFixture(t)
	_, err := Open(f.path, f.opts())
	if !errors.Is(err, ErrRollbackDetected) {
		t.Fatalf("Open(restored) = %v, want ErrRollbackDetected", err)
	}
	if !IsIntegrityError(err) {
		t.Fatalf("rollback is not an integrity error: %v", err)
	}
	rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Problem != audit.ProblemRollbackDetected {
		t.Fatalf("VerifyChain = %+v, want rollback_detected", rep)
	}

	// The counterexample, kept on purpose: without the anchor check the
	// restored copy accepts A's old grant.
	v, err := open(f.path, &Options{Key: testKey, Now: f.clock.Now}, defect.Variant{SkipAnchor: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.Submit(f.ctx, "worker-a", a.envelope)
	v.Close()
	if err != nil || res.Outcome != Applied {
		t.Fatalf("restored copy without anchor check: %+v, %v; the rollback test cannot go red without the anchor", res, err)
	}
	f.r = mustOpenSkip(t, f) // for the fixture's cleanup
}

// recoverableFixture initialises a receiver, with a recovery key, in its
// own directory with the fixture scope and target, and returns it open with
// its database path, anchor and clock. Unlike newFixture it leaves closing
// to the test, which restores and recovers the file.
func recoverableFixture(t *testing.T) (f *fixture, path string, anchor audit.FileAnchor, clock *testClock) {
	t.Helper()
	dir := t.TempDir()
	clock = newClock()
	path, anchor = filepath.Join(dir, "r.db"), audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}
	if err := Init(path, &InitOptions{ReceiverID: "rcv", Key: testKey, Anchor: anchor,
		RecoveryKey: recoveryKey.Public().(ed25519.PublicKey), Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	f = &fixture{t: t, path: path, clock: clock, ctx: t.Context(), anchor: anchor}
	r, err := Open(path, f.opts())
	if err != nil {
		t.Fatal(err)
	}
	f.r, f.admin = r, r.Admin()
	if _, err := f.admin.CreateScope(f.ctx, fixScope); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.CreateTarget(f.ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
		t.Fatal(err)
	}
	return f, path, anchor, clock
}

func mustOpenSkip(t *testing.T, f *fixture) *Receiver {
	t.Helper()
	r, err := open(f.path, &Options{Key: testKey, Now: f.clock.Now}, defect.Variant{SkipAnchor: true})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Ensure that recovery needs an admission signed by the recovery key for
// this receiver, anchor and head, and that afterwards the restored copy
// opens normally but cannot use the old grant. Recover and Inspect open
// without the anchor check as a normal mode, not as a defect, so the test
// runs as a build without the lab tag does.
func TestRecover(t *testing.T) {
	withoutDefects(t)
	f, path, anchor, clock := recoverableFixture(t)
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	f.r.Close()
	backup := filepath.Join(t.TempDir(), "backup.db")
	copyFile(t, path, backup)
	f.reopen()
	f.hold("incident")
	f.hold("incident again") // epoch 3
	f.r.Close()
	copyFile(t, backup, path)

	q, err := Inspect(path, anchor)
	if err != nil {
		t.Fatal(err)
	}
	if q.Head.Seq >= q.Anchor.Seq || q.EpochHighWater != 3 {
		t.Fatalf("Inspect = %+v", q)
	}
	admission := func(key ed25519.PrivateKey, a audit.Admission) []byte {
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
	good := audit.Admission{Receiver: "rcv", SupersededAnchor: q.Anchor, AdmittedHead: q.Head, AdmittedState: q.State, At: clock.Now().UnixNano(), Expires: clock.Now().Add(time.Hour).UnixNano(), Reason: "restored from backup"}
	ropts := RecoverOptions{Key: testKey, Anchor: anchor, RecoveryKey: recoveryKey.Public().(ed25519.PublicKey), Now: clock.Now}
	otherHead := good
	otherHead.AdmittedHead.Seq++
	otherAnchor := good
	otherAnchor.SupersededAnchor.Hash[0] ^= 1
	otherReceiver := good
	otherReceiver.Receiver = "other"
	for name, tc := range map[string]struct {
		raw  []byte
		want error
	}{
		"signed by the receiver key": {admission(testKey, good), audit.ErrBadSignature},
		"another head":               {admission(recoveryKey, otherHead), audit.ErrAdmissionMismatch},
		"another anchor":             {admission(recoveryKey, otherAnchor), audit.ErrAdmissionMismatch},
		"another receiver":           {admission(recoveryKey, otherReceiver), audit.ErrAdmissionMismatch},
		"garbage":                    {[]byte("not an admission"), audit.ErrBadAdmission},
	} {
		if _, err := Recover(path, tc.raw, ropts); !errors.Is(err, tc.want) {
			t.Errorf("%s: Recover = %v, want %v", name, err, tc.want)
		}
	}
	if _, err := Open(path, f.opts()); !errors.Is(err, ErrRollbackDetected) {
		t.Fatalf("refused admissions changed something: Open = %v", err)
	}

	res, err := Recover(path, admission(recoveryKey, good), ropts)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if len(res.Scopes) != 1 || res.Scopes[0].Epoch != 4 || res.LostAnchor || res.GrantsRevoked != 1 {
		t.Fatalf("recover result %+v, want the scope at epoch 4 and A's grant revoked", res)
	}
	r, err := Open(path, f.opts())
	if err != nil {
		t.Fatalf("Open after recovery: %v", err)
	}
	f.r, f.admin = r, r.Admin()
	if g, err := f.r.Grant(a.grant.ID); err != nil || g.RevokedSeq != res.AuditSeq {
		t.Fatalf("A's grant after recovery: %+v, %v", g, err)
	}
	wantDenied(t, f.submit("worker-a", a.envelope), ReasonReceiverHeld)
	st, _ := f.r.Status(fixScope)
	if st.Mode != ModeHeld || st.ActiveGrant != "" || st.Epoch != 4 {
		t.Fatalf("status after recovery: %+v", st)
	}
	// Even a fresh activation leaves the old grant unusable.
	f.activate("worker-b", "claim-2", f.patchRequest("raise-retention"))
	wantDenied(t, f.submit("worker-a", a.envelope), ReasonStaleEpoch)
	checkChain(t, f.r)
	f.r.Close()
	rep, err := VerifyChain(path, VerifyOptions{Anchor: anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil || !rep.OK() {
		t.Fatalf("VerifyChain after recovery = %+v, %v", rep, err)
	}
}

// failingAnchor fails its next Store, as a crash between the database commit
// and the anchor write would leave things.
type failingAnchor struct {
	audit.AnchorStore
	fail bool
}

func (a *failingAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	if a.fail {
		a.fail = false
		return errors.New("injected crash before the anchor write")
	}
	return a.AnchorStore.Store(old, next)
}

// Ensure that a database ahead of its anchor by a crash window is not a
// false alarm: it opens and the anchor catches up.
func TestOpen_CrashBetweenCommitAndAnchor(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	fa := &failingAnchor{AnchorStore: f.anchor}
	f.r.opts.Anchor = fa
	a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
	fa.fail = true
	if _, err := f.r.Submit(f.ctx, "worker-a", a.envelope); err == nil {
		t.Fatal("Submit acknowledged a write its anchor does not cover")
	}
	f.wantTarget(2, fixAfter) // committed, not acknowledged
	f.reopen()
	anc, err := f.anchor.Load()
	if err != nil {
		t.Fatal(err)
	}
	if head := f.r.Head(); anc.Seq != head.Seq || anc.Head != head.Hash {
		t.Fatalf("anchor %d not refreshed to head %v", anc.Seq, head)
	}
	if res := f.submit("worker-a", a.envelope); res.Outcome != AlreadyApplied {
		t.Fatalf("retry after the crash: %+v, want already_applied", res)
	}
}

// Ensure that a missing anchor is refused and not recreated, and that a
// wrong key or another receiver's anchor is refused.
func TestOpen_AnchorRefusals(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.r.Close()
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))

	saved, err := os.ReadFile(f.anchor.Path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(f.path, &Options{Key: other, Anchor: f.anchor}); !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("Open with another key = %v, want ErrKeyMismatch", err)
	}
	if _, err := Open(f.path, &Options{Key: testKey}); !errors.Is(err, ErrNoAnchor) {
		t.Fatalf("Open without an anchor = %v, want ErrNoAnchor", err)
	}

	// Another receiver's anchor, validly signed by the same key.
	dir := t.TempDir()
	otherAnchor := audit.FileAnchor{Path: filepath.Join(dir, "other.anchor")}
	if err := Init(filepath.Join(dir, "other.db"), &InitOptions{ReceiverID: "someone-else", Key: testKey, Anchor: otherAnchor}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(f.path, &Options{Key: testKey, Anchor: otherAnchor}); !errors.Is(err, ErrReceiverMismatch) {
		t.Fatalf("Open with another receiver's anchor = %v, want ErrReceiverMismatch", err)
	}

	if err := os.Remove(f.anchor.Path); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(f.path, f.opts()); !errors.Is(err, ErrAnchorMissing) {
		t.Fatalf("Open without its anchor file = %v, want ErrAnchorMissing", err)
	}
	if _, err := os.Stat(f.anchor.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("Open recreated a missing anchor")
	}
	if err := os.WriteFile(f.anchor.Path, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	f.reopen()
}

// Ensure that two histories grown from one copy are reported as a fork.
func TestOpen_Fork(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.r.Close()
	backup := filepath.Join(t.TempDir(), "copy.db")
	copyFile(t, f.path, backup)
	f.reopen()
	f.hold("history one")
	f.r.Close()

	// History two: the copy, written by a receiver that ignores its anchor,
	// to the same length with other entries.
	copyFile(t, backup, f.path)
	v, err := open(f.path, &Options{Key: testKey, Now: f.clock.Now}, defect.Variant{SkipAnchor: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Admin().Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "history two"}); err != nil {
		t.Fatal(err)
	}
	v.Close()
	if _, err := Open(f.path, f.opts()); !errors.Is(err, ErrForkDetected) {
		t.Fatalf("Open(fork) = %v, want ErrForkDetected", err)
	}
	rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil || rep.Problem != audit.ProblemForkDetected {
		t.Fatalf("VerifyChain(fork) = %+v, %v", rep, err)
	}
	f.r = mustOpenSkip(t, f)
	f.r.opts.Anchor = nil
}

// Ensure that a receiver whose Init died between its commit and its first
// anchor write can be opened (the anchor is written from the database's
// own init checkpoint), and that once anything else was recorded a missing
// anchor is refused again.
func TestOpen_InitCrashWindow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.db")
	anchor := audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}
	if err := Init(path, &InitOptions{ReceiverID: "r", Key: testKey, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	first, err := anchor.Load()
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(anchor.Path) // as if Init had been killed before writing it
	if _, err := Open(path, &Options{ReadOnly: true, Anchor: anchor}); !errors.Is(err, ErrAnchorMissing) {
		t.Fatalf("read-only Open of an unanchored fresh receiver = %v, want ErrAnchorMissing", err)
	}
	r, err := Open(path, &Options{Key: testKey, Anchor: anchor})
	if err != nil {
		t.Fatalf("Open after an interrupted Init: %v", err)
	}
	if got, err := anchor.Load(); err != nil || got != first {
		t.Fatalf("anchor after Open = %v, %v; want the init checkpoint", got, err)
	}
	if _, err := r.Admin().CreateScope(context.Background(), "s"); err != nil {
		t.Fatal(err)
	}
	r.Close()
	os.Remove(anchor.Path)
	if _, err := Open(path, &Options{Key: testKey, Anchor: anchor}); !errors.Is(err, ErrAnchorMissing) {
		t.Fatalf("Open of a receiver with history and no anchor = %v, want ErrAnchorMissing", err)
	}
}

// TestOpen_InitCrashWindowOnlyAtInitsAnchor: the first anchor that Init
// could not write is written by a later Open only where Init was told to
// put it. A mistyped anchor path at seq 1 also holds no anchor, and
// writing one there would hide the mistake behind a working receiver.
func TestOpen_InitCrashWindowOnlyAtInitsAnchor(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.db")
	anchor := audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}
	if err := Init(path, &InitOptions{ReceiverID: "r", Key: testKey, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	typo := audit.FileAnchor{Path: filepath.Join(dir, "r.ancor")}
	_, err := Open(path, &Options{Key: testKey, Anchor: typo})
	if !errors.Is(err, ErrAnchorMissing) || !strings.Contains(err.Error(), anchor.Path) {
		t.Fatalf("Open with a mistyped anchor = %v, want ErrAnchorMissing naming %s", err, anchor.Path)
	}
	if _, err := os.Stat(typo.Path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("an anchor was created at the mistyped path: %v", err)
	}
	// The same file named by a relative path is the same anchor.
	t.Chdir(dir)
	os.Remove(anchor.Path)
	r, err := Open(path, &Options{Key: testKey, Anchor: audit.FileAnchor{Path: "r.anchor"}})
	if err != nil {
		t.Fatalf("Open after an interrupted Init, anchor named relatively: %v", err)
	}
	r.Close()
	if _, err := anchor.Load(); err != nil {
		t.Fatalf("the first anchor was not written: %v", err)
	}
}
