package receiptproof

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/checkpoint"
)

// cosigned returns p with cosignature lines by the witnesses keys[i] for
// each i in by, and the verifiers of every key.
func cosigned(t *testing.T, p Proof, keys []ed25519.PrivateKey, by ...int) (Proof, []*checkpoint.CosignatureVerifier) {
	t.Helper()
	body, _, _ := bytes.Cut(p.Checkpoint, []byte("\n\n"))
	body = append(body, '\n')
	var vs []*checkpoint.CosignatureVerifier
	for i, k := range keys {
		v, err := checkpoint.NewCosignatureVerifier(fmt.Sprintf("w%d.test", i), k.Public().(ed25519.PublicKey), checkpoint.CosignatureVerifierOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	out := p
	out.Checkpoint = bytes.Clone(p.Checkpoint)
	for _, i := range by {
		line, err := checkpoint.Cosign(body, fmt.Sprintf("w%d.test", i), keys[i], time.Unix(1_700_000_000, 0))
		if err != nil {
			t.Fatal(err)
		}
		out.Checkpoint = append(out.Checkpoint, line...)
	}
	return out, vs
}

// Ensure that VerifyWith accepts a note cosigned by the quorum, and
// refuses fewer cosignatures, a cosignature that does not verify, a
// repeated key and a quorum that is not one, each with its error.
func TestVerifyWith(t *testing.T) {
	keys := []ed25519.PrivateKey{
		ed25519.NewKeyFromSeed(bytes.Repeat([]byte{21}, 32)),
		ed25519.NewKeyFromSeed(bytes.Repeat([]byte{22}, 32)),
		ed25519.NewKeyFromSeed(bytes.Repeat([]byte{23}, 32)),
	}
	base := testProof(t, 9, 4, testKey)
	pub := testKey.Public().(ed25519.PublicKey)
	two, vs := cosigned(t, base, keys, 0, 2)
	if v, err := VerifyWith(two, pub, VerifyOptions{Witnesses: vs, Quorum: 2}); err != nil || strings.Join(v.Witnesses, ",") != "w0.test,w2.test" {
		t.Fatalf("two of three, quorum 2: %v, %v", v.Witnesses, err)
	}
	if _, err := Verify(two, pub); err != nil {
		t.Fatalf("Verify ignores cosignatures: %v", err)
	}
	// A cosignature by a key outside the list is no cosignature.
	other, _ := cosigned(t, base, []ed25519.PrivateKey{keys[0], ed25519.NewKeyFromSeed(bytes.Repeat([]byte{24}, 32))}, 0, 1)
	altered := bytes.Clone(two.Checkpoint)
	altered[len(altered)-3] ^= 0x01 // inside the last line's base64 signature
	cases := []struct {
		name string
		p    Proof
		opts VerifyOptions
		want error
	}{
		{"quorum 3 of 2 cosignatures", two, VerifyOptions{Witnesses: vs, Quorum: 3}, ErrNotWitnessed},
		{"no cosignature", base, VerifyOptions{Witnesses: vs, Quorum: 1}, ErrNotWitnessed},
		{"a stranger's cosignature", other, VerifyOptions{Witnesses: vs, Quorum: 2}, ErrNotWitnessed},
		{"altered cosignature", Proof{Receipt: two.Receipt, Entry: two.Entry, Inclusion: two.Inclusion, Checkpoint: altered},
			VerifyOptions{Witnesses: vs, Quorum: 1}, ErrBadCheckpoint},
		{"one key twice", two, VerifyOptions{Witnesses: []*checkpoint.CosignatureVerifier{vs[0], vs[0]}, Quorum: 2}, ErrNotWitnessed},
		{"quorum 0 with witnesses", two, VerifyOptions{Witnesses: vs}, ErrNotWitnessed},
		{"quorum without witnesses", two, VerifyOptions{Quorum: 1}, ErrNotWitnessed},
		{"quorum above N", two, VerifyOptions{Witnesses: vs, Quorum: 4}, ErrNotWitnessed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyWith(tc.p, pub, tc.opts)
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrUnproven) {
				t.Fatalf("VerifyWith: %v, want %v", err, tc.want)
			}
		})
	}
}
