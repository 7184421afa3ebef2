package ledger

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/internal/witnesstest"
	"github.com/kvfence/kvfence/witness"
)

// witnessed is a ledger fixture with three witnesses that trust it,
// quorum 2.
type witnessed struct {
	*fixture
	set     *witnesstest.Set
	members []witness.Member
	origin  string
}

func newWitnessed(t *testing.T) *witnessed {
	t.Helper()
	f := newFixture(t)
	set, err := witnesstest.Start(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	pub := f.key.Public().(ed25519.PublicKey)
	origin, err := checkpoint.LedgerOrigin("ledger-test", pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Trust(origin, pub); err != nil {
		t.Fatal(err)
	}
	members, err := set.Members(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &witnessed{fixture: f, set: set, members: members, origin: origin}
}

func (w *witnessed) opts() *Options {
	o := w.fixture.opts()
	o.Witnesses, o.WitnessQuorum, o.WitnessTimeout = w.members, 2, 5*time.Second
	return o
}

func (w *witnessed) open() *Ledger {
	w.t.Helper()
	l, err := Open(w.path, w.opts())
	if err != nil {
		w.t.Fatal(err)
	}
	return l
}

// sizes returns each witness's latest cosigned size of the ledger.
func (w *witnessed) sizes() []uint64 {
	w.t.Helper()
	var out []uint64
	for _, x := range w.set.Witnesses {
		st, err := x.Log(w.origin)
		if err != nil {
			w.t.Fatal(err)
		}
		out = append(out, st.Size)
	}
	return out
}

// atLeast counts the sizes at or past seq.
func atLeast(sizes []uint64, seq uint64) int {
	n := 0
	for _, s := range sizes {
		if s >= seq {
			n++
		}
	}
	return n
}

// down stops the witnesses at idx until the test ends or up.
func (w *witnessed) down(idx ...int) {
	w.t.Helper()
	for _, i := range idx {
		if err := w.set.Witnesses[i].Down(); err != nil {
			w.t.Fatal(err)
		}
	}
}

func (w *witnessed) up() {
	w.t.Helper()
	for _, x := range w.set.Witnesses {
		if err := x.Up(); err != nil {
			w.t.Fatal(err)
		}
	}
}

// Ensure that every write of a witnessed ledger is cosigned by at least K
// witnesses before it returns, that their sizes only grow with the
// ledger's head, and that Witnesses reports what the ledger learned.
func TestWitnesses_WritesCosigned(t *testing.T) {
	w := newWitnessed(t)
	l := w.open()
	defer l.Close()
	prev := w.sizes()
	for i := range 4 {
		approve(t, l, fmt.Sprintf("act-%d", i))
		head := l.Head().Seq
		got := w.sizes()
		if n := atLeast(got, head); n < 2 {
			t.Fatalf("write %d (head %d): witness sizes %v, want at least 2 at the head", i, head, got)
		}
		for j := range got {
			if got[j] < prev[j] {
				t.Fatalf("witness %d went from size %d to %d", j, prev[j], got[j])
			}
		}
		prev = got
	}
	st, k := l.Witnesses()
	if k != 2 || len(st) != 3 {
		t.Fatalf("Witnesses() = %+v, %d; want 3 witnesses, quorum 2", st, k)
	}
	known := 0
	for _, s := range st {
		if s.Known && s.Size == l.Head().Seq {
			known++
		}
	}
	if known < 2 {
		t.Fatalf("Witnesses() = %+v: want at least 2 known at the head %d", st, l.Head().Seq)
	}
	// The ledger's notes are its own log: a receiver's origin with the
	// same id and key is unknown to the witnesses.
	r, _ := checkpoint.ReceiverOrigin("ledger-test", w.key.Public().(ed25519.PublicKey))
	if st, err := w.set.Witnesses[0].Log(r); err == nil && st.Cosigned {
		t.Fatalf("a witness holds the ledger's checkpoint under the receiver origin %q", r)
	}
}

// restoredTogether writes, copies the ledger file and its anchor, writes
// more (cosigned), and puts both copies back: the anchor alone cannot see
// the rollback.
func (w *witnessed) restoredTogether() {
	w.t.Helper()
	l := w.open()
	approve(w.t, l, "before")
	l.Close()
	fileCopy, anchorCopy := w.path+".backup", w.anchor.Path+".backup"
	copyFile(w.t, fileCopy, w.path)
	copyFile(w.t, anchorCopy, w.anchor.Path)
	l = w.open()
	approve(w.t, l, "after-1")
	approve(w.t, l, "after-2")
	l.Close()
	copyFile(w.t, w.path, fileCopy)
	copyFile(w.t, w.anchor.Path, anchorCopy)
}

// Ensure that a ledger file and its anchor restored together from before
// some cosigned approvals are refused at Open as a rollback, with all three
// witnesses up and with any one of them down, read-write and read-only,
// while the anchor alone accepts them (the counterexample).
func TestWitnesses_RestoredTogetherRefused(t *testing.T) {
	w := newWitnessed(t)
	w.restoredTogether()

	// The counterexample: without witnesses the restored pair opens.
	l, err := Open(w.path, w.fixture.opts())
	if err != nil {
		t.Fatalf("restored file and anchor without witnesses: %v, want them accepted (the anchor cannot tell)", err)
	}
	l.Close()

	for _, tc := range []struct {
		name string
		down []int
	}{{"all up", nil}, {"first down", []int{0}}, {"second down", []int{1}}, {"third down", []int{2}}} {
		t.Run(tc.name, func(t *testing.T) {
			w.up()
			w.down(tc.down...)
			defer w.up()
			for _, ro := range []bool{false, true} {
				o := w.opts()
				o.ReadOnly = ro
				l, err := Open(w.path, o)
				if l != nil {
					l.Close()
				}
				var d *witness.DivergenceError
				if !errors.Is(err, audit.ErrRollbackDetected) || !errors.As(err, &d) || !errors.Is(d, witness.ErrRollbackDetected) {
					t.Fatalf("read-only %v: Open = %v, want audit.ErrRollbackDetected with a *witness.DivergenceError", ro, err)
				}
			}
		})
	}
	// Open refused before anything was written: the witnesses still hold
	// the newer tree, and the file is still the restored one.
	l, err = Open(w.path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	head := l.Head().Seq
	l.Close()
	if n := atLeast(w.sizes(), head+1); n < 2 {
		t.Fatalf("witness sizes %v after the refusals, restored head %d: want 2 still ahead", w.sizes(), head)
	}
}

// Ensure that with two of three witnesses down, Open refuses: a restored
// ledger as a rollback (the one that answers is ahead), a current one
// because too few answered to rule a rollback out.
func TestWitnesses_TwoDownRefused(t *testing.T) {
	w := newWitnessed(t)
	l := w.open()
	approve(t, l, "act")
	l.Close()
	for _, pair := range [][]int{{0, 1}, {0, 2}, {1, 2}} {
		w.up()
		w.down(pair...)
		for _, ro := range []bool{false, true} {
			o := w.opts()
			o.ReadOnly = ro
			l, err := Open(w.path, o)
			if l != nil {
				l.Close()
			}
			if !errors.Is(err, ErrWitnessAnswers) || !errors.Is(err, witness.ErrTooFewAnswers) {
				t.Fatalf("witnesses %v down, read-only %v: Open = %v, want ErrWitnessAnswers", pair, ro, err)
			}
		}
	}
	w.up()
	w.restoredTogether()
	w.down(0, 2)
	l, err := Open(w.path, w.opts())
	if l != nil {
		l.Close()
	}
	if !errors.Is(err, audit.ErrRollbackDetected) {
		t.Fatalf("restored, two down: Open = %v, want ErrRollbackDetected", err)
	}
}

// Ensure that with two of three witnesses down a write commits but is not
// acknowledged, that with one down it is, and that a later write with all
// up is cosigned again over the unacknowledged one.
func TestWitnesses_WriteNotAcknowledged(t *testing.T) {
	w := newWitnessed(t)
	l := w.open()
	defer l.Close()
	w.down(2)
	approve(t, l, "one-down")
	w.down(1)
	before := l.Head().Seq
	_, err := l.Approve(ctx, ApproveRequest{Action: "two-down", RequestSHA256: [32]byte{1}, Approver: "alice", TTL: time.Hour})
	if !errors.Is(err, ErrNotAcknowledged) || !errors.Is(err, witness.ErrNoQuorum) {
		t.Fatalf("write with two witnesses down: %v, want ErrNotAcknowledged wrapping witness.ErrNoQuorum", err)
	}
	if l.Head().Seq != before+1 {
		t.Fatalf("head %d, want %d: the unacknowledged write is committed", l.Head().Seq, before+1)
	}
	w.up()
	approve(t, l, "all-up")
	if n := atLeast(w.sizes(), l.Head().Seq); n < 2 {
		t.Fatalf("witness sizes %v, head %d: want 2 at the head", w.sizes(), l.Head().Seq)
	}
}

// Ensure that verify-chain reports a ledger restored with its anchor as
// rollback_detected with the witnesses, reports nothing without them, and
// returns ErrWitnessAnswers when too few answer.
func TestWitnesses_VerifyChain(t *testing.T) {
	w := newWitnessed(t)
	vo := VerifyOptions{Anchor: w.anchor, PublicKey: w.key.Public().(ed25519.PublicKey), Witnesses: w.members, WitnessQuorum: 2,
		WitnessTimeout: 5 * time.Second}
	l := w.open()
	approve(t, l, "act")
	l.Close()
	if rep, err := VerifyChain(w.path, vo); err != nil || !rep.OK() {
		t.Fatalf("current ledger: %+v, %v; want ok", rep, err)
	}
	w.restoredTogether()
	plain := vo
	plain.Witnesses, plain.WitnessQuorum = nil, 0
	if rep, err := VerifyChain(w.path, plain); err != nil || !rep.OK() {
		t.Fatalf("restored pair without witnesses: %+v, %v; want ok (the counterexample)", rep, err)
	}
	for _, down := range [][]int{nil, {1}} {
		w.up()
		w.down(down...)
		rep, err := VerifyChain(w.path, vo)
		if err != nil || rep.OK() || rep.Problem != audit.ProblemRollbackDetected || !errors.Is(rep.Err(), audit.ErrRollbackDetected) {
			t.Fatalf("witnesses %v down: %+v, %v; want rollback_detected", down, rep, err)
		}
	}
	w.up()
	w.down(0, 1, 2)
	if _, err := VerifyChain(w.path, vo); !errors.Is(err, ErrWitnessAnswers) {
		t.Fatalf("all witnesses down: %v, want ErrWitnessAnswers", err)
	}
	bad := vo
	bad.Witnesses = nil
	if _, err := VerifyChain(w.path, bad); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a quorum without witnesses: %v, want ErrInvalidArgument", err)
	}
}

// Ensure that Open refuses a quorum that cannot be made, and witnesses
// that would not be asked (no anchor).
func TestWitnesses_BadQuorum(t *testing.T) {
	w := newWitnessed(t)
	for _, tc := range []struct {
		name     string
		members  []witness.Member
		k        int
		noAnchor bool
	}{{"quorum without witnesses", nil, 1, false}, {"quorum over N", w.members, 4, false}, {"quorum zero", w.members, 0, false},
		{"witnesses without an anchor", w.members, 2, true}} {
		o := w.opts()
		o.Witnesses, o.WitnessQuorum = tc.members, tc.k
		if tc.noAnchor {
			o.Anchor, o.ReadOnly = nil, true
		}
		l, err := Open(w.path, o)
		if l != nil {
			l.Close()
		}
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: Open = %v, want ErrInvalidArgument", tc.name, err)
		}
	}
}

// slowTransport delays every request, so that a round's other answers
// come first.
type slowTransport struct{ delay time.Duration }

func (s slowTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	select {
	case <-time.After(s.delay):
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return witnesstest.Transport().RoundTrip(r)
}

// Ensure that a write a quorum cosigned is acknowledged when another
// witness answered, unsigned, that it holds a tree the write does not
// extend, and that the operator is told, naming it: two writes cosigned
// by one witness alone (never acknowledged by a quorum), then the file and
// anchor restored from before them and opened while that witness was down
// (the two that answered were not ahead), then a write with all up, the
// other two answering last. Short of K, the write is not acknowledged and
// the divergence is in the error, but it is not taken as evidence
// (an integrity error) on the witness's unsigned word.
func TestWitnesses_DivergentWitnessRaised(t *testing.T) {
	w := newWitnessed(t)
	l := w.open()
	approve(t, l, "a")
	l.Close()
	fileCopy, anchorCopy := w.path+".backup", w.anchor.Path+".backup"
	copyFile(t, fileCopy, w.path)
	copyFile(t, anchorCopy, w.anchor.Path)
	// Two writes that the first witness alone cosigns (the ledger run
	// with it as its only witness): a round with two witnesses down
	// abandons the third when K can no longer be reached, so whether it
	// cosigned would be left to timing.
	alone := w.fixture.opts()
	alone.Witnesses, alone.WitnessQuorum = w.members[:1], 1
	l, err := Open(w.path, alone)
	if err != nil {
		t.Fatal(err)
	}
	approve(t, l, "b1")
	approve(t, l, "b2")
	l.Close()
	copyFile(t, w.path, fileCopy)
	copyFile(t, w.anchor.Path, anchorCopy)
	w.up()
	slow := &http.Client{Transport: slowTransport{time.Second}}
	members := []witness.Member{w.members[0]}
	for _, x := range w.set.Witnesses[1:] {
		m, err := x.Member(slow)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
	}
	w.members = members
	w.down(0)
	var warned []string
	o := w.opts()
	o.Warn = func(msg string) { warned = append(warned, msg) }
	l, err = Open(w.path, o)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w.up()
	if _, err = l.Approve(ctx, ApproveRequest{Action: "c", RequestSHA256: [32]byte{3}, Approver: "alice", TTL: time.Hour}); err != nil {
		t.Fatalf("write cosigned by two beside a witness ahead: %v, want acknowledged", err)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], w.set.Witnesses[0].Name) || !strings.Contains(warned[0], "larger tree") {
		t.Fatalf("warnings %q, want one naming %s's rollback", warned, w.set.Witnesses[0].Name)
	}
	if n := atLeast(w.sizes()[1:], l.Head().Seq); n != 2 {
		t.Fatalf("witness sizes %v: want the other two to have cosigned head %d", w.sizes(), l.Head().Seq)
	}
	// Short of K as well (one down, one slow).
	w.down(1)
	_, err = l.Approve(ctx, ApproveRequest{Action: "d", RequestSHA256: [32]byte{4}, Approver: "alice", TTL: time.Hour})
	var d *witness.DivergenceError
	if !errors.Is(err, ErrNotAcknowledged) || !errors.Is(err, witness.ErrNoQuorum) || !errors.As(err, &d) ||
		errors.Is(err, audit.ErrForkDetected) || errors.Is(err, audit.ErrRollbackDetected) {
		t.Fatalf("no quorum beside a divergent witness: %v, want ErrNotAcknowledged, ErrNoQuorum naming the divergence, no integrity error", err)
	}
}

// refusingAnchor is a file anchor whose writes fail while refuse is set.
type refusingAnchor struct {
	audit.FileAnchor
	refuse *bool
}

func (a refusingAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	if *a.refuse {
		return errors.New("anchor disk full")
	}
	return a.FileAnchor.Store(old, next)
}

// Ensure that Open moves the anchor up over a lost anchor write and has
// the witnesses cosign it, both when the witnesses never saw the head (the
// anchor write failed, so no witness was asked) and when they already
// cosigned it (the anchor file alone restored from a backup): the store's
// own checkpoint is anchored, not the head signed again, which would be a
// second body at one size and a fork to every witness.
func TestWitnesses_OpenMovesAnchorUp(t *testing.T) {
	w := newWitnessed(t)
	l := w.open()
	approve(t, l, "a")
	l.Close()

	// The anchor write fails: committed, not acknowledged, no witness asked.
	refuse := true
	o := w.opts()
	o.Anchor = refusingAnchor{FileAnchor: w.anchor, refuse: &refuse}
	l, err := Open(w.path, o)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Approve(ctx, ApproveRequest{Action: "lost", RequestSHA256: [32]byte{5}, Approver: "alice", TTL: time.Hour})
	head := l.Head().Seq
	l.Close()
	if !errors.Is(err, ErrNotAcknowledged) {
		t.Fatalf("write whose anchor write failed: %v, want ErrNotAcknowledged", err)
	}
	if got := w.sizes(); atLeast(got, head) != 0 {
		t.Fatalf("witness sizes %v: a witness was shown head %d, whose anchor write failed", got, head)
	}
	l = w.open()
	if n := atLeast(w.sizes(), head); n < 2 {
		t.Fatalf("after Open moved the anchor up: witness sizes %v, want 2 at head %d", w.sizes(), head)
	}
	anchorCopy := w.anchor.Path + ".backup"
	copyFile(t, anchorCopy, w.anchor.Path)
	approve(t, l, "b")
	approve(t, l, "c")
	head = l.Head().Seq
	l.Close()

	// The anchor alone restored: the witnesses hold the head already. The
	// clock moved, so a head signed again would be another body.
	copyFile(t, w.anchor.Path, anchorCopy)
	w.clock.Advance(time.Second)
	for range 2 {
		l, err = Open(w.path, w.opts())
		if err != nil {
			t.Fatalf("anchor restored alone, file current: Open = %v, want the anchor moved up", err)
		}
		if a, err := w.anchor.Load(); err != nil || a.Seq != head {
			t.Fatalf("anchor %+v, %v; want seq %d", a, err, head)
		}
		l.Close()
	}
	l = w.open()
	defer l.Close()
	approve(t, l, "d")
	if n := atLeast(w.sizes(), l.Head().Seq); n < 2 {
		t.Fatalf("witness sizes %v, want 2 at head %d", w.sizes(), l.Head().Seq)
	}
}
