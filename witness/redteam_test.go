package witness_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/witness"
)

// Red-team tests of the witness. Each one states an attack; a test that
// fails is a finding (see the report of branch rt-witness).

// Ensure that the witness does not cosign a second body for a size it has
// already cosigned: the same size and root with other extension lines (in
// kvfence, another state digest or epoch high-water) is refused, or else
// two cosigned checkpoints of one size say different things about the
// receiver's state, a split view the witness could have caught.
func TestRedteamSameSizeOtherExtensions(t *testing.T) {
	f := newFixture(t)
	f.trusted.grow(t, 5)
	root := f.trusted.root(t, 5)
	first, err := checkpoint.Sign(checkpoint.Checkpoint{Origin: f.origin, Size: 5, Root: root, Extensions: []string{"kvfence-state aaaa", "kvfence-epoch-hw 7"}}, f.signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.AddCheckpoint(context.Background(), 0, nil, first); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ext  []string
	}{
		{"another state digest", []string{"kvfence-state bbbb", "kvfence-epoch-hw 7"}},
		{"a lower epoch high-water", []string{"kvfence-state aaaa", "kvfence-epoch-hw 1"}},
		{"no extension lines", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other, err := checkpoint.Sign(checkpoint.Checkpoint{Origin: f.origin, Size: 5, Root: root, Extensions: tc.ext}, f.signer)
			if err != nil {
				t.Fatal(err)
			}
			line, err := f.client.AddCheckpoint(context.Background(), 5, nil, other)
			if err == nil {
				t.Fatalf("cosigned a second body for size 5: %q", line)
			}
		})
	}
}

// smallOrderKey is the encoding of the Ed25519 identity point, a public
// key of order 1: R = identity, S = 0 verifies for every message under it.
func smallOrderKey() ed25519.PublicKey {
	k := make(ed25519.PublicKey, ed25519.PublicKeySize)
	k[0] = 1
	return k
}

// forgedSigner signs every message with the signature that verifies under
// smallOrderKey without any private key.
type forgedSigner struct {
	name string
	hash uint32
}

func (s forgedSigner) Name() string    { return s.name }
func (s forgedSigner) KeyHash() uint32 { return s.hash }
func (s forgedSigner) Sign([]byte) ([]byte, error) {
	sig := make([]byte, ed25519.SignatureSize)
	sig[0] = 1 // R = identity; S = 0
	return sig, nil
}

// Ensure that the witness refuses to trust a log key of small order: under
// such a key anyone can sign any checkpoint, so anyone could move the
// witness's record of the log (and lock the real log out with conflicts).
func TestRedteamTrustSmallOrderKey(t *testing.T) {
	pub := smallOrderKey()
	if !ed25519.Verify(pub, []byte("any message"), forgedSigner{}.mustSig()) {
		t.Fatal("premise: the forged signature does not verify under the identity key")
	}
	f := newFixture(t)
	origin, err := checkpoint.ReceiverOrigin("victim", pub)
	if err != nil {
		t.Fatalf("ReceiverOrigin refused the key (good): %v", err)
	}
	vkey, err := checkpoint.VerifierKey(origin, pub)
	if err != nil {
		return // refused at the key: good
	}
	if err := f.store.Trust(origin, vkey); err == nil {
		// Show the impact: a checkpoint nobody signed gets cosigned.
		v, _ := note.NewVerifier(vkey)
		tr := newTree(t, "attacker", 3)
		msg, serr := checkpoint.Sign(checkpoint.Checkpoint{Origin: origin, Size: 3, Root: tr.root(t, 3)}, forgedSigner{name: origin, hash: v.KeyHash()})
		if serr != nil {
			t.Fatal(serr)
		}
		line, aerr := f.client.AddCheckpoint(context.Background(), 0, nil, msg)
		t.Errorf("Trust accepted a small-order log key; a checkpoint signed without any private key was then answered %q, %v", line, aerr)
	}
}

func (forgedSigner) mustSig() []byte { s, _ := forgedSigner{}.Sign(nil); return s }

// Ensure that a client reading a witness's latest checkpoint refuses an
// answer whose cosignature is old: the witness cosigns at read time so
// that the answer says "as of now, this is the largest tree", but a
// client that accepts any age takes a replayed (or cached, as the spec
// allows the monitoring prefix to be) older answer, which shows the
// witness behind the database and hides a rollback at open.
func TestRedteamLatestReplayedAnswer(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.add(t, f.trusted, 0, 5); err != nil {
		t.Fatal(err)
	}
	recorded, err := f.client.Latest(ctx, f.origin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.add(t, f.trusted, 5, 9); err != nil {
		t.Fatal(err)
	}
	replay := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Write(recorded)
	}))
	defer replay.Close()
	// The replay happens an hour after the answer was made.
	later := func() time.Time { return time.Now().Add(time.Hour) }
	cosv, _ := checkpoint.NewCosignatureVerifier("witness.test/w1", f.wKey.Public().(ed25519.PublicKey), checkpoint.CosignatureVerifierOptions{Now: later})
	c, err := witness.NewClient(replay.URL, witness.ClientOptions{Verifier: cosv})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Latest(ctx, f.origin)
	if err == nil {
		cp, _, _ := checkpoint.Open(got, f.logv)
		t.Errorf("Latest accepted an hour-old cosignature of size %d while the witness is at 9", cp.Size)
	}
}

// Ensure that Latest refuses an answer for another origin than the one
// asked for, even one the witness really cosigned: a client that checks
// only the cosignature gets another log's checkpoint as this one's.
func TestRedteamLatestOtherOrigin(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.add(t, f.trusted, 0, 5); err != nil {
		t.Fatal(err)
	}
	// A second log the same witness serves, with its own key.
	other, _ := checkpoint.ReceiverOrigin("r2", key(3).Public().(ed25519.PublicKey))
	vkey, _ := checkpoint.VerifierKey(other, key(3).Public().(ed25519.PublicKey))
	if err := f.store.Trust(other, vkey); err != nil {
		t.Fatal(err)
	}
	s2, _ := checkpoint.NewSigner(other, key(3))
	tr := newTree(t, "r2", 2)
	msg, _ := checkpoint.Sign(checkpoint.Checkpoint{Origin: other, Size: 2, Root: tr.root(t, 2)}, s2)
	if _, err := f.client.AddCheckpoint(ctx, 0, nil, msg); err != nil {
		t.Fatal(err)
	}
	otherLatest, err := f.client.Latest(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	swap := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Write(otherLatest)
	}))
	defer swap.Close()
	c, _ := witness.NewClient(swap.URL, witness.ClientOptions{Verifier: f.cosv})
	if got, err := c.Latest(ctx, f.origin); err == nil {
		t.Errorf("Latest(%q) returned a checkpoint of another origin: %q", f.origin, strings.SplitN(string(got), "\n", 2)[0])
	}
}

// Ensure that a checkpoint above 2^62 leaves is refused at once: x/mod's
// tlog.CheckTree loops for ever in maxpow2 on such sizes (1<<63 and 1<<64
// overflow below the size), so one request signed by the log key pins a
// core and holds the store's write transaction for good, and every later
// add-checkpoint of every log waits behind it. The witness runs in a child
// process, which the test kills when it does not answer in time.
func TestRedteamHugeSizes(t *testing.T) {
	if os.Getenv("RTW_HUGE_CHILD") != "" {
		hugeSizesChild(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRedteamHugeSizes$", "-test.count=1")
	cmd.Env = append(os.Environ(), "RTW_HUGE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the witness did not answer a checkpoint of size above 2^62 within 10 s (it spins in tlog.CheckTree holding the write transaction)")
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func hugeSizesChild(t *testing.T) {
	f := newFixture(t)
	if _, err := f.add(t, f.trusted, 0, 1); err != nil {
		t.Fatal(err)
	}
	junk := make(tlog.TreeProof, 63)
	for i := range junk {
		junk[i][0] = byte(i)
	}
	for _, size := range []uint64{1<<62 + 1, 1<<63 - 1} {
		for _, proof := range []tlog.TreeProof{nil, junk[:1], junk} {
			// Signed by the log key directly: checkpoint.Sign refuses
			// to make a body that Parse refuses.
			msg, err := note.Sign(&note.Note{Text: string(checkpoint.Checkpoint{Origin: f.origin, Size: size, Root: tlog.Hash{1}}.Marshal())}, f.signer)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.client.AddCheckpoint(context.Background(), 1, proof, msg); err == nil {
				t.Errorf("size %d with %d junk proof lines was cosigned", size, len(proof))
			}
		}
	}
	status, _, _ := f.post(t, []byte("old 9223372036854775808\n\n"+string(f.note(t, 1, f.trusted.root(t, 1)))))
	if status != http.StatusBadRequest {
		t.Errorf("old size 2^63: %d", status)
	}
	if st, _ := f.store.Log(f.origin); st.Size != 1 {
		t.Errorf("the witness moved to %d", st.Size)
	}
}

// Ensure that a cosignature's timestamp is not later than the moment a
// larger checkpoint of the same log was committed: cosignature/v1 says
// "as of this time, this is the largest tree", but the witness reads its
// clock for the signature after the commit, so a request that committed
// size 5 and then lost the race to one committing size 9 signs size 5 with
// a time at which 9 was already cosigned. Here the clock's read for A's
// signature runs B in between, deterministically.
func TestRedteamCosignTimeAfterLaterCommit(t *testing.T) {
	f := newFixture(t)
	f.trusted.grow(t, 9)
	base := time.Now().Truncate(time.Second)
	var tick int
	var w *witness.Witness
	var inHook bool
	var bLine string
	calls := 0
	now := func() time.Time {
		calls++
		// Run B at the first of A's clock reads made after A's size 5 is
		// committed (visible to a reader): a read there may stamp A's
		// cosignature. A witness that reads the time for the signature
		// inside the transaction makes no such read, and B runs after A.
		if st, err := f.store.Log(f.origin); !inHook && err == nil && st.Size == 5 {
			inHook = true
			var err error
			bLine, err = w.AddCheckpoint(witness.AddCheckpointRequest{OldSize: 5, Proof: f.trusted.proof(t, 5, 9), SignedNote: f.note(t, 9, f.trusted.root(t, 9))})
			if err != nil {
				t.Errorf("B: %v", err)
			}
		}
		tick++
		return base.Add(time.Duration(tick) * time.Second)
	}
	var err error
	w, err = witness.New(f.store, f.wKey, witness.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	aLine, err := w.AddCheckpoint(witness.AddCheckpointRequest{OldSize: 0, SignedNote: f.note(t, 5, f.trusted.root(t, 5))})
	if err != nil {
		t.Fatal(err)
	}
	if !inHook {
		inHook = true
		bLine, err = w.AddCheckpoint(witness.AddCheckpointRequest{OldSize: 5, Proof: f.trusted.proof(t, 5, 9), SignedNote: f.note(t, 9, f.trusted.root(t, 9))})
		if err != nil {
			t.Fatalf("B: %v", err)
		}
	}
	body5 := checkpoint.Checkpoint{Origin: f.origin, Size: 5, Root: f.trusted.root(t, 5)}.Marshal()
	body9 := checkpoint.Checkpoint{Origin: f.origin, Size: 9, Root: f.trusted.root(t, 9)}.Marshal()
	cosv, _ := checkpoint.NewCosignatureVerifier("witness.test/w1", f.wKey.Public().(ed25519.PublicKey), checkpoint.CosignatureVerifierOptions{Now: func() time.Time { return base.Add(time.Hour) }})
	tA, errA := cosv.VerifyLine(body5, aLine)
	tB, errB := cosv.VerifyLine(body9, bLine)
	if errA != nil || errB != nil {
		t.Fatalf("cosignatures: %v %v", errA, errB)
	}
	if tA.After(tB) {
		t.Errorf("size 5 cosigned at %v as the largest tree, after size 9 was cosigned at %v", tA, tB)
	}
}

// Ensure that a note with several signatures is judged by the trusted
// key's alone: another key under the log's name is ignored (C2SP), a
// second line by the trusted name and key ID that does not verify is 403,
// and the witness never vouches for the extra lines (Latest strips them).
// The first and last hold; the 403 does not when the bad line follows the
// good one: x/mod's note.Open skips repeated lines of one verifier without
// checking them, so the answer depends on the order of the lines, while
// c2sp.org/tlog-witness says any such line MUST get 403.
func TestRedteamSeveralSignatures(t *testing.T) {
	f := newFixture(t)
	f.trusted.grow(t, 4)
	good := f.note(t, 4, f.trusted.root(t, 4))
	sameName, _ := checkpoint.NewSigner(f.origin, key(9))
	n, err := note.Open(good, note.VerifierList(f.logv))
	if err != nil {
		t.Fatal(err)
	}
	plusOther, err := note.Sign(n, sameName)
	if err != nil {
		t.Fatal(err)
	}
	if status, _, answer := f.post(t, req(0, nil, plusOther)); status != http.StatusOK {
		t.Fatalf("valid plus same-name other key: %d %q", status, answer)
	}
	latest, err := f.client.Latest(context.Background(), f.origin)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := note.Open(latest, note.VerifierList(f.logv, f.cosv))
	if err != nil || len(ln.UnverifiedSigs) != 0 {
		t.Fatalf("Latest passes on other keys' lines: %v %+v", err, ln)
	}
	// A second line with the trusted name and key ID but a bad signature.
	text, sigs, _ := strings.Cut(string(good), "\n\n")
	name, b64, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(sigs, "— "), "\n"), " ")
	raw, _ := base64.StdEncoding.DecodeString(b64)
	raw[len(raw)-1] ^= 1 // same key ID, broken signature
	bad := []byte(text + "\n\n" + sigs + "— " + name + " " + base64.StdEncoding.EncodeToString(raw) + "\n")
	if status, _, answer := f.post(t, req(4, nil, bad)); status != http.StatusForbidden && status != http.StatusBadRequest {
		t.Errorf("valid plus a bad line of the trusted key: %d %q", status, answer)
	}
}

// Ensure that opening the store while the witness serves is refused
// quickly and precisely: `kvfence witness trust` opens the store
// read-write, and bbolt's file lock is held by `witness serve` for as long
// as it runs. Trusting a receiver needs a restart of the witness (which
// the README says); the refusal must say so (ErrLocked, "stop kvfence
// witness serve first") within the lock timeout, not hang or fail vaguely.
func TestRedteamTrustWhileServing(t *testing.T) {
	f := newFixture(t)
	start := time.Now()
	st, err := witness.OpenStore(f.path, witness.StoreOptions{LockTimeout: 300 * time.Millisecond})
	if err == nil {
		st.Close()
		return // trust while serving works
	}
	if !errors.Is(err, witness.ErrLocked) || !strings.Contains(err.Error(), "stop kvfence witness serve first") {
		t.Errorf("trust while serving: %v, want ErrLocked saying to stop witness serve", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the refusal took %v", d)
	}
}

// Ensure that replaying the witness's latest checkpoint (public: the GET
// endpoints hand out the log's signed note) writes nothing: the "same
// tree again" answer returns nil from a bbolt Update, whose commit still
// writes and fsyncs a meta page, so anyone can make the witness fsync (and
// sign) once per request, under the write lock every log's add-checkpoint
// waits for.
func TestRedteamReplayLatestWritesNothing(t *testing.T) {
	f := newFixture(t)
	if _, err := f.add(t, f.trusted, 0, 5); err != nil {
		t.Fatal(err)
	}
	published, err := f.client.Latest(context.Background(), f.origin)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	// An outsider, holding no key, replays the published note.
	status, _, _ := f.post(t, req(5, nil, published))
	after, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("a replay of the published checkpoint (answered %d) wrote the witness database", status)
	}
}
