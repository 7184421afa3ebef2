package kvfence

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/witnesstest"
	"github.com/kvfence/kvfence/witness"
)

// witnessedFixture is the fixture receiver cosigned by three witnesses
// with quorum 2, opened with them.
type witnessedFixture struct {
	*fixture
	set *witnesstest.Set
}

func newWitnessedFixture(t *testing.T) *witnessedFixture {
	t.Helper()
	return newWitnessedFixtureOn(t, engines[0].new(t))
}

// newWitnessedFixtureOn is newWitnessedFixture on a fresh store of s's
// engine.
func newWitnessedFixtureOn(t *testing.T, s *store) *witnessedFixture {
	t.Helper()
	set, err := witnesstest.Start(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	f := newFixtureOn(t, s, defect.Variant{})
	if err := set.TrustReceiver("test-receiver", testKey.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}
	wf := &witnessedFixture{fixture: f, set: set}
	f.r.Close()
	r, err := wf.open()
	if err != nil {
		t.Fatalf("open with witnesses: %v", err)
	}
	f.r, f.admin = r, r.Admin()
	return wf
}

// options are the fixture's options with the witnesses, quorum 2.
func (wf *witnessedFixture) options() *Options {
	o := wf.opts()
	ms, err := wf.set.Members(nil)
	if err != nil {
		wf.t.Fatal(err)
	}
	o.Witnesses, o.WitnessQuorum, o.WitnessTimeout = ms, 2, 5*time.Second
	return o
}

func (wf *witnessedFixture) open() (*Receiver, error) {
	return wf.openStore(wf.options(), defect.Variant{})
}

// sizes returns each witness's stored size of the fixture receiver.
func (wf *witnessedFixture) sizes() []uint64 {
	wf.t.Helper()
	origin := wf.origin()
	var out []uint64
	for _, w := range wf.set.Witnesses {
		st, err := w.Log(origin)
		if err != nil {
			wf.t.Fatal(err)
		}
		out = append(out, st.Size)
	}
	return out
}

func (wf *witnessedFixture) origin() string {
	wf.t.Helper()
	cp, err := wf.r.noteCheckpoint(audit.SignedCheckpoint{})
	if err != nil {
		wf.t.Fatal(err)
	}
	return cp.Origin
}

func (wf *witnessedFixture) head() uint64 {
	wf.t.Helper()
	return wf.r.head.Seq
}

// Ensure that every acknowledged write is cosigned by at least K witnesses
// at the size of its anchored checkpoint, and that Witnesses reports it.
func TestWitnessed_WritesCosigned(t *testing.T) {
	forEngines(t, testWitnessedWritesCosigned)
}

func testWitnessedWritesCosigned(t *testing.T, s *store) {
	wf := newWitnessedFixtureOn(t, s)
	a := wf.activate("worker-a", "claim-1", wf.patchRequest("raise-retention"))
	res := wf.submit("worker-a", a.envelope)
	if res.Outcome != Applied {
		t.Fatalf("submit = %s/%s", res.Outcome, res.Reason)
	}
	head := wf.head()
	n := 0
	for _, s := range wf.sizes() {
		if s == head {
			n++
		}
	}
	if n < 2 {
		t.Fatalf("witness sizes %v, want at least 2 at the head %d", wf.sizes(), head)
	}
	st, k := wf.r.Witnesses()
	if k != 2 || len(st) != 3 {
		t.Fatalf("Witnesses() = %v, %d", st, k)
	}
	known := 0
	for _, s := range st {
		if s.Known && s.Size == head {
			known++
		}
	}
	if known < 2 {
		t.Fatalf("Witnesses() = %v, want 2 known at %d", st, head)
	}
}

// Ensure that a write is not acknowledged with fewer than K witnesses up,
// and that it is once they are back (the receiver asks each from the size
// it last knew).
func TestWitnessed_NoQuorumNotAcknowledged(t *testing.T) {
	forEngines(t, testWitnessedNoQuorum)
}

func testWitnessedNoQuorum(t *testing.T, s *store) {
	wf := newWitnessedFixtureOn(t, s)
	for _, w := range wf.set.Witnesses[:2] {
		if err := w.Down(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := wf.admin.Hold(wf.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "drill"})
	if !errors.Is(err, ErrNotAcknowledged) || !errors.Is(err, witness.ErrNoQuorum) {
		t.Fatalf("hold with one witness of three up: %v, want ErrNotAcknowledged and ErrNoQuorum", err)
	}
	if err := wf.set.Witnesses[0].Up(); err != nil {
		t.Fatal(err)
	}
	if _, err := wf.admin.Hold(wf.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "drill again"}); err != nil {
		t.Fatalf("hold with two witnesses up: %v", err)
	}
	// With two of three down, Open has one answer of the two it needs.
	wf.r.Close()
	wf.set.Witnesses[0].Down()
	if _, err := wf.open(); !errors.Is(err, ErrWitnessAnswers) || IsIntegrityError(err) {
		t.Fatalf("open with one witness of three up: %v, want ErrWitnessAnswers", err)
	}
	wf.set.Witnesses[1].Up()
	r, err := wf.open()
	if err != nil {
		t.Fatalf("open with two witnesses up: %v", err)
	}
	wf.r, wf.admin = r, r.Admin()
}

// Ensure that the database and its anchor restored together from before a
// hold are refused at Open, as a rollback, with every witness up and with
// any one down; with two down, Open is refused for too few answers. This
// is the restore that the anchor alone cannot catch (demonstration 4b).
func TestWitnessed_RestoreWithAnchorRefused(t *testing.T) {
	wf := newWitnessedFixture(t)
	a := wf.activate("worker-a", "claim-1", wf.patchRequest("raise-retention"))
	dir := t.TempDir()
	backupDB, backupAnchor := filepath.Join(dir, "db"), filepath.Join(dir, "anchor")
	// A backup taken as an operator would: the receiver closed.
	wf.r.Close()
	copyFile(t, wf.path, backupDB)
	copyFile(t, wf.anchor.Path, backupAnchor)
	r, err := wf.open()
	if err != nil {
		t.Fatal(err)
	}
	wf.r, wf.admin = r, r.Admin()
	wf.hold("worker-a paused; replaced")
	wf.r.Close()
	copyFile(t, backupDB, wf.path)
	copyFile(t, backupAnchor, wf.anchor.Path)

	// Without witnesses the restored pair opens and the old grant applies:
	// the counterexample the witnesses exist for.
	r, err = wf.openStore(wf.opts(), defect.Variant{})
	if err != nil {
		t.Fatalf("restored pair without witnesses: %v", err)
	}
	r.Close()
	copyFile(t, backupDB, wf.path)
	copyFile(t, backupAnchor, wf.anchor.Path)

	for down := -1; down < 3; down++ {
		if down >= 0 {
			wf.set.Witnesses[down].Down()
		}
		r, err := wf.open()
		if err == nil {
			res, _ := r.Submit(wf.ctx, "worker-a", a.envelope)
			r.Close()
			t.Fatalf("witness %d down: restored receiver opened (old grant: %s)", down, res.Outcome)
		}
		if !errors.Is(err, ErrRollbackDetected) || !IsIntegrityError(err) {
			t.Fatalf("witness %d down: %v, want ErrRollbackDetected", down, err)
		}
		var d *witness.DivergenceError
		if !errors.As(err, &d) {
			t.Fatalf("witness %d down: %v names no witness", down, err)
		}
		if down >= 0 {
			wf.set.Witnesses[down].Up()
		}
	}
	wf.set.Witnesses[0].Down()
	wf.set.Witnesses[1].Down()
	// The one left up may be one that cosigned the hold (a rollback) or
	// the one the quorum did without (too few answers): refused either way.
	_, err = wf.open()
	if !errors.Is(err, ErrWitnessAnswers) && !errors.Is(err, ErrRollbackDetected) {
		t.Fatalf("two witnesses down: %v, want ErrWitnessAnswers or ErrRollbackDetected", err)
	}
	// verify-chain of the restored pair with the witnesses.
	wf.set.Witnesses[0].Up()
	ms, _ := wf.set.Members(nil)
	rep, err := VerifyChain(wf.path, VerifyOptions{Anchor: wf.anchor, PublicKey: testKey.Public().(ed25519.PublicKey),
		Witnesses: ms, WitnessQuorum: 2})
	if err != nil || rep.Problem != audit.ProblemRollbackDetected {
		t.Fatalf("verify-chain of the restored pair: %v, %v, want rollback_detected", rep.Problem, err)
	}
	// Put the live pair's successor state out of reach and reopen the
	// fixture on something valid for its cleanup.
	wf.set.Witnesses[1].Up()
	r, err = wf.openStore(&Options{ReadOnly: true}, defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	wf.r = r
}

// Ensure that one witness answering every add-checkpoint with an unsigned
// 409 above the receiver's size (a liar, or whoever sits between it and
// the receiver) does not stop writes that the other two cosign: it is
// kept out of K and reported, not believed.
func TestWitnessed_UnsignedConflictDoesNotStopWrites(t *testing.T) {
	wf := newWitnessedFixture(t)
	liar := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", witness.SizeContentType)
		rw.WriteHeader(http.StatusConflict)
		rw.Write([]byte("1000000\n"))
	}))
	defer liar.Close()
	ms, err := wf.set.Members(nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := witness.NewClient(liar.URL, witness.ClientOptions{Verifier: ms[2].Verifier})
	if err != nil {
		t.Fatal(err)
	}
	ms[2].Client = c
	var warned []string
	o := wf.options()
	o.Witnesses = ms
	o.Warn = func(msg string) { warned = append(warned, msg) }
	wf.r.Close()
	r, err := wf.openStore(o, defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	wf.r, wf.admin = r, r.Admin()
	for i := range 3 {
		if _, err := wf.admin.Hold(wf.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "drill"}); err != nil {
			t.Fatalf("hold %d beside a witness that lies: %v", i, err)
		}
	}
	if len(warned) == 0 || !strings.Contains(warned[0], ms[2].Name) {
		t.Fatalf("warnings %q, want one naming %s", warned, ms[2].Name)
	}
}

// Ensure that a receipt's proof is to the note the witnesses cosigned,
// carrying at least K of their cosignatures.
func TestWitnessed_ReceiptProofCosigned(t *testing.T) {
	wf := newWitnessedFixture(t)
	if _, _, err := wf.r.CosignedCheckpoint(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("CosignedCheckpoint before any write: %v, want ErrNotFound", err)
	}
	a := wf.activate("worker-a", "claim-1", wf.patchRequest("raise-retention"))
	if res := wf.submit("worker-a", a.envelope); res.Outcome != Applied {
		t.Fatalf("submit = %s", res.Outcome)
	}
	rp, err := wf.r.ReceiptProof(fixScope, "raise-retention")
	if err != nil {
		t.Fatal(err)
	}
	cosigned, size, err := wf.r.CosignedCheckpoint()
	if err != nil || rp.TreeSize != size || !bytes.Equal(rp.Checkpoint, cosigned) {
		t.Fatalf("proof to size %d, the cosigned note is at %d (%v)", rp.TreeSize, size, err)
	}
	ms, _ := wf.set.Members(nil)
	var vs []note.Verifier
	for _, m := range ms {
		vs = append(vs, m.Verifier)
	}
	n, err := note.Open(rp.Checkpoint, note.VerifierList(vs...))
	if err != nil || len(n.Sigs) < 2 {
		t.Fatalf("the proof's note: %d cosignatures verified (%v), want 2", len(n.Sigs), err)
	}
	// Opened again, without a write since: the note is assembled from
	// the witnesses' answers to Open's question.
	wf.r.Close()
	r, err := wf.open()
	if err != nil {
		t.Fatal(err)
	}
	wf.r, wf.admin = r, r.Admin()
	rp, err = wf.r.ReceiptProof(fixScope, "raise-retention")
	if err != nil {
		t.Fatal(err)
	}
	n, err = note.Open(rp.Checkpoint, note.VerifierList(vs...))
	if err != nil || len(n.Sigs) < 2 || rp.TreeSize != size {
		t.Fatalf("after reopening: %d cosignatures verified (%v) at size %d, want 2 at %d", len(n.Sigs), err, rp.TreeSize, size)
	}
}

// Ensure that an anchor file restored alone (the database current) opens
// with witnesses: Open moves the anchor up to the database's own newest
// checkpoint, the body the witnesses cosigned, instead of signing that
// size again with another time, which every witness would refuse as a
// second account of one tree size, for ever.
func TestWitnessed_AnchorRestoredAloneOpens(t *testing.T) {
	wf := newWitnessedFixture(t)
	wf.activate("worker-a", "claim-1", wf.patchRequest("raise-retention"))
	wf.r.Close()
	old := filepath.Join(t.TempDir(), "anchor")
	copyFile(t, wf.anchor.Path, old)
	r, err := wf.open()
	if err != nil {
		t.Fatal(err)
	}
	wf.r, wf.admin = r, r.Admin()
	wf.hold("drill")
	head := wf.head()
	wf.r.Close()
	copyFile(t, old, wf.anchor.Path)
	// Time passes: a checkpoint signed now would carry another time.
	wf.clock.Add(time.Minute)
	r, err = wf.open()
	if err != nil {
		t.Fatalf("open after the anchor alone was restored: %v", err)
	}
	wf.r, wf.admin = r, r.Admin()
	a, err := wf.anchor.Load()
	if err != nil || a.Seq != head {
		t.Fatalf("anchor at %d (%v), want moved up to the head %d", a.Seq, err, head)
	}
	wf.hold("drill again")
}

// Ensure that a write whose anchor write fails while the witnesses, asked
// beside it, cosign its checkpoint is not acknowledged, and that the
// receiver opened again anchors that very checkpoint and goes on: the
// witnesses are never shown another body for that size.
func TestWitnessed_AnchorWriteFailsBesideRound(t *testing.T) {
	wf := newWitnessedFixture(t)
	wf.r.Close()
	fa := &roundSideAnchor{FileAnchor: wf.anchor}
	o := wf.options()
	o.Anchor = fa
	r, err := wf.openStore(o, defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	fa.fail.Store(true)
	// Time passes before the reopen below: a checkpoint signed then
	// would carry another time.
	if _, err := r.Admin().Hold(wf.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "drill"}); !errors.Is(err, ErrNotAcknowledged) {
		t.Fatalf("hold with a failing anchor write: %v, want ErrNotAcknowledged", err)
	}
	head := r.head.Seq
	r.Close()
	n := 0
	for _, size := range wf.sizes() {
		if size == head {
			n++
		}
	}
	if n < 2 {
		t.Fatalf("witness sizes %v: want two at %d, cosigned beside the failed anchor write", wf.sizes(), head)
	}
	wf.clock.Add(time.Minute)
	r, err = wf.open()
	if err != nil {
		t.Fatalf("open after the failed anchor write: %v", err)
	}
	wf.r, wf.admin = r, r.Admin()
	if a, err := wf.anchor.Load(); err != nil || a.Seq != head {
		t.Fatalf("anchor at %d (%v), want moved up to %d", a.Seq, err, head)
	}
	wf.hold("drill again")
}

// roundSideAnchor is a file anchor whose next write fails once fail is set.
type roundSideAnchor struct {
	audit.FileAnchor
	fail atomic.Bool
}

// Store fails once if fail is set, else stores.
func (a *roundSideAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	if a.fail.CompareAndSwap(true, false) {
		return errors.New("anchor disk full")
	}
	return a.FileAnchor.Store(old, next)
}

// Ensure that WitnessFaults closes what N-K+1 answers leave open: with
// one witness's database rolled back (witness1, which cosigned the hold)
// and the other cosigner down, the restored pair opens with F=0 (two
// answers, neither ahead: the documented limit) and is refused with F=1,
// which needs all three answers.
func TestWitnessed_FaultsRolledBackWitness(t *testing.T) {
	wf := newWitnessedFixture(t)
	wf.activate("worker-a", "claim-1", wf.patchRequest("raise-retention"))
	dir := t.TempDir()
	backupDB, backupAnchor, backupW1 := filepath.Join(dir, "db"), filepath.Join(dir, "anchor"), filepath.Join(dir, "w1")
	wf.r.Close()
	w1, w2, w3 := wf.set.Witnesses[0], wf.set.Witnesses[1], wf.set.Witnesses[2]
	copyFile(t, wf.path, backupDB)
	copyFile(t, wf.anchor.Path, backupAnchor)
	w1.Down()
	copyFile(t, w1.Path, backupW1)
	w1.Up()
	// The hold, with witness3 unavailable: cosigned by witness1 and 2.
	w3.Down()
	r, err := wf.open()
	if err != nil {
		t.Fatal(err)
	}
	wf.r, wf.admin = r, r.Admin()
	wf.hold("worker-a paused; replaced")
	held := wf.head()
	wf.r.Close()
	w3.Up()
	if s := wf.sizes(); s[0] != held || s[1] != held || s[2] >= held {
		t.Fatalf("witness sizes %v after the hold at %d: setup failed", s, held)
	}
	// witness1 rolled back, witness2 down, the pair restored.
	w1.Down()
	copyFile(t, backupW1, w1.Path)
	w1.Up()
	w2.Down()
	copyFile(t, backupDB, wf.path)
	copyFile(t, backupAnchor, wf.anchor.Path)

	o := wf.options()
	o.ReadOnly = true
	r, err = wf.openStore(o, defect.Variant{})
	if err != nil {
		t.Fatalf("F=0: %v; the documented limit is that this opens", err)
	}
	r.Close()
	o.WitnessFaults = 1
	if _, err := wf.openStore(o, defect.Variant{}); !errors.Is(err, ErrWitnessAnswers) {
		t.Fatalf("F=1 with a rolled-back witness and one down: %v, want ErrWitnessAnswers", err)
	}
	w2.Up()
	if _, err := wf.openStore(o, defect.Variant{}); !errors.Is(err, ErrRollbackDetected) {
		t.Fatalf("F=1 with all up: %v, want ErrRollbackDetected", err)
	}
	wf.r, _ = wf.openStore(&Options{ReadOnly: true}, defect.Variant{})
}
