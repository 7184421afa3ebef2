package receiptproof

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/internal/api"
)

var testKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32))

// hashes is a tlog.HashReader in memory.
type hashes []tlog.Hash

func (h hashes) ReadHashes(ix []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(ix))
	for i, x := range ix {
		out[i] = h[x]
	}
	return out, nil
}

// testProof builds a chain of n entries whose entry at seq is an applied
// submit, and its proof in a note signed by key.
func testProof(t testing.TB, n, seq uint64, key ed25519.PrivateKey) Proof {
	return testProofOf(t, n, seq, key, true)
}

// testProofOf is testProof with, unless applied, a hold entry at seq.
func testProofOf(t testing.TB, n, seq uint64, key ed25519.PrivateKey, applied bool) Proof {
	t.Helper()
	c := audit.NewChain(audit.Head{})
	var stored hashes
	var entry []byte
	req := bytes.Repeat([]byte{5}, 32)
	for i := uint64(1); i <= n; i++ {
		e := &audit.Entry{Kind: audit.KindHold, Scope: "s", Epoch: i, At: int64(i)}
		if i == seq && applied {
			e = &audit.Entry{Kind: audit.KindSubmit, Outcome: audit.OutcomeApplied, Scope: "s", Epoch: 1, Grant: "g", Executor: "w",
				Action: "a", RequestSHA256: req, Target: "t", RevBefore: 1, RevAfter: 2, At: int64(i)}
		}
		raw, _, err := c.Append(e)
		if err != nil {
			t.Fatal(err)
		}
		if i == seq {
			entry = raw
		}
		hs, err := tlog.StoredHashes(int64(i-1), raw, stored)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, hs...)
	}
	root, err := tlog.TreeHash(int64(n), stored)
	if err != nil {
		t.Fatal(err)
	}
	pub := key.Public().(ed25519.PublicKey)
	origin, err := checkpoint.ReceiverOrigin("r1", pub)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := checkpoint.NewSigner(origin, key)
	if err != nil {
		t.Fatal(err)
	}
	st := checkpoint.ReceiverState{Head: c.Head().Hash, EpochHighWater: n, At: 1}
	note, err := checkpoint.Sign(checkpoint.Checkpoint{Origin: origin, Size: n, Root: root, Extensions: st.Extensions()}, signer)
	if err != nil {
		t.Fatal(err)
	}
	inc, err := tlog.ProveRecord(int64(n), int64(seq-1), stored)
	if err != nil {
		t.Fatal(err)
	}
	return Proof{Receipt: api.Receipt{Scope: "s", Action: "a", Grant: "g", RequestSHA256: hex.EncodeToString(req), Target: "t",
		RevBefore: 1, RevAfter: 2, AuditSeq: seq, At: api.Time(time.Unix(0, int64(seq)))}, Entry: entry, Checkpoint: note, Inclusion: inc}
}

// Ensure that a proof verifies after a round trip through its JSON form,
// at every position of trees of several sizes, and that each part changed
// is refused with the error that names it.
func TestVerify(t *testing.T) {
	pub := testKey.Public().(ed25519.PublicKey)
	for _, n := range []uint64{1, 2, 7, 8, 13} {
		for seq := uint64(1); seq <= n; seq++ {
			p := testProof(t, n, seq, testKey)
			b, err := p.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			q, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Verify(q, pub); err != nil {
				t.Fatalf("tree %d seq %d: %v", n, seq, err)
			}
		}
	}
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, 32))
	for _, tc := range []struct {
		name string
		edit func(p *Proof) ed25519.PublicKey
		want error
	}{
		{"other key", func(p *Proof) ed25519.PublicKey { return other.Public().(ed25519.PublicKey) }, ErrBadCheckpoint},
		{"signed by another key", func(p *Proof) ed25519.PublicKey {
			*p = testProof(t, 7, 3, other)
			return pub
		}, ErrBadCheckpoint},
		{"entry changed", func(p *Proof) ed25519.PublicKey { p.Entry = append(bytes.Clone(p.Entry), 0); return pub }, ErrBadProof},
		{"proof hash changed", func(p *Proof) ed25519.PublicKey { p.Inclusion[0][0] ^= 1; return pub }, ErrBadProof},
		{"seq past the tree", func(p *Proof) ed25519.PublicKey { p.Receipt.AuditSeq = 8; return pub }, ErrBadProof},
		{"other action", func(p *Proof) ed25519.PublicKey { p.Receipt.Action = "b"; return pub }, ErrNotTheDecision},
		{"other request", func(p *Proof) ed25519.PublicKey {
			p.Receipt.RequestSHA256 = hex.EncodeToString(make([]byte, 32))
			return pub
		}, ErrNotTheDecision},
		{"other revision", func(p *Proof) ed25519.PublicKey { p.Receipt.RevBefore = 0; return pub }, ErrNotTheDecision},
		{"other revision after", func(p *Proof) ed25519.PublicKey { p.Receipt.RevAfter = 3; return pub }, ErrNotTheDecision},
		{"no at", func(p *Proof) ed25519.PublicKey { p.Receipt.At = nil; return pub }, ErrNotTheDecision},
		{"at spelled otherwise", func(p *Proof) ed25519.PublicKey {
			at := "1970-01-01T00:00:00.0000000030Z" // the same instant, another spelling
			p.Receipt.At = &at
			return pub
		}, ErrNotTheDecision},
		{"dispatch state", func(p *Proof) ed25519.PublicKey { p.Receipt.Dispatch = "applied"; return pub }, ErrNotTheDecision},
		{"dispatch version", func(p *Proof) ed25519.PublicKey { p.Receipt.Version = "7"; return pub }, ErrNotTheDecision},
		{"dispatch deadline", func(p *Proof) ed25519.PublicKey { p.Receipt.Deadline = p.Receipt.At; return pub }, ErrNotTheDecision},
		{"a proven hold entry", func(p *Proof) ed25519.PublicKey {
			q := testProofOf(t, 7, 3, testKey, false)
			p.Entry, p.Checkpoint, p.Inclusion = q.Entry, q.Checkpoint, q.Inclusion
			return pub
		}, ErrNotTheDecision},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testProof(t, 7, 3, testKey)
			key := tc.edit(&p)
			if _, err := Verify(p, key); !errors.Is(err, tc.want) || !errors.Is(err, ErrUnproven) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

// Ensure that a proof names the receiver whose note it carries, and that
// VerifyWith with a Receiver refuses a note of another receiver signed by
// the same key, and a note whose origin spells its id otherwise than the
// receiver does (which would let one key's note pass for two ids).
func TestVerifyReceiver(t *testing.T) {
	pub := testKey.Public().(ed25519.PublicKey)
	p := testProof(t, 7, 3, testKey)
	v, err := VerifyWith(p, pub, VerifyOptions{Receiver: "r1"})
	if err != nil || v.Receiver != "r1" {
		t.Fatalf("VerifyWith(r1) = %q, %v; want r1", v.Receiver, err)
	}
	if _, err := VerifyWith(p, pub, VerifyOptions{Receiver: "r2"}); !errors.Is(err, ErrBadCheckpoint) || !errors.Is(err, ErrUnproven) {
		t.Fatalf("VerifyWith(r2) of r1's note = %v, want ErrBadCheckpoint", err)
	}
	// The same checkpoint, signed under an origin that spells "r1" as
	// "r%31": a valid note of this key, but not a receiver origin.
	origin, _ := checkpoint.ReceiverOrigin("r1", pub)
	odd := strings.Replace(origin, "/r1/", "/r%31/", 1)
	signer, err := checkpoint.NewSigner(odd, testKey)
	if err != nil {
		t.Fatal(err)
	}
	cp, _, err := checkpoint.Open(p.Checkpoint, mustVerifier(t, origin, pub))
	if err != nil {
		t.Fatal(err)
	}
	cp.Origin = odd
	if p.Checkpoint, err = checkpoint.Sign(cp, signer); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(p, pub); !errors.Is(err, ErrBadCheckpoint) {
		t.Fatalf("Verify of a note under origin %q = %v, want ErrBadCheckpoint", odd, err)
	}
}

func mustVerifier(t *testing.T, origin string, pub ed25519.PublicKey) note.Verifier {
	t.Helper()
	v, err := checkpoint.NewVerifier(origin, pub)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Ensure that Parse refuses what is not the one JSON form.
func TestParseRefuses(t *testing.T) {
	p := testProof(t, 3, 2, testKey)
	good, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"empty":          nil,
		"trailing data":  append(bytes.Clone(good), []byte("{}")...),
		"unknown key":    bytes.Replace(good, []byte(`"receipt"`), []byte(`"x":1,"receipt"`), 1),
		"null entry":     bytes.Replace(good, []byte(`"entry_b64": "`), []byte(`"entry_b64": null, "y": "`), 1),
		"url base64":     bytes.Replace(good, []byte(`"entry_b64": "`), []byte(`"entry_b64": "-_`), 1),
		"over the limit": append(bytes.Clone(good), bytes.Repeat([]byte(" "), MaxSize)...),
	} {
		if _, err := Parse(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Parse = %v, want ErrMalformed", name, err)
		}
	}
}

// FuzzParse checks that Parse and Verify never panic, that what Parse
// accepts marshals to a form it accepts again, and that nothing but the
// seeded proof's parts verifies.
func FuzzParse(f *testing.F) {
	p := testProof(f, 5, 2, testKey)
	good, err := p.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"receipt":{},"entry_b64":"AA==","checkpoint":"","inclusion_b64":[]}`))
	pub := testKey.Public().(ed25519.PublicKey)
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Parse error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again, err := q.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(again); err != nil {
			t.Fatalf("Parse(Marshal(Parse(b))) = %v", err)
		}
		if _, err := Verify(q, pub); err == nil {
			if !bytes.Equal(q.Entry, p.Entry) || !bytes.Equal(q.Checkpoint, p.Checkpoint) {
				t.Fatalf("a proof of other parts verified: %q", b)
			}
		} else if !errors.Is(err, ErrUnproven) {
			t.Fatalf("Verify error %v does not wrap ErrUnproven", err)
		}
	})
}
