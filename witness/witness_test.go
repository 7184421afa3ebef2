package witness_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/witness"
)

func key(b byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{b}, ed25519.SeedSize))
}

// tree is an RFC 6962 tree of records "<tag> <i>", kept as tlog's stored
// hashes.
type tree struct {
	tag    string
	hashes []tlog.Hash
	n      int64
}

func (tr *tree) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		if x >= int64(len(tr.hashes)) {
			return nil, fmt.Errorf("hash %d not stored", x)
		}
		out[i] = tr.hashes[x]
	}
	return out, nil
}

func newTree(t testing.TB, tag string, n int64) *tree {
	tr := &tree{tag: tag}
	tr.grow(t, n)
	return tr
}

func (tr *tree) grow(t testing.TB, n int64) {
	for ; tr.n < n; tr.n++ {
		h, err := tlog.StoredHashes(tr.n, fmt.Appendf(nil, "%s %d", tr.tag, tr.n), tr)
		if err != nil {
			t.Fatal(err)
		}
		tr.hashes = append(tr.hashes, h...)
	}
}

func (tr *tree) root(t testing.TB, n int64) tlog.Hash {
	h, err := tlog.TreeHash(n, tr)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (tr *tree) proof(t testing.TB, old, n int64) tlog.TreeProof {
	if old == 0 || old == n {
		return nil
	}
	p, err := tlog.ProveTree(n, old, tr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fixture is a witness trusting one receiver, served over httptest.
type fixture struct {
	path    string
	origin  string
	logKey  ed25519.PrivateKey
	signer  note.Signer
	wKey    ed25519.PrivateKey
	store   *witness.Store
	srv     *httptest.Server
	client  *witness.Client
	cosv    *checkpoint.CosignatureVerifier
	logv    note.Verifier
	trusted *tree
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{path: filepath.Join(t.TempDir(), "witness.db"), logKey: key(1), wKey: key(2)}
	if err := witness.Create(f.path, "witness.test/w1", f.wKey.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}
	f.origin, _ = checkpoint.ReceiverOrigin("r1", f.logKey.Public().(ed25519.PublicKey))
	f.signer, _ = checkpoint.NewSigner(f.origin, f.logKey)
	f.logv, _ = checkpoint.NewVerifier(f.origin, f.logKey.Public().(ed25519.PublicKey))
	f.cosv, _ = checkpoint.NewCosignatureVerifier("witness.test/w1", f.wKey.Public().(ed25519.PublicKey), checkpoint.CosignatureVerifierOptions{})
	f.open(t)
	vkey, _ := checkpoint.VerifierKey(f.origin, f.logKey.Public().(ed25519.PublicKey))
	if err := f.store.Trust(f.origin, vkey); err != nil {
		t.Fatal(err)
	}
	f.trusted = newTree(t, "main", 0)
	t.Cleanup(func() { f.close() })
	return f
}

func (f *fixture) open(t testing.TB) {
	t.Helper()
	st, err := witness.OpenStore(f.path, witness.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := witness.New(st, f.wKey, witness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.store = st
	f.srv = httptest.NewServer(witness.NewServer(w, nil))
	f.client, err = witness.NewClient(f.srv.URL, witness.ClientOptions{Verifier: f.cosv})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) close() {
	if f.srv != nil {
		f.srv.Close()
		f.store.Close()
		f.srv = nil
	}
}

func (f *fixture) note(t testing.TB, size int64, root tlog.Hash) []byte {
	msg, err := checkpoint.Sign(checkpoint.Checkpoint{Origin: f.origin, Size: uint64(size), Root: root}, f.signer)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// post sends a raw add-checkpoint body and returns the status, content
// type and body.
func (f *fixture) post(t *testing.T, body []byte) (int, string, string) {
	t.Helper()
	resp, err := http.Post(f.srv.URL+witness.AddCheckpointPath, "text/plain", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

func (f *fixture) add(t *testing.T, tr *tree, old, n int64) (string, error) {
	t.Helper()
	tr.grow(t, n)
	return f.client.AddCheckpoint(context.Background(), uint64(old), tr.proof(t, old, n), f.note(t, n, tr.root(t, n)))
}

func req(old uint64, proof tlog.TreeProof, msg []byte) []byte {
	return witness.AddCheckpointRequest{OldSize: old, Proof: proof, SignedNote: msg}.Marshal()
}

// Ensure that the server gives every answer c2sp.org/tlog-witness names,
// for the case it names, and that no refused request moves the witness.
func TestServerAnswers(t *testing.T) {
	f := newFixture(t)
	main := f.trusted
	main.grow(t, 20)
	fork := newTree(t, "fork", 20)
	if _, err := f.add(t, main, 0, 8); err != nil {
		t.Fatal(err)
	}
	otherSigner, _ := checkpoint.NewSigner(f.origin, key(9))
	byOther, _ := checkpoint.Sign(checkpoint.Checkpoint{Origin: f.origin, Size: 10, Root: main.root(t, 10)}, otherSigner)
	unknownOrigin, _ := checkpoint.Sign(checkpoint.Checkpoint{Origin: "example.com/other", Size: 10, Root: main.root(t, 10)}, otherSigner)
	good := f.note(t, 10, main.root(t, 10))
	badSig := bytes.Replace(good, []byte("\n10\n"), []byte("\n11\n"), 1)
	empty, _ := tlog.TreeHash(0, nil)
	tooMany := make(tlog.TreeProof, 64)
	for _, tc := range []struct {
		name   string
		body   []byte
		status int
		ctype  string
		answer string
	}{
		{"stale old size", req(5, nil, good), http.StatusConflict, witness.SizeContentType, "8\n"},
		{"old zero when the witness has 8", req(0, nil, good), http.StatusConflict, witness.SizeContentType, "8\n"},
		{"proof of another tree", req(8, fork.proof(t, 8, 10), f.note(t, 10, fork.root(t, 10))), http.StatusUnprocessableEntity, "", ""},
		{"root of another tree with a valid proof", req(8, main.proof(t, 8, 10), f.note(t, 10, fork.root(t, 10))), http.StatusUnprocessableEntity, "", ""},
		{"empty proof", req(8, nil, good), http.StatusUnprocessableEntity, "", ""},
		{"truncated proof", req(8, main.proof(t, 8, 10)[1:], good), http.StatusUnprocessableEntity, "", ""},
		{"same size other root", req(8, nil, f.note(t, 8, fork.root(t, 8))), http.StatusUnprocessableEntity, "", ""},
		{"same size with a proof", req(8, main.proof(t, 4, 8), f.note(t, 8, main.root(t, 8))), http.StatusUnprocessableEntity, "", ""},
		{"unknown origin", req(8, main.proof(t, 8, 10), unknownOrigin), http.StatusNotFound, "", ""},
		{"signed by another key", req(8, main.proof(t, 8, 10), byOther), http.StatusForbidden, "", ""},
		{"bad signature", req(8, main.proof(t, 8, 10), badSig), http.StatusForbidden, "", ""},
		{"old above size", req(12, nil, good), http.StatusBadRequest, "", ""},
		{"no old line", []byte("\n" + string(good)), http.StatusBadRequest, "", ""},
		{"old with leading zero", []byte("old 08\n\n" + string(good)), http.StatusBadRequest, "", ""},
		{"proof line not base64", []byte("old 8\nnot-a-hash\n\n" + string(good)), http.StatusBadRequest, "", ""},
		{"64 proof lines", req(8, tooMany, good), http.StatusBadRequest, "", ""},
		{"no checkpoint", []byte("old 8\n\n"), http.StatusBadRequest, "", ""},
		{"not a note", []byte("old 8\n\nhello\n"), http.StatusBadRequest, "", ""},
		{"malformed checkpoint under the trusted key", req(8, nil, mustSign(t, f.signer, f.origin+"\n010\n"+main.root(t, 10).String()+"\n")), http.StatusBadRequest, "", ""},
		{"too large", append([]byte("old 8\n\n"), bytes.Repeat([]byte("x"), witness.MaxRequestSize)...), http.StatusRequestEntityTooLarge, "", ""},
		{"size zero with another root", req(0, nil, f.note(t, 0, main.root(t, 1))), http.StatusConflict, "", "8\n"},
		{"good", req(8, main.proof(t, 8, 10), good), http.StatusOK, "", "— witness.test/w1 "},
		{"good again (idempotent)", req(10, nil, good), http.StatusOK, "", "— witness.test/w1 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ctype, answer := f.post(t, tc.body)
			if status != tc.status || (tc.ctype != "" && ctype != tc.ctype) || !strings.HasPrefix(answer, tc.answer) {
				t.Fatalf("%d %q %q; want %d %q %q", status, ctype, answer, tc.status, tc.ctype, tc.answer)
			}
			if status == http.StatusOK {
				if _, err := f.cosv.VerifyLine(checkpoint.Checkpoint{Origin: f.origin, Size: 10, Root: main.root(t, 10)}.Marshal(), answer); err != nil {
					t.Fatalf("cosignature: %v", err)
				}
				return
			}
			st, err := f.store.Log(f.origin)
			if err != nil || st.Size != 8 || st.Root != main.root(t, 8) {
				t.Fatalf("a refused request moved the witness: %+v %v", st, err)
			}
		})
	}
	_ = empty

	// Size zero: only the empty tree's root, on a fresh log.
	g := newFixture(t)
	if status, _, answer := g.post(t, req(0, nil, g.note(t, 0, main.root(t, 1)))); status != http.StatusUnprocessableEntity {
		t.Errorf("size 0 with a non-empty root: %d %q", status, answer)
	}
	if status, _, answer := g.post(t, req(0, nil, g.note(t, 0, empty))); status != http.StatusOK {
		t.Errorf("size 0 with the empty root: %d %q", status, answer)
	}
	if status, _, answer := g.post(t, req(0, main.proof(t, 4, 8), g.note(t, 8, main.root(t, 8)))); status != http.StatusUnprocessableEntity {
		t.Errorf("a proof from size 0: %d %q", status, answer)
	}
	for _, m := range []string{http.MethodGet, http.MethodPut} {
		r, _ := http.NewRequest(m, g.srv.URL+witness.AddCheckpointPath, nil)
		resp, err := http.DefaultClient.Do(r)
		if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s add-checkpoint: %v %v", m, resp.StatusCode, err)
		}
		resp.Body.Close()
	}
}

func mustSign(t *testing.T, s note.Signer, text string) []byte {
	msg, err := note.Sign(&note.Note{Text: text}, s)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// Ensure that the witness follows a log across many sizes, in steps of
// every length, cosigning each checkpoint with a consistent proof, and
// refuses at every size the same step from a tree that forked.
func TestConsistencyAcrossSizes(t *testing.T) {
	f := newFixture(t)
	main := f.trusted
	main.grow(t, 300)
	old := int64(0)
	if _, err := f.add(t, main, 0, 1); err != nil {
		t.Fatal(err)
	}
	old = 1
	for step, n := int64(1), int64(2); n <= 300; step, n = step%17+1, n+step%17+1 {
		forkAt := newTree(t, fmt.Sprintf("fork%d", n), 0)
		// A tree that agrees with main on all leaves but the last one the
		// witness cosigned, and goes on from there.
		forkAt.hashes = append([]tlog.Hash(nil), main.hashes[:tlog.StoredHashCount(old-1)]...)
		forkAt.n = old - 1
		forkAt.grow(t, n)
		if _, err := f.add(t, forkAt, old, n); !errors.Is(err, witness.ErrBadProof) {
			t.Fatalf("fork at %d→%d: %v, want ErrBadProof", old, n, err)
		}
		line, err := f.add(t, main, old, n)
		if err != nil {
			t.Fatalf("%d→%d: %v", old, n, err)
		}
		if _, err := f.cosv.VerifyLine(checkpoint.Checkpoint{Origin: f.origin, Size: uint64(n), Root: main.root(t, n)}.Marshal(), line); err != nil {
			t.Fatal(err)
		}
		old = n
	}
	if st, _ := f.store.Log(f.origin); st.Size != uint64(old) {
		t.Fatalf("stored size %d, want %d", st.Size, old)
	}
}

// Ensure that the client returns each typed error, the conflict carrying
// the witness's size, and that a restarted witness keeps its latest
// checkpoint and serves it, cosigned, from both read endpoints.
func TestClientRestartLatest(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.client.Latest(ctx, f.origin); !errors.Is(err, witness.ErrNoCheckpoint) {
		t.Fatalf("Latest before any: %v", err)
	}
	if _, err := f.add(t, f.trusted, 0, 5); err != nil {
		t.Fatal(err)
	}
	f.close()
	f.open(t)
	_, err := f.add(t, f.trusted, 3, 6)
	var conflict *witness.ConflictError
	if !errors.As(err, &conflict) || conflict.Size != 5 || !errors.Is(err, witness.ErrConflict) {
		t.Fatalf("after restart: %v, want a conflict at 5", err)
	}
	fork := newTree(t, "fork", 6)
	if _, err := f.add(t, fork, 5, 6); !errors.Is(err, witness.ErrBadProof) {
		t.Errorf("fork: %v", err)
	}
	other := checkpoint.Checkpoint{Origin: "example.com/x", Size: 1, Root: tlog.Hash{}}
	otherSigner, _ := checkpoint.NewSigner("example.com/x", key(5))
	msg, _ := checkpoint.Sign(other, otherSigner)
	if _, err := f.client.AddCheckpoint(ctx, 0, nil, msg); !errors.Is(err, witness.ErrUnknownLog) {
		t.Errorf("unknown: %v", err)
	}
	otherSigner, _ = checkpoint.NewSigner(f.origin, key(5))
	msg, _ = checkpoint.Sign(checkpoint.Checkpoint{Origin: f.origin, Size: 6, Root: f.trusted.root(t, 6)}, otherSigner)
	if _, err := f.client.AddCheckpoint(ctx, 5, f.trusted.proof(t, 5, 6), msg); !errors.Is(err, witness.ErrForbidden) {
		t.Errorf("other key: %v", err)
	}
	if _, err := f.client.AddCheckpoint(ctx, 7, nil, f.note(t, 6, f.trusted.root(t, 6))); !errors.Is(err, witness.ErrBadRequest) {
		t.Errorf("old above size: %v", err)
	}

	latest, err := f.client.Latest(ctx, f.origin)
	if err != nil {
		t.Fatal(err)
	}
	c, n, err := checkpoint.Open(latest, f.logv)
	if err != nil || c.Size != 5 || c.Root != f.trusted.root(t, 5) {
		t.Fatalf("latest: %+v %v", c, err)
	}
	if n2, err := note.Open(latest, note.VerifierList(f.logv, f.cosv)); err != nil || len(n2.Sigs) != 2 || len(n2.UnverifiedSigs) != 0 {
		t.Fatalf("latest carries the log's signature and the cosignature only: %v %+v", err, n2)
	}
	_ = n
	sum := sha256.Sum256([]byte(f.origin))
	resp, err := http.Get(f.srv.URL + "/" + hex.EncodeToString(sum[:]) + "/checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	mon, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("monitor endpoint: %d", resp.StatusCode)
	}
	if _, err := note.Open(mon, note.VerifierList(f.logv, f.cosv)); err != nil {
		t.Errorf("monitor endpoint note: %v", err)
	}
	for _, u := range []string{"/" + strings.Repeat("0", 64) + "/checkpoint", witness.LatestPath + "?origin=nope", witness.LatestPath} {
		resp, err := http.Get(f.srv.URL + u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 && resp.StatusCode != 400 {
			t.Errorf("%s: %d", u, resp.StatusCode)
		}
	}

	// A client whose verifier is another witness's refuses the answer.
	wrong, _ := checkpoint.NewCosignatureVerifier("witness.test/w1", key(8).Public().(ed25519.PublicKey), checkpoint.CosignatureVerifierOptions{})
	wc, _ := witness.NewClient(f.srv.URL, witness.ClientOptions{Verifier: wrong})
	if _, err := wc.Latest(ctx, f.origin); !errors.Is(err, witness.ErrUnexpectedResponse) {
		t.Errorf("Latest with the wrong witness key: %v", err)
	}
	if _, err := wc.AddCheckpoint(ctx, 5, nil, f.note(t, 5, f.trusted.root(t, 5))); !errors.Is(err, witness.ErrUnexpectedResponse) {
		t.Errorf("AddCheckpoint with the wrong witness key: %v", err)
	}
}

// Ensure that the store refuses to be created over a file, to trust an
// origin again with another key, a verifier key named otherwise than its
// origin, and a witness key that is not the recorded one.
func TestStoreRefusals(t *testing.T) {
	f := newFixture(t)
	if err := witness.Create(f.path, "w", f.wKey.Public().(ed25519.PublicKey)); !errors.Is(err, witness.ErrExists) {
		t.Errorf("Create over a file: %v", err)
	}
	vkey2, _ := checkpoint.VerifierKey(f.origin, key(7).Public().(ed25519.PublicKey))
	if err := f.store.Trust(f.origin, vkey2); !errors.Is(err, witness.ErrAlreadyTrusted) {
		t.Errorf("re-trust with another key: %v", err)
	}
	vkey, _ := checkpoint.VerifierKey(f.origin, f.logKey.Public().(ed25519.PublicKey))
	if err := f.store.Trust(f.origin, vkey); err != nil {
		t.Errorf("re-trust with the same key: %v", err)
	}
	named, _ := checkpoint.VerifierKey("example.com/x", key(7).Public().(ed25519.PublicKey))
	if err := f.store.Trust("example.com/y", named); !errors.Is(err, checkpoint.ErrMalformed) {
		t.Errorf("vkey of another name: %v", err)
	}
	if _, err := witness.New(f.store, key(3), witness.Options{}); err == nil {
		t.Error("New accepted a key that is not the witness's")
	}
	if _, err := witness.OpenStore(filepath.Join(t.TempDir(), "none"), witness.StoreOptions{}); err == nil {
		t.Error("OpenStore created a database")
	}
	_ = time.Second
}

// FuzzAddCheckpointRequest checks that whatever ParseAddCheckpoint accepts
// marshals back to exactly the input, and everything else is ErrBadRequest.
func FuzzAddCheckpointRequest(f *testing.F) {
	f.Add([]byte("old 20852014\nPlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=\njrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=\n\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n— example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"))
	f.Add([]byte("old 0\n\nx\n"))
	f.Add([]byte("old 01\n\nx\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := witness.ParseAddCheckpoint(b)
		if err != nil {
			if !errors.Is(err, witness.ErrBadRequest) {
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
			return
		}
		if got := r.Marshal(); !bytes.Equal(got, b) {
			t.Fatalf("parsed %q, marshals to %q", b, got)
		}
	})
}

// FuzzProof feeds the witness, which has cosigned size 13 of the main
// tree, checkpoints signed by the trusted key with fuzzed sizes, roots
// (main's, a fork's or arbitrary) and proofs (valid ones mutated, or
// arbitrary hashes), and checks that it never cosigns a checkpoint whose
// root is not main's at that size.
func FuzzProof(f *testing.F) {
	f.Add(uint8(13), uint8(20), uint8(0), []byte{}, uint8(0))
	f.Add(uint8(13), uint8(20), uint8(1), []byte{}, uint8(0))
	f.Add(uint8(13), uint8(14), uint8(0), []byte{1, 2}, uint8(3))
	f.Add(uint8(13), uint8(13), uint8(2), []byte{}, uint8(0))
	f.Add(uint8(0), uint8(40), uint8(0), []byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, old, size, rootKind uint8, mutate []byte, cut uint8) {
		fx := newFixture(t)
		main := fx.trusted
		main.grow(t, 64)
		if _, err := fx.add(t, main, 0, 13); err != nil {
			t.Fatal(err)
		}
		n := int64(size % 64)
		fork := newTree(t, "fork", 64)
		var root tlog.Hash
		switch rootKind % 3 {
		case 0:
			root = main.root(t, n)
		case 1:
			root = fork.root(t, n)
		default:
			copy(root[:], mutate)
		}
		var proof tlog.TreeProof
		if o := int64(old % 64); o > 0 && o < n {
			proof = main.proof(t, o, n)
		}
		if len(proof) > 0 {
			proof = proof[:len(proof)-int(cut)%(len(proof)+1)]
		}
		for i, b := range mutate {
			if len(proof) > 0 {
				proof[i%len(proof)][int(b)%32] ^= b
			}
		}
		line, err := fx.client.AddCheckpoint(context.Background(), uint64(old%64), proof, fx.note(t, n, root))
		if err == nil && root != main.root(t, n) {
			t.Fatalf("cosigned size %d with a root not main's: %q", n, line)
		}
		st, _ := fx.store.Log(fx.origin)
		if st.Root != main.root(t, int64(st.Size)) {
			t.Fatalf("stored size %d with a root not main's", st.Size)
		}
	})
}

// Ensure that contending requests, from two trees that disagree from
// their first leaf and all sent at once, never get two roots cosigned for
// one size: the comparison and the update are one transaction.
func TestContendingTrees(t *testing.T) {
	f := newFixture(t)
	trees := []*tree{newTree(t, "a", 200), newTree(t, "b", 200)}
	var mu sync.Mutex
	cosigned := map[int64]tlog.Hash{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			tr := trees[g%2]
			old := int64(0)
			for i := 0; i < 200; i++ {
				n := old + 1 + int64((g+i)%3)
				if n >= 200 {
					return
				}
				msg, err := checkpoint.Sign(checkpoint.Checkpoint{Origin: f.origin, Size: uint64(n), Root: tr.root(t, n)}, f.signer)
				if err != nil {
					t.Error(err)
					return
				}
				_, err = f.client.AddCheckpoint(context.Background(), uint64(old), tr.proof(t, old, n), msg)
				var conflict *witness.ConflictError
				switch {
				case err == nil:
					mu.Lock()
					if prev, ok := cosigned[n]; ok && prev != tr.root(t, n) {
						t.Errorf("size %d cosigned with two roots", n)
					}
					cosigned[n] = tr.root(t, n)
					mu.Unlock()
					old = n
				case errors.As(err, &conflict):
					old = int64(conflict.Size)
				case errors.Is(err, witness.ErrBadProof):
					return
				default:
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(cosigned) < 5 {
		t.Fatalf("only %d sizes cosigned", len(cosigned))
	}
}

// Ensure that the example request of c2sp.org/tlog-witness parses as the
// spec describes it (old size, four proof hashes, a checkpoint with two
// signatures) and marshals back to the same bytes.
func TestSpecExampleRequest(t *testing.T) {
	const example = "old 20852014\n" +
		"PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=\n" +
		"jrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=\n" +
		"5+pKlUdi2LeF/BcMHBn+Ku6yhPGNCswZZD1X/6QgPd8=\n" +
		"/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=\n" +
		"\n" +
		"example.com/behind-the-sofa\n" +
		"20852163\n" +
		"CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n" +
		"\n" +
		"— example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n" +
		"— example.com/behind-the-sofa opLqBQsREYCgu6xQkYQwJr9fo45a62DN9EdmHXnZdXNqlcVGlCum2Wks+49/V6267UEjw6QUXTS5Rovnzv++qbSzm9Q=\n"
	r, err := witness.ParseAddCheckpoint([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if r.OldSize != 20852014 || len(r.Proof) != 4 || r.Proof[3].String() != "/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=" {
		t.Fatalf("parsed %+v", r)
	}
	if got := string(r.Marshal()); got != example {
		t.Fatalf("marshals to %q", got)
	}
	// The note is well formed: its body is the spec's checkpoint.
	_, err = note.Open(r.SignedNote, note.VerifierList())
	var unverified *note.UnverifiedNoteError
	if !errors.As(err, &unverified) || len(unverified.Note.UnverifiedSigs) != 2 {
		t.Fatalf("note: %v", err)
	}
	c, err := checkpoint.Parse([]byte(unverified.Note.Text))
	if err != nil || c.Origin != "example.com/behind-the-sofa" || c.Size != 20852163 {
		t.Fatalf("checkpoint %+v %v", c, err)
	}
}

// Ensure that the client takes its witness's line out of an answer of
// several (other keys' lines are ignored), and refuses an answer whose
// line by its witness's key does not verify, or that has no such line.
func TestClientSeveralLines(t *testing.T) {
	f := newFixture(t)
	f.trusted.grow(t, 3)
	msg := f.note(t, 3, f.trusted.root(t, 3))
	body := checkpoint.Checkpoint{Origin: f.origin, Size: 3, Root: f.trusted.root(t, 3)}.Marshal()
	foreign, _ := checkpoint.Cosign(body, "other.test/w9", key(9), time.Now())
	own, _ := checkpoint.Cosign(body, "witness.test/w1", f.wKey, time.Now())
	forged, _ := checkpoint.Cosign(checkpoint.Checkpoint{Origin: f.origin, Size: 4, Root: f.trusted.root(t, 3)}.Marshal(), "witness.test/w1", f.wKey, time.Now())
	for _, tc := range []struct {
		name, answer string
		want         error
	}{
		{"foreign then own", foreign + own, nil},
		{"own then foreign", own + foreign, nil},
		{"foreign only", foreign, witness.ErrUnexpectedResponse},
		{"own key, other body", foreign + forged, witness.ErrUnexpectedResponse},
		{"not a signature line", own + "hello\n", witness.ErrUnexpectedResponse},
		{"no final newline", strings.TrimSuffix(own, "\n"), witness.ErrUnexpectedResponse},
		{"empty", "", witness.ErrUnexpectedResponse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				io.WriteString(rw, tc.answer)
			}))
			defer srv.Close()
			cl, _ := witness.NewClient(srv.URL, witness.ClientOptions{Verifier: f.cosv})
			line, err := cl.AddCheckpoint(context.Background(), 0, nil, msg)
			if !errors.Is(err, tc.want) || (tc.want == nil && line != own) {
				t.Fatalf("AddCheckpoint = %q, %v; want %v", line, err, tc.want)
			}
		})
	}
}

// BenchmarkAddCheckpoint measures one add-checkpoint over HTTP on
// loopback: parse, verify, prove, commit (fsync) and cosign.
func BenchmarkAddCheckpoint(b *testing.B) {
	f := newFixture(b)
	tr := newTree(b, "bench", int64(b.N)+2)
	old := int64(0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := old + 1
		msg, _ := checkpoint.Sign(checkpoint.Checkpoint{Origin: f.origin, Size: uint64(n), Root: tr.root(b, n)}, f.signer)
		if _, err := f.client.AddCheckpoint(context.Background(), uint64(old), tr.proof(b, old, n), msg); err != nil {
			b.Fatal(err)
		}
		old = n
	}
}
