package kvfence

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/witnesstest"
	"github.com/kvfence/kvfence/witness"
)

// restoredWitnessed is a receiver with a recovery key, cosigned by three
// witnesses (quorum 2), whose database and anchor were restored together
// from before a hold: the witnesses hold the newer tree. The receiver is
// closed. backupSizes are the witnesses' checkpoints when the backup was
// taken.
type restoredWitnessed struct {
	*witnessedFixture
	backup []audit.WitnessedCheckpoint
	grant  worker
}

func newRestoredWitnessed(t *testing.T, trustRecovery []bool) *restoredWitnessed {
	t.Helper()
	set, err := witnesstest.Start(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	pub := testKey.Public().(ed25519.PublicKey)
	if err := set.TrustReceiver("rcv", pub); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := &fixture{t: t, path: filepath.Join(dir, "r.db"), clock: &testClock{now: time.Now().UTC()}, ctx: t.Context(),
		anchor: audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}}
	if err := Init(f.path, &InitOptions{ReceiverID: "rcv", Key: testKey, Anchor: f.anchor,
		RecoveryKey: recoveryKey.Public().(ed25519.PublicKey), Now: f.clock.Now}); err != nil {
		t.Fatal(err)
	}
	rw := &restoredWitnessed{witnessedFixture: &witnessedFixture{fixture: f, set: set}}
	origin := rw.originOf(pub)
	for i, w := range set.Witnesses {
		if trustRecovery[i] {
			if err := w.TrustRecovery(origin, recoveryKey.Public().(ed25519.PublicKey)); err != nil {
				t.Fatal(err)
			}
		}
	}
	rw.reopenWitnessed()
	if _, err := f.admin.CreateScope(f.ctx, fixScope); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.CreateTarget(f.ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
		t.Fatal(err)
	}
	rw.grant = f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	f.r.Close()
	backupDB, backupAnchor := filepath.Join(dir, "backup.db"), filepath.Join(dir, "backup.anchor")
	copyFile(t, f.path, backupDB)
	copyFile(t, f.anchor.Path, backupAnchor)
	rw.backup = rw.witnessed()
	rw.reopenWitnessed()
	f.hold("worker-a paused; replaced")
	f.r.Close()
	copyFile(t, backupDB, f.path)
	copyFile(t, backupAnchor, f.anchor.Path)
	f.r = nil
	return rw
}

func (rw *restoredWitnessed) originOf(pub ed25519.PublicKey) string {
	r := &Receiver{id: "rcv", pub: pub}
	cp, err := r.noteCheckpoint(audit.SignedCheckpoint{})
	if err != nil {
		rw.t.Fatal(err)
	}
	return cp.Origin
}

func (rw *restoredWitnessed) reopenWitnessed() {
	rw.t.Helper()
	r, err := rw.open()
	if err != nil {
		rw.t.Fatalf("open with witnesses: %v", err)
	}
	rw.r, rw.admin = r, r.Admin()
}

// witnessed is every witness's latest checkpoint of the receiver, as an
// admission names them.
//
// A round that reached K cancels the other requests, and a witness may
// still commit one after the receiver returned: the states are read until
// two reads 100ms apart agree.
func (rw *restoredWitnessed) witnessed() []audit.WitnessedCheckpoint {
	rw.t.Helper()
	prev := rw.readWitnessed()
	for {
		time.Sleep(100 * time.Millisecond)
		cur := rw.readWitnessed()
		if equalWitnessed(cur, prev) {
			return cur
		}
		prev = cur
	}
}

func (rw *restoredWitnessed) readWitnessed() []audit.WitnessedCheckpoint {
	rw.t.Helper()
	var out []audit.WitnessedCheckpoint
	for _, w := range rw.set.Witnesses {
		st, err := w.Log(rw.originOf(testKey.Public().(ed25519.PublicKey)))
		if err != nil {
			rw.t.Fatal(err)
		}
		out = append(out, audit.WitnessedCheckpoint{Witness: w.Name, Size: st.Size, Root: audit.Hash(st.Root)})
	}
	return out
}

// admission is an ordinary admission of the restored database, naming
// named.
func (rw *restoredWitnessed) admission(named []audit.WitnessedCheckpoint) []byte {
	rw.t.Helper()
	q, err := Inspect(rw.path, rw.anchor)
	if err != nil {
		rw.t.Fatal(err)
	}
	now := rw.clock.Now()
	var root audit.Hash
	if len(named) > 0 {
		root = q.Root
	}
	return signed(rw.t.(*testing.T), recoveryKey, audit.Admission{Receiver: q.Receiver, SupersededAnchor: q.Anchor, AdmittedHead: q.Head,
		AdmittedState: q.State, At: now.UnixNano(), Expires: now.Add(time.Hour).UnixNano(), Reason: "restored from backup", Witnessed: named,
		AdmittedRoot: root})
}

func (rw *restoredWitnessed) recoverOpts() RecoverOptions {
	o := rw.fixture.recoverOpts()
	ms, err := rw.set.Members(nil)
	if err != nil {
		rw.t.Fatal(err)
	}
	o.Witnesses, o.WitnessQuorum, o.WitnessTimeout = ms, 2, 5*time.Second
	return o
}

// Ensure that a receiver restored with its anchor, which its witnesses
// refuse, is recovered by an admission naming what the witnesses hold
// now: Recover applies it, Open accepts the witnesses still on the
// superseded tree, the next write is acknowledged by K witnesses that
// accepted the admission at their recovery endpoint (keeping it in their
// history), and the writes after it are cosigned as usual.
func TestRecoverWitnessed(t *testing.T) {
	rw := newRestoredWitnessed(t, []bool{true, true, true})
	if _, err := rw.open(); !errors.Is(err, ErrRollbackDetected) {
		t.Fatalf("restored pair opened: %v", err)
	}
	now := rw.witnessed()
	if _, err := Recover(rw.path, rw.admission(now), rw.recoverOpts()); err != nil {
		t.Fatalf("recover: %v", err)
	}
	// Every witness is still on the superseded tree, excused only as
	// the admission names it: N-K+1 answers are still needed.
	rw.set.Witnesses[0].Down()
	rw.set.Witnesses[1].Down()
	if _, err := rw.open(); !errors.Is(err, ErrWitnessAnswers) {
		t.Fatalf("open after the recovery with one witness of three up: %v, want ErrWitnessAnswers", err)
	}
	rw.set.Witnesses[0].Up()
	rw.set.Witnesses[1].Up()
	rw.reopenWitnessed()
	// The grant from before the recovery is revoked, and the hold that
	// the recovery makes is acknowledged by two witnesses.
	if res := rw.submit("worker-a", rw.grant.envelope); res.Outcome == Applied {
		t.Fatalf("the old grant applied after the recovery")
	}
	if _, err := rw.admin.Hold(rw.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "after recovery"}); err != nil {
		t.Fatalf("first write after the recovery: %v", err)
	}
	head := rw.r.head.Seq
	recovered := 0
	for _, w := range rw.set.Witnesses {
		st, err := w.Log(rw.originOf(testKey.Public().(ed25519.PublicKey)))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size == head && len(st.Recoveries) == 1 {
			recovered++
		}
	}
	if recovered < 2 {
		t.Fatalf("%d witnesses accepted the recovery at the head %d, want 2", recovered, head)
	}
	for i := range 3 {
		if _, err := rw.admin.Hold(rw.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "later"}); err != nil {
			t.Fatalf("write %d after the recovery: %v", i, err)
		}
	}
	// Reopened (a restart), the receiver checks the witnesses as usual.
	rw.r.Close()
	rw.reopenWitnessed()
	// VerifyChain with the witnesses agrees.
	rw.r.Close()
	ms, _ := rw.set.Members(nil)
	rep, err := VerifyChain(rw.path, VerifyOptions{Anchor: rw.anchor, PublicKey: testKey.Public().(ed25519.PublicKey), Witnesses: ms, WitnessQuorum: 2})
	if err != nil || !rep.OK() {
		t.Fatalf("verify-chain after the recovery: %v, %v", rep.Problem, err)
	}
	rw.reopenWitnessed()
}

// Ensure that Recover with witnesses refuses an admission that names a
// witness at an older checkpoint than it holds, or omits a witness that
// answered, naming the witness; that a witnessed admission is refused
// without the witnesses, and with too few of them answering; and that
// none of these changes the database.
func TestRecoverWitnessedRefused(t *testing.T) {
	rw := newRestoredWitnessed(t, []bool{true, true, true})
	now := rw.witnessed()
	// The hold moved at least K=2 witnesses past the backup; the first of
	// them is the one an admission naming the backup's checkpoints fails on.
	moved := ""
	for i := range now {
		if now[i] != rw.backup[i] {
			moved = now[i].Witness
			break
		}
	}
	if moved == "" {
		t.Fatal("no witness moved past the backup")
	}
	for _, tc := range []struct {
		name  string
		named []audit.WitnessedCheckpoint
		opts  func(*RecoverOptions)
		want  error
		names string
	}{
		{"older checkpoint named", rw.backup, nil, audit.ErrAdmissionMismatch, "witness " + moved + " "},
		{"answering witness omitted", now[:2], nil, audit.ErrAdmissionMismatch, "witness witness3.test "},
		{"no witnesses given", now, func(o *RecoverOptions) { o.Witnesses, o.WitnessQuorum = nil, 0 }, ErrInvalidArgument, ""},
	} {
		o := rw.recoverOpts()
		if tc.opts != nil {
			o.Witnesses = append([]witness.Member(nil), o.Witnesses...)
			tc.opts(&o)
		}
		before := rw.witnessed()
		_, err := Recover(rw.path, rw.admission(tc.named), o)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("%s: %v, want %v naming %q", tc.name, err, tc.want, tc.names)
		}
		if _, err := rw.open(); !errors.Is(err, ErrRollbackDetected) {
			t.Fatalf("%s: the refused recovery changed the database: %v", tc.name, err)
		}
		if got := rw.witnessed(); !equalWitnessed(got, before) {
			t.Fatalf("%s: the witnesses moved", tc.name)
		}
	}
	// An admission whose admitted tree root is not the database's: the
	// witnesses would be proven a tree it does not admit.
	q, err := Inspect(rw.path, rw.anchor)
	if err != nil {
		t.Fatal(err)
	}
	at := rw.clock.Now()
	wrongRoot := signed(t, recoveryKey, audit.Admission{Receiver: q.Receiver, SupersededAnchor: q.Anchor, AdmittedHead: q.Head,
		AdmittedState: q.State, At: at.UnixNano(), Expires: at.Add(time.Hour).UnixNano(), Reason: "restored", Witnessed: now,
		AdmittedRoot: audit.Hash{1}})
	if _, err := Recover(rw.path, wrongRoot, rw.recoverOpts()); !errors.Is(err, audit.ErrAdmissionMismatch) || !strings.Contains(err.Error(), "tree root") {
		t.Errorf("another admitted tree root: %v, want ErrAdmissionMismatch naming the tree root", err)
	}
	if _, err := rw.open(); !errors.Is(err, ErrRollbackDetected) {
		t.Fatalf("the refused recovery changed the database: %v", err)
	}
	// With quorum 2 of three and two down, N-K+1 = 2 answers are not there.
	rw.set.Witnesses[0].Down()
	rw.set.Witnesses[1].Down()
	_, err = Recover(rw.path, rw.admission(now), rw.recoverOpts())
	rw.set.Witnesses[0].Up()
	rw.set.Witnesses[1].Up()
	if !errors.Is(err, ErrWitnessAnswers) {
		t.Fatalf("two witnesses down: %v, want ErrWitnessAnswers", err)
	}
	rw.r = nil
}

func equalWitnessed(a, b []audit.WitnessedCheckpoint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Ensure that witnesses that do not hold the receiver's recovery key
// refuse the recovered chain: with only one of three holding it, the
// recovery applies (the admission names what they hold), but the
// recovered receiver does not open while the two others answer: each is
// named as diverged, with its refusal of the admission.
func TestRecoverWitnessedWithoutRecoveryKey(t *testing.T) {
	rw := newRestoredWitnessed(t, []bool{true, false, false})
	if _, err := Recover(rw.path, rw.admission(rw.witnessed()), rw.recoverOpts()); err != nil {
		t.Fatalf("recover: %v", err)
	}
	_, err := rw.open()
	if !IsIntegrityError(err) || !errors.Is(err, witness.ErrNoRecoveryKey) ||
		!strings.Contains(err.Error(), "witness2.test") || !strings.Contains(err.Error(), "witness3.test") {
		t.Fatalf("open after a recovery two witnesses refuse: %v, want an integrity error naming both, with ErrNoRecoveryKey", err)
	}
	// With the two refusing witnesses down, the one that accepted is not
	// N-K+1 = 2 answers.
	rw.set.Witnesses[1].Down()
	rw.set.Witnesses[2].Down()
	if _, err := rw.open(); !errors.Is(err, ErrWitnessAnswers) {
		t.Fatalf("open with only the accepting witness up: %v, want ErrWitnessAnswers", err)
	}
	rw.set.Witnesses[1].Up()
	rw.set.Witnesses[2].Up()
	r, err := rw.openStore(&Options{ReadOnly: true}, defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	rw.r = r
}

// Ensure that a witness that was down when the receiver recovered, and
// that the admission names at a checkpoint it does not hold, is not
// excused: the recovered receiver does not open while it answers.
func TestRecoverWitnessedDownWitnessNamedWrongly(t *testing.T) {
	rw := newRestoredWitnessed(t, []bool{true, true, true})
	named := rw.witnessed()
	named[2] = rw.backup[2] // older than what witness 3 holds
	rw.set.Witnesses[2].Down()
	_, err := Recover(rw.path, rw.admission(named), rw.recoverOpts())
	rw.set.Witnesses[2].Up()
	if err != nil {
		t.Fatalf("recover with witness 3 down (not judged): %v", err)
	}
	_, err = rw.open()
	var d *witness.DivergenceError
	if !IsIntegrityError(err) || !errors.As(err, &d) || d.Member != "witness3.test" {
		t.Fatalf("open with witness 3 at a checkpoint the admission does not name: %v", err)
	}
	r, err := rw.openStore(&Options{ReadOnly: true}, defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	rw.r = r
}

// Ensure that a witness that was down when the receiver recovered, and
// that the admission names at the checkpoint it holds, follows later: it
// accepts the admission at its recovery endpoint when a round needs it.
func TestRecoverWitnessedDownWitnessFollows(t *testing.T) {
	rw := newRestoredWitnessed(t, []bool{true, true, true})
	named := rw.witnessed()
	rw.set.Witnesses[2].Down()
	if _, err := Recover(rw.path, rw.admission(named), rw.recoverOpts()); err != nil {
		t.Fatalf("recover with witness 3 down: %v", err)
	}
	rw.set.Witnesses[2].Up()
	rw.reopenWitnessed()
	// With witness 1 down, K=2 needs witness 3.
	rw.set.Witnesses[0].Down()
	if _, err := rw.admin.Hold(rw.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "after recovery"}); err != nil {
		t.Fatalf("write after the recovery with witnesses 2 and 3: %v", err)
	}
	rw.set.Witnesses[0].Up()
	st, err := rw.set.Witnesses[2].Log(rw.originOf(testKey.Public().(ed25519.PublicKey)))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size != rw.r.head.Seq || len(st.Recoveries) != 1 || st.Recoveries[0].FromSize != named[2].Size {
		t.Fatalf("witness 3: size %d (head %d), %d recoveries", st.Size, rw.r.head.Seq, len(st.Recoveries))
	}
}

// Ensure that VerifyChain, which holds no receiver key to show the kept
// admission to the witnesses, forgives witnesses still on the superseded
// tree only with the caller's copy of the recovery key: without it they
// are reported as diverged, and with another key as well.
func TestVerifyChainRecoveredNeedsRecoveryKey(t *testing.T) {
	rw := newRestoredWitnessed(t, []bool{true, true, true})
	if _, err := Recover(rw.path, rw.admission(rw.witnessed()), rw.recoverOpts()); err != nil {
		t.Fatalf("recover: %v", err)
	}
	ms, err := rw.set.Members(nil)
	if err != nil {
		t.Fatal(err)
	}
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{77}, 32)).Public().(ed25519.PublicKey)
	for _, tc := range []struct {
		name string
		key  ed25519.PublicKey
		ok   bool
	}{
		{"no recovery key", nil, false},
		{"another key", other, false},
		{"the recovery key", rw.recoverOpts().RecoveryKey, true},
	} {
		rep, err := VerifyChain(rw.path, VerifyOptions{Anchor: rw.anchor, PublicKey: testKey.Public().(ed25519.PublicKey),
			Witnesses: ms, WitnessQuorum: 2, RecoveryKey: tc.key})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		diverged := rep.Problem == audit.ProblemRollbackDetected || rep.Problem == audit.ProblemForkDetected
		if rep.OK() != tc.ok || (!tc.ok && !diverged) {
			t.Errorf("%s: report ok %v (%v), want ok %v, else a divergence", tc.name, rep.OK(), rep.Problem, tc.ok)
		}
	}
	// Opened with its key, the receiver shows the witnesses the
	// admission; from then on VerifyChain needs no recovery key.
	rw.reopenWitnessed()
	rw.r.Close()
	rep, err := VerifyChain(rw.path, VerifyOptions{Anchor: rw.anchor, PublicKey: testKey.Public().(ed25519.PublicKey), Witnesses: ms, WitnessQuorum: 2})
	if err != nil || !rep.OK() {
		t.Fatalf("verify-chain after the witnesses accepted the recovery: %v, %v", rep.Problem, err)
	}
	rw.reopenWitnessed()
}

// Ensure that a witness down past the admission's window refuses it (a
// replay of an expired admission must not move a witness), so the
// recovered receiver does not open while it answers; and that a new
// admission naming it where it still is, applied by Recover again, brings
// it along.
func TestRecoverWitnessedDownPastWindow(t *testing.T) {
	rw := newRestoredWitnessed(t, []bool{true, true, true})
	named := rw.witnessed()
	q, err := Inspect(rw.path, rw.anchor)
	if err != nil {
		t.Fatal(err)
	}
	at := rw.clock.Now()
	short := signed(t, recoveryKey, audit.Admission{Receiver: q.Receiver, SupersededAnchor: q.Anchor, AdmittedHead: q.Head,
		AdmittedState: q.State, At: at.UnixNano(), Expires: at.Add(2 * time.Second).UnixNano(), Reason: "restored", Witnessed: named,
		AdmittedRoot: q.Root})
	rw.set.Witnesses[2].Down()
	if _, err := Recover(rw.path, short, rw.recoverOpts()); err != nil {
		t.Fatalf("recover with witness 3 down: %v", err)
	}
	rw.reopenWitnessed() // witnesses 1 and 2 accept it here
	rw.r.Close()
	rw.r = nil
	time.Sleep(2500 * time.Millisecond) // the witnesses' own clocks
	rw.clock.Add(3 * time.Second)
	rw.set.Witnesses[2].Up()
	_, err = rw.open()
	var d *witness.DivergenceError
	if !IsIntegrityError(err) || !errors.As(err, &d) || d.Member != "witness3.test" || !errors.Is(err, witness.ErrRecoveryRefused) {
		t.Fatalf("open with witness 3 back after the admission expired: %v, want its divergence with its refusal", err)
	}
	if _, err := Recover(rw.path, rw.admission(rw.witnessed()), rw.recoverOpts()); err != nil {
		t.Fatalf("recover again with a new admission naming witness 3 where it is: %v", err)
	}
	rw.reopenWitnessed()
	st, err := rw.set.Witnesses[2].Log(rw.originOf(testKey.Public().(ed25519.PublicKey)))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size != rw.r.head.Seq || len(st.Recoveries) != 1 || st.Recoveries[0].FromSize != named[2].Size {
		t.Fatalf("witness 3: size %d (head %d), %d recoveries", st.Size, rw.r.head.Seq, len(st.Recoveries))
	}
}
