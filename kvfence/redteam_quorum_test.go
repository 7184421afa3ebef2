package kvfence

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/witness"
)

// Ensure that Witnesses (what `status` prints as each witness's latest
// cosigned size) reports only sizes a witness signed for. Scenario: one
// witness's answers are replaced on the way (plain http) by an unsigned
// 409 naming exactly the size of the checkpoint being cosigned; the round
// goes on with the other two, so writes succeed, no warning is given
// (the failure is no divergence), and Witnesses reports that witness as
// known at the head: the operator sees three healthy witnesses where two
// cosign, and the margin of K is gone without a word.
func TestRedteamQ_UnsignedConflictShownAsCosignedSize(t *testing.T) {
	wf := newWitnessedFixture(t)
	var mu sync.Mutex
	var size uint64
	liar := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := size
		mu.Unlock()
		rw.Header().Set("Content-Type", witness.SizeContentType)
		rw.WriteHeader(http.StatusConflict)
		fmt.Fprintf(rw, "%d\n", s)
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
	// Open asks the liar too (a 409 to a GET is no answer); with the two
	// others up it opens.
	r, err := wf.openStore(o, defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	wf.r, wf.admin = r, r.Admin()
	mu.Lock()
	size = wf.head() + 1 // the size the hold's checkpoint will have
	mu.Unlock()
	if _, err := wf.admin.Hold(wf.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "drill"}); err != nil {
		t.Fatal(err)
	}
	head := wf.head()
	st, _ := wf.r.Witnesses()
	for _, w := range st {
		if w.Name == ms[2].Name && w.Known && w.Size >= head {
			t.Fatalf("Witnesses() reports %s as having cosigned size %d (the head %d) on its unsigned 409 alone; warnings: %q",
				w.Name, w.Size, head, warned)
		}
	}
}

// Ensure that a receiver whose checkpoints the witnesses cosign can still
// be opened with them after one honest open without the witness flags
// (a command run without $KVFENCE_WITNESS). Scenario: the anchor file
// alone is put back from before a cosigned hold; an open without
// witnesses moves it up the way a receiver without witnesses does, by
// signing the head again at the same size with the time of now; the
// witnesses hold the earlier body at that size, so every later open
// with them is a fork (exit 4), for ever, though nobody forked anything.
// refreshWitnessed already reuses the database's own newest checkpoint;
// the refresh without witnesses does not.
func TestRedteamQ_OpenWithoutWitnessesResignsCosignedSize(t *testing.T) {
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
	wf.r.Close()
	copyFile(t, old, wf.anchor.Path)
	wf.clock.Add(time.Minute)
	r, err = wf.openStore(wf.opts(), defect.Variant{})
	if err != nil {
		t.Fatalf("open without witnesses after the anchor alone was restored: %v", err)
	}
	r.Close()
	r, err = wf.open()
	if err != nil {
		wf.r, _ = wf.openStore(&Options{ReadOnly: true}, defect.Variant{})
		t.Fatalf("open with witnesses after an honest open without them: %v", err)
	}
	wf.r, wf.admin = r, r.Admin()
}

// Ensure that Open given witnesses never opens without asking them. The
// ledger refuses witnesses without an anchor store (ErrInvalidArgument:
// "a caller that gave them must not get a ledger that asked none"); the
// receiver, opened read-only without Anchor, drops Options.Witnesses and
// opens with every witness down, a silent allow for a caller that
// believes the witnesses vouched for what it reads.
func TestRedteamQ_ReadOnlyOpenWithoutAnchorIgnoresWitnesses(t *testing.T) {
	wf := newWitnessedFixture(t)
	wf.hold("drill")
	for _, w := range wf.set.Witnesses {
		if err := w.Down(); err != nil {
			t.Fatal(err)
		}
	}
	o := wf.options()
	ro := &Options{ReadOnly: true, Witnesses: o.Witnesses, WitnessQuorum: o.WitnessQuorum, WitnessTimeout: o.WitnessTimeout}
	wf.r.Close()
	r, err := wf.openStore(ro, defect.Variant{})
	if err == nil {
		wf.r = r
		t.Fatalf("read-only open with witnesses, no anchor and every witness down: opened without asking any")
	}
	if !errors.Is(err, ErrInvalidArgument) {
		t.Logf("refused with %v", err)
	}
	wf.r, _ = wf.openStore(&Options{ReadOnly: true}, defect.Variant{})
}

// Ensure that a repeated hold (same hold id) is acknowledged only once K
// witnesses cosigned a checkpoint covering the hold. Scenario: two of
// three witnesses are down; the hold commits and its anchor write
// succeeds, but the round fails (ErrNotAcknowledged, as it should). The
// operator retries with the same id, as the API invites: repeatHold sees
// that the anchor covers the earlier entries and answers idle, with no
// commit and so no round. The hold is acknowledged, with signed hold
// acks, while no witness has cosigned it; restoring the database and
// anchor from before it is then caught by nothing.
func TestRedteamQ_RepeatedHoldAcknowledgedWithoutCosign(t *testing.T) {
	wf := newWitnessedFixture(t)
	for _, w := range wf.set.Witnesses[:2] {
		if err := w.Down(); err != nil {
			t.Fatal(err)
		}
	}
	req := HoldRequest{Scopes: []string{fixScope}, Reason: "drill", ID: "hold-1"}
	if _, err := wf.admin.Hold(wf.ctx, req); !errors.Is(err, ErrNotAcknowledged) {
		t.Fatalf("hold with one witness of three up: %v, want ErrNotAcknowledged", err)
	}
	res, err := wf.admin.Hold(wf.ctx, req)
	if err != nil {
		return // refused: holds up
	}
	wf.r.Close()
	for _, w := range wf.set.Witnesses[:2] {
		w.Up()
	}
	n := 0
	for _, s := range wf.sizes() {
		if s >= res.AuditSeq {
			n++
		}
	}
	r, oerr := wf.openStore(&Options{ReadOnly: true}, defect.Variant{})
	if oerr == nil {
		wf.r = r
	}
	if n < 2 {
		t.Fatalf("repeated hold acknowledged (repeated %v, checkpoint seq %d) with %d witnesses at or past its entry %d (sizes %v)",
			res.Repeated, res.Checkpoint.Seq, n, res.AuditSeq, wf.sizes())
	}
}
