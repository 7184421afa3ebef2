package witness_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/witness"
)

// qwitness is one witness of a quorum fixture, served over httptest.
type qwitness struct {
	name   string
	key    ed25519.PrivateKey
	store  *witness.Store
	srv    *httptest.Server
	client *witness.Client
	cosv   *checkpoint.CosignatureVerifier

	mu   sync.Mutex
	gate chan struct{} // when set, add-checkpoint waits for it to close
}

func (w *qwitness) setGate(g chan struct{}) {
	w.mu.Lock()
	w.gate = g
	w.mu.Unlock()
}

// down stops the witness's server: its URL then refuses connections.
func (w *qwitness) down() {
	if w.srv != nil {
		w.srv.Close()
		w.store.Close()
		w.srv = nil
	}
}

// qfixture is a log (a receiver's origin and key, a tree) and n witnesses
// trusting it.
type qfixture struct {
	origin string
	logKey ed25519.PrivateKey
	signer note.Signer
	logv   note.Verifier
	main   *tree
	ws     []*qwitness
}

func newQFixture(t testing.TB, n int) *qfixture {
	t.Helper()
	f := &qfixture{logKey: key(1), main: newTree(t, "main", 0)}
	pub := f.logKey.Public().(ed25519.PublicKey)
	f.origin, _ = checkpoint.ReceiverOrigin("r1", pub)
	f.signer, _ = checkpoint.NewSigner(f.origin, f.logKey)
	f.logv, _ = checkpoint.NewVerifier(f.origin, pub)
	vkey, _ := checkpoint.VerifierKey(f.origin, pub)
	dir := t.TempDir()
	for i := range n {
		w := &qwitness{name: fmt.Sprintf("witness.test/w%d", i), key: key(byte(20 + i))}
		wpub := w.key.Public().(ed25519.PublicKey)
		path := filepath.Join(dir, fmt.Sprintf("w%d.db", i))
		if err := witness.Create(path, w.name, wpub); err != nil {
			t.Fatal(err)
		}
		st, err := witness.OpenStore(path, witness.StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Trust(f.origin, vkey); err != nil {
			t.Fatal(err)
		}
		wit, err := witness.New(st, w.key, witness.Options{})
		if err != nil {
			t.Fatal(err)
		}
		inner := witness.NewServer(wit, nil)
		w.store = st
		w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			w.mu.Lock()
			g := w.gate
			w.mu.Unlock()
			if g != nil && r.URL.Path == witness.AddCheckpointPath {
				<-g
			}
			inner.ServeHTTP(rw, r)
		}))
		w.cosv, _ = checkpoint.NewCosignatureVerifier(w.name, wpub, checkpoint.CosignatureVerifierOptions{})
		w.client, err = witness.NewClient(w.srv.URL, witness.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.ws = append(f.ws, w)
	}
	t.Cleanup(func() {
		for _, w := range f.ws {
			w.setGate(nil)
			w.down()
		}
	})
	return f
}

// members returns the fixture's witnesses as quorum members.
func (f *qfixture) members() []witness.Member {
	var ms []witness.Member
	for _, w := range f.ws {
		ms = append(ms, witness.Member{Name: w.name, Client: w.client, Verifier: w.cosv})
	}
	return ms
}

func (f *qfixture) quorum(t testing.TB, k int) *witness.Quorum {
	t.Helper()
	q, err := witness.NewQuorum(witness.QuorumOptions{Members: f.members(), Quorum: k, Log: f.logv})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// signed returns the log's signed checkpoint of tr at size n.
func (f *qfixture) signed(t testing.TB, tr *tree, n int64) []byte {
	t.Helper()
	tr.grow(t, n)
	msg, err := checkpoint.Sign(f.local(t, tr, n), f.signer)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func (f *qfixture) local(t testing.TB, tr *tree, n int64) checkpoint.Checkpoint {
	tr.grow(t, n)
	return checkpoint.Checkpoint{Origin: f.origin, Size: uint64(n), Root: tr.root(t, n)}
}

// prove is the proof function of tr's checkpoint at size n.
func prove(t testing.TB, tr *tree, n int64) witness.ProveFunc {
	return func(old uint64) (tlog.TreeProof, error) {
		return tlog.ProveTree(n, int64(old), tr)
	}
}

// consistency is the local log's proof function for Check.
func consistency(tr *tree) witness.ConsistencyFunc {
	return func(old, n uint64) (tlog.TreeProof, error) {
		return tlog.ProveTree(int64(n), int64(old), tr)
	}
}

// cosignAll has every witness cosign tr at size n directly, from what it
// holds now.
func (f *qfixture) cosignAll(t testing.TB, tr *tree, n int64, ws ...*qwitness) {
	t.Helper()
	if ws == nil {
		ws = f.ws
	}
	q, err := witness.NewQuorum(witness.QuorumOptions{Members: membersOf(ws), Quorum: len(ws), Log: f.logv})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Cosign(context.Background(), f.signed(t, tr, n), prove(t, tr, n)); err != nil {
		t.Fatal(err)
	}
}

func membersOf(ws []*qwitness) []witness.Member {
	var ms []witness.Member
	for _, w := range ws {
		ms = append(ms, witness.Member{Name: w.name, Client: w.client, Verifier: w.cosv})
	}
	return ms
}

func failureOf(fs []witness.MemberFailure, member string) error {
	for _, f := range fs {
		if f.Member == member {
			return f.Err
		}
	}
	return nil
}

func names(cs []witness.Cosignature) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Member)
	}
	return out
}

// Ensure that NewQuorum refuses, with ErrBadQuorum and a message naming
// the fault, every options struct that would make K mean less than K
// distinct witnesses.
func TestNewQuorumRefusals(t *testing.T) {
	f := newQFixture(t, 3)
	ms := f.members()
	otherClient, _ := witness.NewClient(f.ws[0].srv.URL, witness.ClientOptions{Verifier: f.ws[1].cosv})
	sameKey, _ := checkpoint.NewCosignatureVerifier("witness.test/alias", f.ws[0].key.Public().(ed25519.PublicKey), checkpoint.CosignatureVerifierOptions{})
	with := func(i int, m witness.Member) []witness.Member {
		out := append([]witness.Member(nil), ms...)
		out[i] = m
		return out
	}
	for _, tc := range []struct {
		name    string
		opts    witness.QuorumOptions
		message string
	}{
		{"no members", witness.QuorumOptions{Quorum: 1, Log: f.logv}, "no members"},
		{"quorum zero", witness.QuorumOptions{Members: ms, Quorum: 0, Log: f.logv}, "quorum 0"},
		{"quorum above N", witness.QuorumOptions{Members: ms, Quorum: 4, Log: f.logv}, "quorum 4"},
		{"no log verifier", witness.QuorumOptions{Members: ms, Quorum: 2}, "no log verifier"},
		{"no name", witness.QuorumOptions{Members: with(1, witness.Member{Client: ms[1].Client, Verifier: ms[1].Verifier}), Quorum: 2, Log: f.logv}, "no name"},
		{"name with a newline", witness.QuorumOptions{Members: with(1, witness.Member{Name: "w1\nforged", Client: ms[1].Client, Verifier: ms[1].Verifier}), Quorum: 2, Log: f.logv}, "not a valid key name"},
		{"name repeats", witness.QuorumOptions{Members: with(1, witness.Member{Name: ms[0].Name, Client: ms[1].Client, Verifier: ms[1].Verifier}), Quorum: 2, Log: f.logv}, "repeats"},
		{"key repeats under another name", witness.QuorumOptions{Members: with(1, witness.Member{Name: "alias", Client: ms[1].Client, Verifier: sameKey}), Quorum: 2, Log: f.logv}, "same key"},
		{"no client", witness.QuorumOptions{Members: with(2, witness.Member{Name: ms[2].Name, Verifier: ms[2].Verifier}), Quorum: 2, Log: f.logv}, "no client"},
		{"no verifier", witness.QuorumOptions{Members: with(2, witness.Member{Name: ms[2].Name, Client: ms[2].Client}), Quorum: 2, Log: f.logv}, "no cosignature verifier"},
		{"client verifies another key", witness.QuorumOptions{Members: with(0, witness.Member{Name: ms[0].Name, Client: otherClient, Verifier: ms[0].Verifier}), Quorum: 2, Log: f.logv}, "another key"},
		{"faults negative", witness.QuorumOptions{Members: ms, Quorum: 2, Faults: -1, Log: f.logv}, "faults -1"},
		{"faults K", witness.QuorumOptions{Members: ms, Quorum: 2, Faults: 2, Log: f.logv}, "faults 2 is not between 0 and K-1 = 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := witness.NewQuorum(tc.opts)
			if !errors.Is(err, witness.ErrBadQuorum) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("NewQuorum = %v, %v; want ErrBadQuorum saying %q", q, err, tc.message)
			}
		})
	}
	if _, err := witness.NewQuorum(witness.QuorumOptions{Members: ms, Quorum: 3, Log: f.logv}); err != nil {
		t.Fatalf("K = N refused: %v", err)
	}
}

// Ensure that, with three witnesses and quorum 2, Cosign and Check succeed
// with all up and with any one down, and fail with two down: Cosign with
// ErrNoQuorum naming both failures, Check with ErrTooFewAnswers.
func TestQuorumWitnessesDown(t *testing.T) {
	for _, tc := range []struct {
		name     string
		down     []int
		cosignOK bool
		checkOK  bool
	}{
		{"all up", nil, true, true},
		{"first down", []int{0}, true, true},
		{"last down", []int{2}, true, true},
		{"two down", []int{0, 2}, false, false},
		{"all down", []int{0, 1, 2}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newQFixture(t, 3)
			f.cosignAll(t, f.main, 4)
			q := f.quorum(t, 2)
			for _, i := range tc.down {
				f.ws[i].down()
			}
			ctx := context.Background()
			res, err := q.Cosign(ctx, f.signed(t, f.main, 9), prove(t, f.main, 9))
			if tc.cosignOK {
				if err != nil || len(res.Cosigned) != 2 || res.Size != 9 {
					t.Fatalf("Cosign = %+v, %v; want 2 cosignatures of size 9", res, err)
				}
				// The lines verify as the members' cosignatures of the note.
				withLines := append(f.signed(t, f.main, 9), res.Lines()...)
				for _, c := range res.Cosigned {
					var v *checkpoint.CosignatureVerifier
					for _, w := range f.ws {
						if w.name == c.Member {
							v = w.cosv
						}
					}
					if _, _, err := checkpoint.Open(withLines, v); err != nil {
						t.Errorf("cosignature of %s does not verify on the note: %v", c.Member, err)
					}
				}
			} else {
				var qe *witness.QuorumError
				if !errors.Is(err, witness.ErrNoQuorum) || !errors.As(err, &qe) || len(qe.Failures) < 2 {
					t.Fatalf("Cosign = %+v, %v; want ErrNoQuorum with the failures", res, err)
				}
				for _, i := range tc.down {
					if !strings.Contains(err.Error(), f.ws[i].name+": ") {
						t.Errorf("error does not name %s: %v", f.ws[i].name, err)
					}
				}
			}
			cres, err := q.Check(ctx, f.origin, f.local(t, f.main, 9), consistency(f.main))
			if tc.checkOK {
				if err != nil || cres.Answers != 3-len(tc.down) || cres.Needed != 2 {
					t.Fatalf("Check = %+v, %v", cres, err)
				}
				for i, a := range cres.Members {
					if a.Answered && a.Size != 4 && a.Size != 9 {
						t.Errorf("member %d answered size %d", i, a.Size)
					}
				}
			} else if !errors.Is(err, witness.ErrTooFewAnswers) {
				t.Fatalf("Check = %+v, %v; want ErrTooFewAnswers", cres, err)
			}
		})
	}
}

// Ensure that a witness ahead of the local log (a receiver restored with
// its anchor: its checkpoint is older than what the witnesses cosigned) is
// ErrRollbackDetected at Check, with one witness down too, naming the
// witness and both sizes; and that Cosign of the older checkpoint reports
// each witness ahead as a rollback, not retried, and reaches no quorum.
func TestQuorumRollback(t *testing.T) {
	for _, down := range []int{-1, 0, 1} {
		t.Run(fmt.Sprintf("down %d", down), func(t *testing.T) {
			f := newQFixture(t, 3)
			f.cosignAll(t, f.main, 20)
			q := f.quorum(t, 2)
			if down >= 0 {
				f.ws[down].down()
			}
			ctx := context.Background()
			_, err := q.Check(ctx, f.origin, f.local(t, f.main, 10), consistency(f.main))
			var d *witness.DivergenceError
			if !errors.Is(err, witness.ErrRollbackDetected) || !errors.As(err, &d) {
				t.Fatalf("Check = %v; want ErrRollbackDetected", err)
			}
			if d.WitnessSize != 20 || d.LocalSize != 10 || !d.RootKnown || d.WitnessRoot != f.main.root(t, 20) ||
				!strings.Contains(err.Error(), "size 20") || !strings.Contains(err.Error(), "local size 10") {
				t.Errorf("detail: %+v: %v", d, err)
			}
			res, err := q.Cosign(ctx, f.signed(t, f.main, 10), prove(t, f.main, 10))
			if !errors.Is(err, witness.ErrNoQuorum) || !errors.Is(err, witness.ErrRollbackDetected) || len(res.Cosigned) != 0 {
				t.Fatalf("Cosign = %+v, %v; want ErrNoQuorum and ErrRollbackDetected", res, err)
			}
			if !strings.Contains(err.Error(), "cosigned size 20 (root not told); local size 10") {
				t.Errorf("Cosign error: %v", err)
			}
			// The checkpoint at 20 itself still checks.
			if _, err := q.Check(ctx, f.origin, f.local(t, f.main, 20), consistency(f.main)); err != nil {
				t.Fatalf("Check at the witnesses' size: %v", err)
			}
		})
	}
}

// Ensure that a witness holding another tree of the log is ErrForkDetected
// at Check: the same size with another root, and a smaller size whose
// consistency with the local tree does not verify; and that Cosign of the
// local checkpoint to such a witness is refused as a fork.
func TestQuorumFork(t *testing.T) {
	for _, tc := range []struct {
		name     string
		forkSize int64
	}{
		{"same size", 10},
		{"smaller size", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newQFixture(t, 3)
			fork := newTree(t, "fork", tc.forkSize)
			// Only one witness saw the fork: one is enough to refuse.
			f.cosignAll(t, fork, tc.forkSize, f.ws[1])
			f.cosignAll(t, f.main, 10, f.ws[0], f.ws[2])
			q := f.quorum(t, 2)
			ctx := context.Background()
			res, err := q.Check(ctx, f.origin, f.local(t, f.main, 10), consistency(f.main))
			var d *witness.DivergenceError
			if !errors.Is(err, witness.ErrForkDetected) || !errors.As(err, &d) || d.Member != f.ws[1].name ||
				d.WitnessSize != uint64(tc.forkSize) || d.WitnessRoot != fork.root(t, tc.forkSize) {
				t.Fatalf("Check = %+v, %v; want ErrForkDetected at %s", res, err, f.ws[1].name)
			}
			if res.Members[1].Err == nil || res.Members[0].Err != nil {
				t.Errorf("members: %+v", res.Members)
			}
			// With K = 3 the forked witness's refusal is waited for.
			cres, err := f.quorum(t, 3).Cosign(ctx, f.signed(t, f.main, 12), prove(t, f.main, 12))
			if !errors.Is(err, witness.ErrNoQuorum) || !errors.Is(err, witness.ErrForkDetected) {
				t.Fatalf("Cosign = %+v, %v; want ErrNoQuorum and ErrForkDetected", cres, err)
			}
			if err := failureOf(cres.Failures, f.ws[1].name); !errors.As(err, &d) || d.WitnessSize != uint64(tc.forkSize) || d.RootKnown {
				t.Errorf("forked witness's failure: %v", err)
			}
			for _, c := range cres.Cosigned {
				if c.Member == f.ws[1].name {
					t.Errorf("the forked witness cosigned")
				}
			}
		})
	}
}

// Ensure that a witness that cosigned the local tree's size and root with
// other extension lines (another state digest for one tree) is
// ErrForkDetected: the log signed two statements about one size.
func TestQuorumForkExtensions(t *testing.T) {
	f := newQFixture(t, 3)
	withState := f.local(t, f.main, 10)
	withState.Extensions = []string{"kvfence-state aaaa"}
	msg, err := checkpoint.Sign(withState, f.signer)
	if err != nil {
		t.Fatal(err)
	}
	q1, _ := witness.NewQuorum(witness.QuorumOptions{Members: membersOf(f.ws[:1]), Quorum: 1, Log: f.logv})
	if _, err := q1.Cosign(context.Background(), msg, prove(t, f.main, 10)); err != nil {
		t.Fatal(err)
	}
	q := f.quorum(t, 2)
	res, err := q.Check(context.Background(), f.origin, f.local(t, f.main, 10), consistency(f.main))
	var d *witness.DivergenceError
	if !errors.Is(err, witness.ErrForkDetected) || !errors.As(err, &d) || d.Member != f.ws[0].name || !strings.Contains(err.Error(), "extension lines") {
		t.Fatalf("Check = %+v, %v; want ErrForkDetected for other extension lines", res, err)
	}
	if !bytes.HasPrefix(res.Members[0].Note, msg[:len(msg)-1]) {
		t.Errorf("the witness's note is not kept as evidence: %q", res.Members[0].Note)
	}
	if _, err := q.Check(context.Background(), f.origin, withState, consistency(f.main)); err != nil {
		t.Fatalf("Check of the body the witness cosigned: %v", err)
	}
}

// Ensure that a witness behind the quorum's idea of it (here: a quorum
// that knows nothing, witnesses at 4 and 10) is caught up through the 409
// answer: asked from size 0, it answers its size, and the retry from that
// size with a proof is cosigned; the quorum then remembers each size.
func TestQuorumCatchUp(t *testing.T) {
	f := newQFixture(t, 3)
	f.cosignAll(t, f.main, 10, f.ws[0], f.ws[1])
	f.cosignAll(t, f.main, 4, f.ws[2])
	q := f.quorum(t, 3)
	if _, known := q.LastCosigned(f.ws[2].name); known {
		t.Fatal("a new quorum knows a size")
	}
	var asked sync.Map
	res, err := q.Cosign(context.Background(), f.signed(t, f.main, 15), func(old uint64) (tlog.TreeProof, error) {
		asked.Store(old, true)
		return tlog.ProveTree(15, int64(old), f.main)
	})
	if err != nil || len(res.Cosigned) != 3 {
		t.Fatalf("Cosign = %+v, %v", res, err)
	}
	for _, old := range []uint64{4, 10} {
		if _, ok := asked.Load(old); !ok {
			t.Errorf("no proof asked from size %d", old)
		}
	}
	for _, w := range f.ws {
		if size, known := q.LastCosigned(w.name); !known || size != 15 {
			t.Errorf("%s: last cosigned %d, %v", w.name, size, known)
		}
	}
	// The next round starts from 15: no conflict, one proof from 15.
	asked = sync.Map{}
	if _, err := q.Cosign(context.Background(), f.signed(t, f.main, 16), func(old uint64) (tlog.TreeProof, error) {
		asked.Store(old, true)
		return tlog.ProveTree(16, int64(old), f.main)
	}); err != nil {
		t.Fatal(err)
	}
	n := 0
	asked.Range(func(k, _ any) bool {
		if k.(uint64) != 15 {
			t.Errorf("proof asked from %d", k)
		}
		n++
		return true
	})
	if n != 1 {
		t.Errorf("%d distinct proofs asked", n)
	}
}

// Ensure that a member whose answers are signed by another key than the
// member's does not count: its cosignature is not one of K at Cosign, and
// its latest checkpoint is not an answer at Check; likewise an answer
// whose checkpoint is not signed by the log's key, and a 404 that is not
// the witness saying it has nothing.
func TestQuorumWrongKeys(t *testing.T) {
	f := newQFixture(t, 3)
	f.cosignAll(t, f.main, 5)
	impostor, _ := checkpoint.NewCosignatureVerifier(f.ws[0].name, key(99).Public().(ed25519.PublicKey), checkpoint.CosignatureVerifierOptions{})
	ms := f.members()
	ms[0].Verifier = impostor
	q, err := witness.NewQuorum(witness.QuorumOptions{Members: ms, Quorum: 2, Log: f.logv})
	if err != nil {
		t.Fatal(err)
	}
	f.ws[1].down()
	ctx := context.Background()
	res, err := q.Cosign(ctx, f.signed(t, f.main, 8), prove(t, f.main, 8))
	if !errors.Is(err, witness.ErrNoQuorum) {
		t.Fatalf("Cosign = %+v, %v; want ErrNoQuorum", res, err)
	}
	for _, c := range res.Cosigned {
		if c.Member == f.ws[0].name {
			t.Fatalf("the impostor's cosignature counted: %+v", res)
		}
	}
	if fl := res.Failures; len(fl) < 2 || !errors.Is(failureOf(fl, f.ws[0].name), witness.ErrUnexpectedResponse) {
		t.Fatalf("failures %+v; want the impostor's ErrUnexpectedResponse", fl)
	}
	cres, err := q.Check(ctx, f.origin, f.local(t, f.main, 8), consistency(f.main))
	if !errors.Is(err, witness.ErrTooFewAnswers) || cres.Members[0].Answered {
		t.Fatalf("Check = %+v, %v; want the impostor not to answer", cres, err)
	}

	// A witness that trusts another key for the log's origin and holds a
	// larger tree signed by it: not an answer, so not a rollback either.
	g := newQFixture(t, 3)
	g.cosignAll(t, g.main, 5)
	rogue, _ := checkpoint.NewSigner(g.origin, key(98))
	rogueVkey, _ := checkpoint.VerifierKey(g.origin, key(98).Public().(ed25519.PublicKey))
	path := filepath.Join(t.TempDir(), "rogue.db")
	if err := witness.Create(path, g.ws[0].name, g.ws[0].key.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}
	st, _ := witness.OpenStore(path, witness.StoreOptions{})
	defer st.Close()
	if err := st.Trust(g.origin, rogueVkey); err != nil {
		t.Fatal(err)
	}
	wit, _ := witness.New(st, g.ws[0].key, witness.Options{})
	rsrv := httptest.NewServer(witness.NewServer(wit, nil))
	defer rsrv.Close()
	rc, _ := witness.NewClient(rsrv.URL, witness.ClientOptions{})
	g.main.grow(t, 30)
	big, _ := checkpoint.Sign(g.local(t, g.main, 30), rogue)
	if _, err := rc.AddCheckpoint(ctx, 0, nil, big); err != nil {
		t.Fatal(err)
	}
	gm := g.members()
	gm[0].Client = rc
	// A 404 page of something that is not a witness.
	notFound, _ := witness.NewClient(g.ws[2].srv.URL+"/not-the-witness", witness.ClientOptions{})
	gm[2].Client = notFound
	gq, err := witness.NewQuorum(witness.QuorumOptions{Members: gm, Quorum: 2, Log: g.logv})
	if err != nil {
		t.Fatal(err)
	}
	cres, err = gq.Check(ctx, g.origin, g.local(t, g.main, 5), consistency(g.main))
	if !errors.Is(err, witness.ErrTooFewAnswers) || errors.Is(err, witness.ErrRollbackDetected) ||
		cres.Members[0].Answered || cres.Members[2].Answered || !cres.Members[1].Answered {
		t.Fatalf("Check = %+v, %v; want only %s to answer", cres, err, g.ws[1].name)
	}
	if !errors.Is(cres.Members[2].Err, witness.ErrUnexpectedResponse) {
		t.Errorf("a plain 404 page: %v", cres.Members[2].Err)
	}
}

// Ensure that a witness with nothing cosigned, saying so, is an answer of
// size 0 (consistent with any local tree), and one that does not know the
// origin is not an answer.
func TestQuorumCheckNone(t *testing.T) {
	f := newQFixture(t, 3)
	q := f.quorum(t, 2)
	res, err := q.Check(context.Background(), f.origin, f.local(t, f.main, 7), consistency(f.main))
	if err != nil || res.Answers != 3 || res.Members[0].Size != 0 {
		t.Fatalf("Check = %+v, %v", res, err)
	}
	other, _ := checkpoint.ReceiverOrigin("r2", key(1).Public().(ed25519.PublicKey))
	_, err = q.Check(context.Background(), other, checkpoint.Checkpoint{Origin: other, Size: 7, Root: f.main.root(t, 7)}, consistency(f.main))
	if !errors.Is(err, witness.ErrTooFewAnswers) || !strings.Contains(err.Error(), witness.ErrUnknownLog.Error()) {
		t.Fatalf("Check of an origin no witness knows = %v; want ErrTooFewAnswers", err)
	}
}

// countingTransport counts the requests in flight through it.
type countingTransport struct {
	mu       sync.Mutex
	inFlight int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.inFlight++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inFlight--
		c.mu.Unlock()
	}()
	return http.DefaultTransport.RoundTrip(r)
}

func (c *countingTransport) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight
}

// Ensure that Cosign returns as soon as K witnesses cosigned, not when the
// slowest answers: one witness blocks until the test releases it, which it
// does only after Cosign returned, so a Cosign that waited for every
// member would wait until its context's deadline and report the blocked
// member as failed. The blocked member's request has ended when Cosign
// returns (cancelled, not left running).
func TestQuorumSlowWitness(t *testing.T) {
	f := newQFixture(t, 3)
	counting := &countingTransport{}
	slow, err := witness.NewClient(f.ws[0].srv.URL, witness.ClientOptions{HTTPClient: &http.Client{Transport: counting}})
	if err != nil {
		t.Fatal(err)
	}
	ms := f.members()
	ms[0].Client = slow
	q, err := witness.NewQuorum(witness.QuorumOptions{Members: ms, Quorum: 2, Log: f.logv})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	f.ws[0].setGate(release)
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := q.Cosign(ctx, f.signed(t, f.main, 3), prove(t, f.main, 3))
	if err != nil || ctx.Err() != nil {
		t.Fatalf("Cosign = %+v, %v (context: %v)", res, err, ctx.Err())
	}
	if got := names(res.Cosigned); len(got) != 2 || len(res.Failures) != 0 {
		t.Fatalf("cosigned by %v, failures %v; want the two fast witnesses and no failure", got, res.Failures)
	}
	for _, c := range res.Cosigned {
		if c.Member == f.ws[0].name {
			t.Fatalf("the blocked witness cosigned")
		}
	}
	if n := counting.count(); n != 0 {
		t.Fatalf("%d requests to the blocked witness still in flight after Cosign returned", n)
	}
}

// Ensure that rounds of one quorum run one at a time: while a round waits
// for a blocked witness, a second Cosign waits for it (here, until its own
// context ends) instead of reaching the witnesses, where it could overtake
// the first and make it look like a rollback.
func TestQuorumRoundsOneAtATime(t *testing.T) {
	f := newQFixture(t, 3)
	q := f.quorum(t, 3)
	release := make(chan struct{})
	// Released before the servers close, even when the test fails.
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	f.ws[0].setGate(release)
	first := make(chan error, 1)
	msg := f.signed(t, f.main, 3)
	go func() {
		_, err := q.Cosign(context.Background(), msg, prove(t, f.main, 3))
		first <- err
	}()
	// Wait until the first round is at the witnesses.
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, known := q.LastCosigned(f.ws[1].name); known {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first round never reached the witnesses")
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := q.Cosign(ctx, f.signed(t, f.main, 5), prove(t, f.main, 5))
	if !errors.Is(err, context.Canceled) || errors.Is(err, witness.ErrNoQuorum) {
		t.Fatalf("second Cosign = %v; want it to wait for the round and end with its context", err)
	}
	f.ws[0].setGate(nil)
	releaseOnce()
	if err := <-first; err != nil {
		t.Fatalf("first Cosign: %v", err)
	}
	for _, w := range f.ws {
		if size, _ := q.LastCosigned(w.name); size != 3 {
			t.Errorf("%s at %d, want 3", w.name, size)
		}
	}
}

// Ensure that Check refuses a local checkpoint it cannot compare, before
// asking any witness.
func TestQuorumCheckRefusesLocal(t *testing.T) {
	f := newQFixture(t, 3)
	q := f.quorum(t, 2)
	other, _ := checkpoint.ReceiverOrigin("r2", key(1).Public().(ed25519.PublicKey))
	for _, tc := range []struct {
		name    string
		local   checkpoint.Checkpoint
		prove   witness.ConsistencyFunc
		message string
	}{
		{"another origin", checkpoint.Checkpoint{Origin: other, Size: 1}, consistency(f.main), "not \""},
		{"size over 2^62", checkpoint.Checkpoint{Origin: f.origin, Size: checkpoint.MaxSize + 1}, consistency(f.main), "over 2^62"},
		{"size 0 with a root", checkpoint.Checkpoint{Origin: f.origin, Size: 0, Root: tlog.Hash{1}}, consistency(f.main), "empty tree"},
		{"no proof function", f.local(t, f.main, 2), nil, "no proof function"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := q.Check(context.Background(), f.origin, tc.local, tc.prove)
			if err == nil || !strings.Contains(err.Error(), tc.message) || res.Answers != 0 {
				t.Fatalf("Check = %+v, %v; want an error saying %q", res, err, tc.message)
			}
		})
	}
}

// Ensure that a proof the local log cannot give fails Check, rather than
// leaving out the witness it was for.
func TestQuorumCheckProveError(t *testing.T) {
	f := newQFixture(t, 3)
	f.cosignAll(t, f.main, 4)
	q := f.quorum(t, 2)
	broken := errors.New("no stored hashes")
	_, err := q.Check(context.Background(), f.origin, f.local(t, f.main, 9), func(uint64, uint64) (tlog.TreeProof, error) {
		return nil, broken
	})
	if !errors.Is(err, broken) {
		t.Fatalf("Check = %v; want the proof's error", err)
	}
}

// Ensure that Cosign refuses a note the log did not sign before asking any
// witness.
func TestQuorumCosignUnsigned(t *testing.T) {
	f := newQFixture(t, 3)
	q := f.quorum(t, 2)
	other, _ := checkpoint.NewSigner(f.origin, key(97))
	msg, _ := checkpoint.Sign(f.local(t, f.main, 3), other)
	if _, err := q.Cosign(context.Background(), msg, prove(t, f.main, 3)); !errors.Is(err, checkpoint.ErrUnverified) {
		t.Fatalf("Cosign of a note by another key = %v", err)
	}
	for _, w := range f.ws {
		if _, err := w.client.Latest(context.Background(), f.origin); !errors.Is(err, witness.ErrNoCheckpoint) {
			t.Errorf("%s was asked: %v", w.name, err)
		}
	}
}

// ExampleQuorum_Cosign has three witnesses, any two of which acknowledge a
// receiver's checkpoint, cosign it, and checks a restored receiver's older
// checkpoint against them.
func ExampleQuorum_Cosign() {
	tb := &exampleTB{}
	defer tb.cleanup()
	f := newQFixture(tb, 3) // three witnesses serving, trusting receiver r1

	var members []witness.Member
	for _, w := range f.ws {
		client, err := witness.NewClient(w.srv.URL, witness.ClientOptions{})
		if err != nil {
			panic(err)
		}
		pub := w.key.Public().(ed25519.PublicKey) // from --witness-pub NAME=FILE
		v, err := checkpoint.NewCosignatureVerifier(w.name, pub, checkpoint.CosignatureVerifierOptions{})
		if err != nil {
			panic(err)
		}
		members = append(members, witness.Member{Name: w.name, Client: client, Verifier: v})
	}
	q, err := witness.NewQuorum(witness.QuorumOptions{
		Members: members,
		Quorum:  2,
		Log:     f.logv, // the receiver's checkpoint key, checkpoint.NewVerifier(origin, pub)
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	signed := f.signed(tb, f.main, 10) // Receiver.SignedCheckpoint
	res, err := q.Cosign(ctx, signed, func(old uint64) (tlog.TreeProof, error) {
		return tlog.ProveTree(10, int64(old), f.main) // Receiver.ConsistencyProof(old, 10)
	})
	fmt.Println("cosigned:", len(res.Cosigned), err)

	// At open: the receiver's own checkpoint against every witness's.
	// Restored from a backup of size 6, it is behind the witnesses.
	restored := f.local(tb, f.main, 6)
	_, err = q.Check(ctx, f.origin, restored, func(old, n uint64) (tlog.TreeProof, error) {
		return tlog.ProveTree(int64(n), int64(old), f.main) // Receiver.ConsistencyProof(old, n)
	})
	fmt.Println("rollback:", errors.Is(err, witness.ErrRollbackDetected))
	// Output:
	// cosigned: 2 <nil>
	// rollback: true
}

// exampleTB lets an example use the test fixtures: a failure panics, and
// cleanup runs what the fixtures registered.
type exampleTB struct {
	testing.TB
	cleanups []func()
	dirs     []string
}

func (*exampleTB) Helper()                   {}
func (e *exampleTB) Cleanup(f func())        { e.cleanups = append(e.cleanups, f) }
func (*exampleTB) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (*exampleTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

func (e *exampleTB) TempDir() string {
	d, err := os.MkdirTemp("", "quorum-example")
	if err != nil {
		panic(err)
	}
	e.dirs = append(e.dirs, d)
	return d
}

func (e *exampleTB) cleanup() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	for _, d := range e.dirs {
		os.RemoveAll(d)
	}
}

// BenchmarkQuorumCosign measures one round of three witnesses on loopback
// with quorum 2 (each cosignature fsynced by its witness), the tree
// growing by one entry per round.
func BenchmarkQuorumCosign(b *testing.B) {
	f := newQFixture(b, 3)
	q := f.quorum(b, 2)
	f.main.grow(b, int64(b.N)+1)
	msgs := make([][]byte, b.N)
	for i := range msgs {
		msgs[i] = f.signed(b, f.main, int64(i)+1)
	}
	ctx := context.Background()
	var proofs atomic.Int64
	b.ResetTimer()
	for i := range b.N {
		n := int64(i) + 1
		if _, err := q.Cosign(ctx, msgs[i], func(old uint64) (tlog.TreeProof, error) {
			proofs.Add(1)
			return tlog.ProveTree(n, int64(old), f.main)
		}); err != nil {
			b.Fatal(err)
		}
	}
	// Three is one proof per witness; more are 409 retries of a witness
	// whose request was cancelled after the server had committed it.
	b.ReportMetric(float64(proofs.Load())/float64(b.N), "proofs/op")
}

// Ensure that Cosign follows a witness whose size moves between two of a
// round's requests (a cancelled request of an earlier round landing
// meanwhile): 409 at 2 from 0, then 409 at 3 from 2, then cosigned from
// 3; and that a size that goes back is not followed.
func TestQuorumConflictSizeMoves(t *testing.T) {
	f := newQFixture(t, 0)
	wkey := key(40)
	name := "witness.test/moving"
	cosv, _ := checkpoint.NewCosignatureVerifier(name, wkey.Public().(ed25519.PublicKey), checkpoint.CosignatureVerifierOptions{})
	for _, tc := range []struct {
		name    string
		answers map[uint64]uint64 // old size asked from -> size told in a 409
		ok      bool
	}{
		{"grows twice", map[uint64]uint64{0: 2, 2: 3}, true},
		{"goes back", map[uint64]uint64{0: 3, 3: 2}, false},
		{"grows for ever", map[uint64]uint64{0: 1, 1: 2, 2: 3, 3: 4}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []uint64
			srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				raw, _ := io.ReadAll(r.Body)
				req, err := witness.ParseAddCheckpoint(raw)
				if err != nil {
					http.Error(rw, err.Error(), http.StatusBadRequest)
					return
				}
				asked = append(asked, req.OldSize)
				if size, ok := tc.answers[req.OldSize]; ok {
					rw.Header().Set("Content-Type", witness.SizeContentType)
					rw.WriteHeader(http.StatusConflict)
					fmt.Fprintf(rw, "%d\n", size)
					return
				}
				body, _, _ := bytes.Cut(req.SignedNote, []byte("\n\n"))
				line, _ := checkpoint.Cosign(append(body, '\n'), name, wkey, time.Now())
				rw.Write([]byte(line))
			}))
			defer srv.Close()
			c, _ := witness.NewClient(srv.URL, witness.ClientOptions{})
			q, err := witness.NewQuorum(witness.QuorumOptions{Members: []witness.Member{{Name: name, Client: c, Verifier: cosv}},
				Quorum: 1, Log: f.logv})
			if err != nil {
				t.Fatal(err)
			}
			tr := newTree(t, "main", 0)
			_, err = q.Cosign(context.Background(), f.signed(t, tr, 5), prove(t, tr, 5))
			if (err == nil) != tc.ok {
				t.Fatalf("Cosign: %v (asked from %v), want ok %v", err, asked, tc.ok)
			}
		})
	}
}
