package witness_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/witness"
)

// recoveryKey is the test receiver's recovery key.
var recoveryKey = key(5)

// recFixture is a witness that cosigned size 8 of the main tree of
// receiver r1 and trusts r1's recovery key, with a recovered tree beside.
type recFixture struct {
	*fixture
	w     *witness.Witness
	rec   *tree     // the re-admitted chain's tree
	root8 tlog.Hash // the witness's latest root
	now   time.Time // the admissions' At
	named []audit.WitnessedCheckpoint
}

func newRecFixture(t *testing.T, trustRecovery bool) *recFixture {
	t.Helper()
	f := &recFixture{fixture: newFixture(t), rec: newTree(t, "recovered", 5), now: time.Now()}
	f.trusted.grow(t, 8)
	if _, err := f.add(t, f.trusted, 0, 8); err != nil {
		t.Fatal(err)
	}
	f.root8 = f.trusted.root(t, 8)
	f.named = []audit.WitnessedCheckpoint{{Witness: "witness.test/w1", Size: 8, Root: audit.Hash(f.root8)}}
	if trustRecovery {
		if err := f.store.TrustRecovery(f.origin, recoveryKey.Public().(ed25519.PublicKey)); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if f.w, err = witness.New(f.store, f.wKey, witness.Options{}); err != nil {
		t.Fatal(err)
	}
	return f
}

// admission signs, with priv, an admission for receiver naming named,
// at f.now plus skew.
func (f *recFixture) admission(t *testing.T, priv ed25519.PrivateKey, receiver string, named []audit.WitnessedCheckpoint, skew time.Duration) []byte {
	t.Helper()
	at := f.now.Add(skew).UnixNano()
	var root audit.Hash
	if len(named) > 0 {
		root = audit.Hash(f.rec.root(t, 4))
	}
	sa, err := audit.SignAdmission(priv, audit.Admission{Receiver: receiver, SupersededAnchor: audit.Head{Seq: 9, Hash: audit.Hash{9}},
		AdmittedHead: audit.Head{Seq: 4, Hash: audit.Hash{4}}, At: at, Expires: at + int64(time.Hour), Reason: "restored", Witnessed: named,
		AdmittedRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sa.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// proofFor is the proof from the admitted seq 4 of the recovered tree to
// the size the note signs.
func (f *recFixture) proofFor(t *testing.T, note []byte) tlog.TreeProof {
	t.Helper()
	lines := strings.SplitN(string(note), "\n", 3)
	if len(lines) < 3 {
		t.Fatalf("note %q", note)
	}
	n, err := checkpoint.ParseSize(lines[1])
	if err != nil {
		t.Fatal(err)
	}
	f.rec.grow(t, int64(n))
	return f.rec.proof(t, 4, int64(n))
}

// recNote is the receiver's note of size n of the recovered tree, naming
// the admission adm (none when nil).
func (f *recFixture) recNote(t *testing.T, n int64, adm []byte) []byte {
	t.Helper()
	f.rec.grow(t, n)
	st := checkpoint.ReceiverState{At: 1}
	if adm != nil {
		sa, err := audit.ParseSignedAdmission(adm)
		if err != nil {
			t.Fatal(err)
		}
		st.Admission = audit.AdmissionRecord{SHA256: sha256.Sum256(adm), At: sa.At}
	}
	msg, err := checkpoint.Sign(checkpoint.Checkpoint{Origin: f.origin, Size: uint64(n), Root: f.rec.root(t, n), Extensions: st.Extensions()}, f.signer)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// Ensure that a witness accepts a recovered chain that does not extend its
// latest checkpoint only with an admission naming it at that checkpoint,
// stores it durably with the admission in its history, cosigns the chain
// from there as usual, and refuses the admission for any other checkpoint.
func TestRecoverCheckpoint(t *testing.T) {
	f := newRecFixture(t, true)
	adm := f.admission(t, recoveryKey, "r1", f.named, 0)
	signed := f.recNote(t, 5, adm)
	// The ordinary endpoint refuses it: it does not extend size 8.
	if _, err := f.client.AddCheckpoint(context.Background(), 8, nil, signed); !errors.Is(err, witness.ErrBadRequest) && !errors.Is(err, witness.ErrBadProof) {
		t.Fatalf("add-checkpoint of the recovered chain: %v", err)
	}
	line, err := f.client.RecoverCheckpoint(context.Background(), adm, f.proofFor(t, signed), signed)
	if err != nil {
		t.Fatal(err)
	}
	body, _, _ := bytes.Cut(signed, []byte("\n\n"))
	if _, err := f.cosv.VerifyLine(append(body, '\n'), line); err != nil {
		t.Fatalf("cosignature: %v", err)
	}
	// Durable: read back after a restart.
	f.close()
	f.open(t)
	st, err := f.store.Log(f.origin)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size != 5 || st.Root != f.rec.root(t, 5) || len(st.Recoveries) != 1 {
		t.Fatalf("stored size %d, %d recoveries", st.Size, len(st.Recoveries))
	}
	r := st.Recoveries[0]
	if !bytes.Equal(r.Admission, adm) || r.FromSize != 8 || r.FromRoot != f.root8 || r.Size != 5 || r.AdmissionSHA256 != audit.Hash(sha256.Sum256(adm)) {
		t.Fatalf("recovery record %+v", r)
	}
	// Anyone can see it, without the admission itself.
	resp, err := http.Get(f.srv.URL + witness.RecoveriesPath + "?origin=" + url.QueryEscape(f.origin))
	if err != nil {
		t.Fatal(err)
	}
	var views []witness.RecoveryView
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(raw, &views); err != nil || len(views) != 1 || views[0].FromSize != 8 || views[0].Size != 5 ||
		views[0].AdmissionSHA256 != hex.EncodeToString(r.AdmissionSHA256[:]) || bytes.Contains(raw, []byte(base64.StdEncoding.EncodeToString(adm)[:40])) {
		t.Fatalf("GET recoveries: %s, %v", raw, err)
	}
	// The same request again (a lost answer) is answered, and writes nothing.
	if _, err := f.client.RecoverCheckpoint(context.Background(), adm, f.proofFor(t, signed), signed); err != nil {
		t.Fatalf("the accepted request again: %v", err)
	}
	// From there on, ordinary consistency.
	f.rec.grow(t, 7)
	if _, err := f.client.AddCheckpoint(context.Background(), 5, f.rec.proof(t, 5, 7), f.recNote(t, 7, adm)); err != nil {
		t.Fatalf("add-checkpoint after the recovery: %v", err)
	}
	// The admission for another checkpoint: a replay.
	if _, err := f.client.RecoverCheckpoint(context.Background(), adm, f.proofFor(t, f.recNote(t, 7, adm)), f.recNote(t, 7, adm)); !errors.Is(err, witness.ErrRecoveryReplayed) {
		t.Fatalf("replayed admission: %v", err)
	}
	if st, _ := f.store.Log(f.origin); st.Size != 7 || len(st.Recoveries) != 1 {
		t.Fatalf("after the replay: size %d, %d recoveries", st.Size, len(st.Recoveries))
	}
}

// Ensure that each of the witness's conditions for a recovery refuses a
// request that fails it, with its error, and that no refused request moves
// the witness.
func TestRecoverCheckpointRefusals(t *testing.T) {
	f := newRecFixture(t, true)
	good := f.admission(t, recoveryKey, "r1", f.named, 0)
	other := f.admission(t, recoveryKey, "r1", f.named, time.Second)
	older := []audit.WitnessedCheckpoint{{Witness: "witness.test/w1", Size: 7, Root: audit.Hash(f.trusted.root(t, 7))}}
	otherRoot := []audit.WitnessedCheckpoint{{Witness: "witness.test/w1", Size: 8, Root: audit.Hash{8}}}
	notMe := []audit.WitnessedCheckpoint{{Witness: "witness.test/w2", Size: 8, Root: audit.Hash(f.root8)}}
	byOtherLog, _ := checkpoint.NewSigner(f.origin, key(9))
	forgedNote, _ := checkpoint.Sign(checkpoint.Checkpoint{Origin: f.origin, Size: 5, Root: f.rec.root(t, 5),
		Extensions: checkpoint.ReceiverState{At: 1, Admission: audit.AdmissionRecord{SHA256: sha256.Sum256(good), At: f.now.UnixNano()}}.Extensions()}, byOtherLog)
	otherTree := newTree(t, "other", 5)
	for _, tc := range []struct {
		name  string
		adm   []byte
		note  []byte
		want  error
		proof tlog.TreeProof // nil: the recovered tree's from seq 4
	}{
		{"admission forged (another recovery key)", f.admission(t, key(6), "r1", f.named, 0), nil, witness.ErrRecoveryRefused, nil},
		{"admission signed by the receiver's own key", f.admission(t, f.logKey, "r1", f.named, 0), nil, witness.ErrRecoveryRefused, nil},
		{"admission for another receiver", f.admission(t, recoveryKey, "r2", f.named, 0), nil, witness.ErrRecoveryRefused, nil},
		{"admission names an older checkpoint", f.admission(t, recoveryKey, "r1", older, 0), nil, witness.ErrRecoveryRefused, nil},
		{"admission names another root", f.admission(t, recoveryKey, "r1", otherRoot, 0), nil, witness.ErrRecoveryRefused, nil},
		{"admission names another witness only", f.admission(t, recoveryKey, "r1", notMe, 0), nil, witness.ErrRecoveryRefused, nil},
		{"admission names no witness", f.admission(t, recoveryKey, "r1", nil, 0), nil, witness.ErrRecoveryRefused, nil},
		{"checkpoint names another admission", good, f.recNote(t, 5, other), witness.ErrRecoveryRefused, nil},
		{"checkpoint names no admission", good, f.recNote(t, 5, nil), witness.ErrRecoveryRefused, nil},
		{"checkpoint not signed by the receiver", good, forgedNote, witness.ErrForbidden, nil},
		{"checkpoint at the admitted seq (no recovery entry)", good, f.recNote(t, 4, good), witness.ErrRecoveryRefused, nil},
		{"proof of another tree from the admitted seq", good, f.recNote(t, 5, good), witness.ErrRecoveryRefused, otherTree.proof(t, 4, 5)},
		{"no proof", good, f.recNote(t, 5, good), witness.ErrRecoveryRefused, tlog.TreeProof{}},
	} {
		note := tc.note
		if note == nil {
			note = f.recNote(t, 5, tc.adm)
		}
		proof := tc.proof
		if proof == nil {
			proof = f.proofFor(t, note)
		}
		_, err := f.w.RecoverCheckpoint(witness.RecoverCheckpointRequest{Admission: tc.adm, Proof: proof, SignedNote: note})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		// Over HTTP, a 403 naming the same refusal.
		if _, err := f.client.RecoverCheckpoint(context.Background(), tc.adm, proof, note); !errors.Is(err, tc.want) || !errors.Is(err, witness.ErrForbidden) {
			t.Errorf("%s over HTTP: %v", tc.name, err)
		}
		if st, _ := f.store.Log(f.origin); st.Size != 8 || st.Root != f.root8 || len(st.Recoveries) != 0 {
			t.Fatalf("%s moved the witness to size %d", tc.name, st.Size)
		}
	}
	// An admission signed no later than one accepted is a replay, even
	// one the witness never saw.
	if _, err := f.w.RecoverCheckpoint(witness.RecoverCheckpointRequest{Admission: other, Proof: f.proofFor(t, f.recNote(t, 5, other)), SignedNote: f.recNote(t, 5, other)}); err != nil {
		t.Fatal(err)
	}
	again := f.admission(t, recoveryKey, "r1", []audit.WitnessedCheckpoint{{Witness: "witness.test/w1", Size: 5, Root: audit.Hash(f.rec.root(t, 5))}}, 0)
	if _, err := f.w.RecoverCheckpoint(witness.RecoverCheckpointRequest{Admission: again, Proof: f.proofFor(t, f.recNote(t, 6, again)), SignedNote: f.recNote(t, 6, again)}); !errors.Is(err, witness.ErrRecoveryReplayed) {
		t.Fatalf("an admission older than the accepted one: %v", err)
	}
}

// Ensure that a witness without the receiver's recovery key refuses every
// recovery, and that TrustRecovery keeps one key per log, never the log's
// own, and only for a trusted log.
func TestRecoverCheckpointNoKey(t *testing.T) {
	f := newRecFixture(t, false)
	adm := f.admission(t, recoveryKey, "r1", f.named, 0)
	if _, err := f.client.RecoverCheckpoint(context.Background(), adm, f.proofFor(t, f.recNote(t, 5, adm)), f.recNote(t, 5, adm)); !errors.Is(err, witness.ErrNoRecoveryKey) {
		t.Fatalf("without a recovery key: %v", err)
	}
	pub := recoveryKey.Public().(ed25519.PublicKey)
	if err := f.store.TrustRecovery("example.com/unknown", pub); !errors.Is(err, witness.ErrUnknownLog) {
		t.Errorf("unknown origin: %v", err)
	}
	if err := f.store.TrustRecovery(f.origin, f.logKey.Public().(ed25519.PublicKey)); err == nil {
		t.Errorf("the log's own key was accepted as its recovery key")
	}
	if err := f.store.TrustRecovery(f.origin, pub); err != nil {
		t.Fatal(err)
	}
	if err := f.store.TrustRecovery(f.origin, pub); err != nil {
		t.Errorf("the same key again: %v", err)
	}
	if err := f.store.TrustRecovery(f.origin, key(6).Public().(ed25519.PublicKey)); !errors.Is(err, witness.ErrAlreadyTrusted) {
		t.Errorf("another key: %v", err)
	}
	if st, _ := f.store.Log(f.origin); !st.RecoveryKey.Equal(pub) {
		t.Errorf("stored recovery key %x", st.RecoveryKey)
	}
}

// Ensure that the server takes only POST at the recovery endpoint and
// refuses a body that does not parse with 400.
func TestRecoverCheckpointServer(t *testing.T) {
	f := newRecFixture(t, true)
	resp, err := http.Get(f.srv.URL + witness.RecoverCheckpointPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", resp.StatusCode)
	}
	resp, err = http.Post(f.srv.URL+witness.RecoverCheckpointPath, "text/plain", bytes.NewReader([]byte("admission AAAA\n\nx\n")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad body: %d", resp.StatusCode)
	}
}

// FuzzRecoverCheckpointRequest checks that whatever ParseRecoverCheckpoint
// accepts marshals back to exactly the input, everything else is
// ErrBadRequest, and that every admission it accepts is a canonical
// signed admission.
func FuzzRecoverCheckpointRequest(f *testing.F) {
	sa, err := audit.SignAdmission(recoveryKey, audit.Admission{Receiver: "r1", SupersededAnchor: audit.Head{Seq: 9, Hash: audit.Hash{9}},
		AdmittedHead: audit.Head{Seq: 4}, At: 1, Expires: 2, Reason: "restored",
		Witnessed: []audit.WitnessedCheckpoint{{Witness: "w1", Size: 8, Root: audit.Hash{8}}}, AdmittedRoot: audit.Hash{4}})
	if err != nil {
		f.Fatal(err)
	}
	adm, _ := sa.Marshal()
	f.Add(witness.RecoverCheckpointRequest{Admission: adm, SignedNote: []byte("x\n")}.Marshal())
	f.Add(witness.RecoverCheckpointRequest{Admission: adm, Proof: tlog.TreeProof{{1}, {2}}, SignedNote: []byte("x\n")}.Marshal())
	f.Add([]byte("admission \n\nx\n"))
	f.Add([]byte("admission AA==\n\n"))
	f.Add([]byte("admission AA=\n\nx\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := witness.ParseRecoverCheckpoint(b)
		if err != nil {
			if !errors.Is(err, witness.ErrBadRequest) {
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
			return
		}
		if got := r.Marshal(); !bytes.Equal(got, b) {
			t.Fatalf("parsed %q, marshals to %q", b, got)
		}
		if _, err := audit.ParseSignedAdmission(r.Admission); err != nil {
			t.Fatalf("accepted an admission that does not parse: %v", err)
		}
	})
}

// Ensure that TrustRecovery reads the log's key out of a verifier key whose
// base64 holds a "+" (the name never does), so that it refuses the log's
// own key there too and accepts another.
func TestTrustRecoveryPlusInVerifierKey(t *testing.T) {
	for seed := byte(10); seed < 200; seed++ {
		logKey := key(seed)
		pub := logKey.Public().(ed25519.PublicKey)
		origin, _ := checkpoint.ReceiverOrigin("r1", pub)
		vkey, _ := checkpoint.VerifierKey(origin, pub)
		if !strings.Contains(strings.SplitN(vkey, "+", 3)[2], "+") {
			continue
		}
		path := filepath.Join(t.TempDir(), "w.db")
		if err := witness.Create(path, "w1", key(2).Public().(ed25519.PublicKey)); err != nil {
			t.Fatal(err)
		}
		st, err := witness.OpenStore(path, witness.StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.Trust(origin, vkey); err != nil {
			t.Fatal(err)
		}
		if err := st.TrustRecovery(origin, pub); err == nil || errors.Is(err, witness.ErrNotWitnessDB) {
			t.Errorf("the log's own key: %v", err)
		}
		if err := st.TrustRecovery(origin, recoveryKey.Public().(ed25519.PublicKey)); err != nil {
			t.Fatalf("a recovery key for a log whose verifier key holds \"+\": %v", err)
		}
		return
	}
	t.Fatal("no seed gave a verifier key with \"+\" in its base64")
}

// Ensure that one admission sent at once with different checkpoints is
// accepted for exactly one of them: the write transaction decides again
// when another request moved the log after the view.
func TestRecoverCheckpointContending(t *testing.T) {
	f := newRecFixture(t, true)
	adm := f.admission(t, recoveryKey, "r1", f.named, 0)
	notes := make([][]byte, 8)
	proofs := make([]tlog.TreeProof, len(notes))
	for i := range notes {
		notes[i] = f.recNote(t, int64(5+i), adm)
		proofs[i] = f.proofFor(t, notes[i])
	}
	errs := make(chan error, len(notes))
	for i, n := range notes {
		go func() {
			_, err := f.w.RecoverCheckpoint(witness.RecoverCheckpointRequest{Admission: adm, Proof: proofs[i], SignedNote: n})
			errs <- err
		}()
	}
	ok := 0
	for range notes {
		if err := <-errs; err == nil {
			ok++
		} else if !errors.Is(err, witness.ErrRecoveryReplayed) && !errors.Is(err, witness.ErrRecoveryRefused) {
			t.Errorf("contending request: %v", err)
		}
	}
	st, _ := f.store.Log(f.origin)
	if ok != 1 || len(st.Recoveries) != 1 {
		t.Fatalf("%d accepted, %d recoveries stored", ok, len(st.Recoveries))
	}
}

// Ensure that an acceptance at the recovery endpoint counts only while its
// cosignature is fresh, as a Latest answer's: the witness cosigned the
// very note before, when it was the log's head, and a line it gave then,
// played back by whoever sits on an http path, must not stand for an
// acceptance (a verifier whose clock runs two minutes ahead sees the
// witness's fresh line as one made then).
func TestRecoverCheckpointStaleAnswer(t *testing.T) {
	f := newRecFixture(t, true)
	adm := f.admission(t, recoveryKey, "r1", f.named, 0)
	signed := f.recNote(t, 5, adm)
	ahead, err := checkpoint.NewCosignatureVerifier("witness.test/w1", f.wKey.Public().(ed25519.PublicKey),
		checkpoint.CosignatureVerifierOptions{Now: func() time.Time { return time.Now().Add(2 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	late, err := witness.NewClient(f.srv.URL, witness.ClientOptions{Verifier: ahead})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := late.RecoverCheckpoint(context.Background(), adm, f.proofFor(t, signed), signed); !errors.Is(err, witness.ErrUnexpectedResponse) ||
		!strings.Contains(err.Error(), "over 1m0s ago") {
		t.Fatalf("an acceptance cosigned two minutes before the verifier's now: %v, want ErrUnexpectedResponse", err)
	}
	// The same answer again, to a verifier on time, is fresh.
	if _, err := f.client.RecoverCheckpoint(context.Background(), adm, f.proofFor(t, signed), signed); err != nil {
		t.Fatalf("the accepted request again, on time: %v", err)
	}
}
