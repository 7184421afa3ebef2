package main

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/internal/testbin"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/witness"
)

// Ensure that witness init, trust and serve check their flags and inputs
// (exit 2, nothing written), never overwrite, and print the origin a
// receiver's checkpoints must carry.
func TestWitnessCLI(t *testing.T) {
	c := newCLI(t)
	out := c.json(0, "witness", "init", "--id", "witness.test/w1", "--key", c.path("w.key"), "--db", c.path("w.db"))
	pub, err := keyfile.LoadPublic(c.path("w.key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	vkey, _ := checkpoint.CosignatureVerifierKey("witness.test/w1", pub)
	if out["verifier_key"] != vkey {
		t.Errorf("verifier_key %v, want %s", out["verifier_key"], vkey)
	}
	if st, err := os.Stat(c.path("w.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", st, err)
	}
	before, _ := os.ReadFile(c.path("w.db"))
	c.must(2, "witness", "init", "--id", "witness.test/w1", "--key", c.path("w2.key"), "--db", c.path("w.db"))
	if _, err := os.Stat(c.path("w2.key")); !errors.Is(err, os.ErrNotExist) {
		t.Error("init over an existing database wrote a key")
	}
	c.must(2, "witness", "init", "--id", "witness.test/w1", "--key", c.path("w.key"), "--db", c.path("w3.db"))
	c.must(2, "witness", "init", "--id", "has space", "--key", c.path("w4.key"), "--db", c.path("w4.db"))
	c.must(2, "witness", "init", "--id", "a+b", "--key", c.path("w4.key"), "--db", c.path("w4.db"))
	c.must(2, "witness", "init", "--key", c.path("w4.key"), "--db", c.path("w4.db"))
	if after, _ := os.ReadFile(c.path("w.db")); string(after) != string(before) {
		t.Error("a refused init changed the database")
	}
	for _, p := range []string{"w3.db", "w4.key", "w4.db"} {
		if _, err := os.Stat(c.path(p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was written by a refused init", p)
		}
	}

	c.must(0, "keygen", "--out", c.path("r.key"))
	rpub, _ := keyfile.LoadPublic(c.path("r.key.pub"))
	origin, _ := checkpoint.ReceiverOrigin("receiver/1", rpub)
	tr := c.json(0, "witness", "trust", "--db", c.path("w.db"), "--name", "receiver/1", "--receiver-pub", c.path("r.key.pub"))
	if tr["origin"] != origin {
		t.Errorf("origin %v, want %s", tr["origin"], origin)
	}
	c.must(0, "witness", "trust", "--db", c.path("w.db"), "--name", "receiver/1", "--receiver-pub", c.path("r.key.pub"))
	c.must(2, "witness", "trust", "--db", c.path("w.db"), "--name", "bad\x01", "--receiver-pub", c.path("r.key.pub"))
	c.must(2, "witness", "trust", "--db", c.path("w.db"), "--name", "r")
	c.must(1, "witness", "trust", "--db", c.path("none.db"), "--name", "r", "--receiver-pub", c.path("r.key.pub"))
	c.must(2, "witness", "serve", "--db", c.path("w.db"), "--key", c.path("w.key"), "--listen", "127.0.0.1:0")
	c.must(0, "help", "witness")
}

// witnessProc is a `kvfence witness serve` process.
type witnessProc struct {
	cmd  *exec.Cmd
	addr string
}

func startWitness(t *testing.T, bin string, args ...string) *witnessProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"witness", "serve", "--json", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = testbin.ChildEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out struct{ Listen string }
	if err := json.NewDecoder(stdout).Decode(&out); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("witness serve printed no address: %v", err)
	}
	return &witnessProc{cmd: cmd, addr: out.Listen}
}

// Ensure that a witness killed with SIGKILL while contending requests run
// (two trees that disagree from their first leaf, pushed at once) never
// cosigns two roots for one size, and that after each restart its latest
// checkpoint is at least every one it cosigned before the kill. SIGTERM
// drains and exits 0.
func TestWitnessServeSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the kvfence binary and kills it; runs in the full test command")
	}
	bin := kvfenceBinary(t, "")
	c := newCLI(t)
	c.must(0, "witness", "init", "--id", "witness.test/w1", "--key", c.path("w.key"), "--db", c.path("w.db"))
	c.must(0, "keygen", "--out", c.path("r.key"))
	c.must(0, "witness", "trust", "--db", c.path("w.db"), "--name", "r1", "--receiver-pub", c.path("r.key.pub"))
	c.must(0, "cert", "ca", "--out", c.path("ca"))
	c.must(0, "cert", "server", "--ca", c.path("ca"), "--ip", "127.0.0.1", "--out", c.path("srv"))
	rpriv, err := keyfile.LoadPrivate(c.path("r.key"))
	if err != nil {
		t.Fatal(err)
	}
	wpub, _ := keyfile.LoadPublic(c.path("w.key.pub"))
	origin, _ := checkpoint.ReceiverOrigin("r1", rpriv.Public().(ed25519.PublicKey))
	signer, _ := checkpoint.NewSigner(origin, rpriv)
	cosv, _ := checkpoint.NewCosignatureVerifier("witness.test/w1", wpub, checkpoint.CosignatureVerifierOptions{})
	logv, _ := checkpoint.NewVerifier(origin, rpriv.Public().(ed25519.PublicKey))
	caPEM, err := os.ReadFile(c.path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}

	const maxSize = 4000
	trees := []*witnessTree{newWitnessTree(t, "a", maxSize), newWitnessTree(t, "b", maxSize)}
	args := []string{"--db", c.path("w.db"), "--key", c.path("w.key"), "--tls-cert", c.path("srv.crt"), "--tls-key", c.path("srv.key")}

	var mu sync.Mutex
	cosigned := map[uint64]tlog.Hash{} // every size the witness cosigned, with its root
	var maxCosigned uint64
	for round := range 4 {
		p := startWitness(t, bin, args...)
		cl, err := witness.NewClient("https://"+p.addr, witness.ClientOptions{HTTPClient: hc, Verifier: cosv})
		if err != nil {
			t.Fatal(err)
		}
		if round > 0 {
			// What the restarted witness holds covers everything it cosigned.
			latest, err := cl.Latest(context.Background(), origin)
			mu.Lock()
			none := maxCosigned == 0
			mu.Unlock()
			switch {
			case errors.Is(err, witness.ErrNoCheckpoint) && none:
				// Killed before it cosigned anything (a slow start):
				// holding nothing covers nothing.
			case err != nil:
				t.Fatalf("round %d: latest: %v", round, err)
			default:
				cp, _, err := checkpoint.Open(latest, logv)
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				checkCovers(t, trees, cosigned, maxCosigned, cp.Size, cp.Root)
				mu.Unlock()
			}
		}
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Go(func() {
				tr := trees[g%2]
				rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				var old uint64
				for ctx.Err() == nil {
					n := old + 1 + rng.Uint64N(20)
					if n > maxSize {
						return
					}
					proof := tr.proof(t, old, n)
					root := tr.root(t, n)
					msg, _ := checkpoint.Sign(checkpoint.Checkpoint{Origin: origin, Size: n, Root: root}, signer)
					line, err := cl.AddCheckpoint(ctx, old, proof, msg)
					var conflict *witness.ConflictError
					switch {
					case err == nil:
						body := checkpoint.Checkpoint{Origin: origin, Size: n, Root: root}.Marshal()
						if _, verr := cosv.VerifyLine(body, line); verr != nil {
							t.Errorf("cosignature: %v", verr)
						}
						mu.Lock()
						if prev, ok := cosigned[n]; ok && prev != root {
							t.Errorf("size %d cosigned with two roots", n)
						}
						cosigned[n] = root
						maxCosigned = max(maxCosigned, n)
						mu.Unlock()
						old = n
					case errors.As(err, &conflict):
						old = conflict.Size
					case errors.Is(err, witness.ErrBadProof):
						// The other tree is ahead: this one can never extend it.
						return
					default:
						return // the witness was killed
					}
				}
			})
		}
		time.Sleep(time.Duration(150+rand.IntN(250)) * time.Millisecond)
		// A loaded machine may start the witness slower than the sleep:
		// each round waits for a few cosignatures of its own (for at most
		// 10 s), so that the kills land while it writes, not before.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			mu.Lock()
			enough := len(cosigned) >= 3*(round+1)
			mu.Unlock()
			if enough {
				break
			}
		}
		if round == 3 {
			stop()
			wg.Wait()
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := p.cmd.Wait(); err != nil {
				t.Fatalf("SIGTERM: %v", err)
			}
			break
		}
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
		stop()
		wg.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(cosigned) < 10 {
		t.Fatalf("only %d sizes cosigned: the test exercised too little", len(cosigned))
	}
	st, err := witness.OpenStore(c.path("w.db"), witness.StoreOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ls, _ := st.Log(origin)
	checkCovers(t, trees, cosigned, maxCosigned, ls.Size, ls.Root)
	if _, err := note.Open(ls.Note, note.VerifierList(logv)); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d sizes cosigned up to %d over 3 kills", len(cosigned), maxCosigned)
}

// checkCovers fails the test unless the witness's state (size, root)
// extends everything it cosigned: at least the largest cosigned size, on
// the tree of the cosigned roots. (It may be ahead: a request whose
// answer was lost to the kill or to its cancelled caller was still
// committed.)
func checkCovers(t *testing.T, trees []*witnessTree, cosigned map[uint64]tlog.Hash, maxCosigned, size uint64, root tlog.Hash) {
	t.Helper()
	if len(cosigned) == 0 {
		return
	}
	if size < maxCosigned {
		t.Fatalf("the witness is at size %d, but it cosigned size %d", size, maxCosigned)
	}
	for _, tr := range trees {
		if tr.root(t, maxCosigned) == cosigned[maxCosigned] {
			if tr.root(t, size) != root {
				t.Fatalf("the witness's size %d is not on the tree it cosigned", size)
			}
			return
		}
	}
	t.Fatalf("cosigned size %d has a root of neither tree", maxCosigned)
}

// witnessTree is a tree of records "<tag> <i>" kept as stored hashes.
type witnessTree struct {
	mu     sync.Mutex
	hashes []tlog.Hash
}

func newWitnessTree(t *testing.T, tag string, n int64) *witnessTree {
	tr := &witnessTree{}
	for i := range n {
		h, err := tlog.StoredHashes(i, fmt.Appendf(nil, "%s %d", tag, i), tr)
		if err != nil {
			t.Fatal(err)
		}
		tr.hashes = append(tr.hashes, h...)
	}
	return tr
}

func (tr *witnessTree) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		out[i] = tr.hashes[x]
	}
	return out, nil
}

func (tr *witnessTree) root(t *testing.T, n uint64) tlog.Hash {
	h, err := tlog.TreeHash(int64(n), tr)
	if err != nil {
		t.Error(err)
	}
	return h
}

func (tr *witnessTree) proof(t *testing.T, old, n uint64) tlog.TreeProof {
	if old == 0 || old == n {
		return nil
	}
	p, err := tlog.ProveTree(int64(n), int64(old), tr)
	if err != nil {
		t.Error(err)
	}
	return p
}
