package checkpoint_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/kvfence/kvfence/checkpoint"
)

const specTime = 1679315147 // the "time" line of c2sp.org/tlog-cosignature's example

// Ensure that the cosignature of the spec's example checkpoint by a fixed
// key at the spec's time is the golden line, that the line's layout is the
// spec's (key ID = SHA-256(name || "\n" || 0x04 || key)[:4], big-endian
// timestamp, Ed25519 over the literal message the spec shows), and that
// the spec's own example line has that framing.
func TestCosignatureGolden(t *testing.T) {
	body, err := os.ReadFile("testdata/spec-example.checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	priv := key(7)
	pub := priv.Public().(ed25519.PublicKey)
	const name = "witness.example.com/w1"
	line, err := checkpoint.Cosign(body, name, priv, time.Unix(specTime, 0))
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile("testdata/cosignature.golden")
	if err != nil {
		t.Fatal(err)
	}
	if line != string(golden) {
		t.Errorf("cosignature line\n%q\nwant golden\n%q", line, golden)
	}

	// Rebuild everything from the spec's text, independently of the package.
	b64 := strings.TrimSuffix(strings.TrimPrefix(line, "— "+name+" "), "\n")
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 4+8+64 {
		t.Fatalf("signature blob: %d bytes, %v", len(raw), err)
	}
	id := sha256.Sum256(append([]byte(name+"\n\x04"), pub...))
	if !bytes.Equal(raw[:4], id[:4]) {
		t.Errorf("key ID %x, want %x", raw[:4], id[:4])
	}
	if ts := binary.BigEndian.Uint64(raw[4:12]); ts != specTime {
		t.Errorf("timestamp %d", ts)
	}
	msg := "cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
	if !ed25519.Verify(pub, []byte(msg), raw[12:]) {
		t.Error("signature does not verify over the spec's message")
	}
	if got := string(checkpoint.CosignedMessage(body, specTime)); got != msg {
		t.Errorf("CosignedMessage = %q", got)
	}

	spec, _ := base64.StdEncoding.DecodeString("jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==")
	if len(spec) != 76 || binary.BigEndian.Uint64(spec[4:12]) != specTime {
		t.Errorf("the spec's example line: %d bytes, time %d", len(spec), binary.BigEndian.Uint64(spec[4:12]))
	}

	vkey, err := checkpoint.CosignatureVerifierKey(name, pub)
	wantVkey := name + "+" + hex.EncodeToString(id[:4]) + "+" + base64.StdEncoding.EncodeToString(append([]byte{4}, pub...))
	if err != nil || vkey != wantVkey {
		t.Errorf("vkey %q, %v; want %q", vkey, err, wantVkey)
	}
}

// Ensure that a cosignature verifies through note.Open beside the log's
// signature, and that VerifyLine refuses another key, another name, a
// tampered body or signature, a timestamp beyond the skew and a malformed
// line, each with its own error.
func TestCosignatureVerify(t *testing.T) {
	logPriv, wPriv := key(1), key(2)
	origin, _ := checkpoint.ReceiverOrigin("r1", logPriv.Public().(ed25519.PublicKey))
	ls, _ := checkpoint.NewSigner(origin, logPriv)
	c := checkpoint.Checkpoint{Origin: origin, Size: 3, Root: [32]byte{9}}
	msg, err := checkpoint.Sign(c, ls)
	if err != nil {
		t.Fatal(err)
	}
	body := c.Marshal()
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	cs, err := checkpoint.NewCosigner("w1", wPriv, clock)
	if err != nil {
		t.Fatal(err)
	}
	line, err := cs.Line(body, now)
	if err != nil {
		t.Fatal(err)
	}
	v, err := checkpoint.NewCosignatureVerifier("w1", wPriv.Public().(ed25519.PublicKey), checkpoint.CosignatureVerifierOptions{MaxSkew: time.Minute, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	if at, err := v.VerifyLine(body, line); err != nil || !at.Equal(now) {
		t.Fatalf("VerifyLine = %v, %v", at, err)
	}
	lv, _ := checkpoint.NewVerifier(origin, logPriv.Public().(ed25519.PublicKey))
	n, err := note.Open(append(msg, line...), note.VerifierList(lv, v))
	if err != nil || len(n.Sigs) != 2 {
		t.Fatalf("note.Open with both: %v %+v", err, n)
	}
	// note.Sign with the Cosigner makes the same kind of line.
	cosigned, err := note.Sign(&note.Note{Text: string(body)}, cs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(cosigned, note.VerifierList(v)); err != nil {
		t.Fatalf("note.Sign by the cosigner: %v", err)
	}

	other, _ := checkpoint.NewCosignatureVerifier("w1", key(3).Public().(ed25519.PublicKey), checkpoint.CosignatureVerifierOptions{Now: clock})
	otherName, _ := checkpoint.NewCosignatureVerifier("w2", wPriv.Public().(ed25519.PublicKey), checkpoint.CosignatureVerifierOptions{Now: clock})
	future, _ := cs.Line(body, now.Add(2*time.Minute))
	nearFuture, _ := cs.Line(body, now.Add(30*time.Second))
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimSuffix(strings.TrimPrefix(line, "— w1 "), "\n"))
	raw[len(raw)-1] ^= 1
	flipped := "— w1 " + base64.StdEncoding.EncodeToString(raw) + "\n"
	// The same key ID under a plain Ed25519 signature is not a cosignature.
	plain := "— w1 " + base64.StdEncoding.EncodeToString(append(raw[:4:4], ed25519.Sign(wPriv, body)...)) + "\n"
	for _, tc := range []struct {
		name string
		v    *checkpoint.CosignatureVerifier
		body []byte
		line string
		want error
	}{
		{"another key", other, body, line, checkpoint.ErrWrongKey},
		{"another name", otherName, body, line, checkpoint.ErrWrongKey},
		{"tampered body", v, checkpoint.Checkpoint{Origin: origin, Size: 4, Root: [32]byte{9}}.Marshal(), line, checkpoint.ErrBadSignature},
		{"flipped signature", v, body, flipped, checkpoint.ErrBadSignature},
		{"future beyond skew", v, body, future, checkpoint.ErrFutureTimestamp},
		{"plain Ed25519", v, body, plain, checkpoint.ErrMalformed},
		{"no dash", v, body, strings.TrimPrefix(line, "— "), checkpoint.ErrMalformed},
		{"unpadded", v, body, strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "=") + "\n", checkpoint.ErrMalformed},
		{"bad body", v, []byte("x\n"), line, checkpoint.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.v.VerifyLine(tc.body, tc.line); !errors.Is(err, tc.want) {
				t.Fatalf("VerifyLine = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := v.VerifyLine(body, nearFuture); err != nil {
		t.Errorf("30 s ahead with a 1 min skew: %v", err)
	}
	if v.Verify(body, raw[4:]) {
		t.Error("Verify accepted a flipped signature")
	}
	if _, err := note.Open(append(msg, future...), note.VerifierList(lv, v)); err == nil {
		t.Error("note.Open accepted a future cosignature")
	}
}

// FuzzParse checks that whatever Parse accepts marshals back to exactly
// the input, so one checkpoint has one body.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"spec-example", "empty", "extensions"} {
		b, err := os.ReadFile("testdata/" + name + ".checkpoint")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("o\n01\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := checkpoint.Parse(b)
		if err != nil {
			if !errors.Is(err, checkpoint.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if got := c.Marshal(); !bytes.Equal(got, b) {
			t.Fatalf("Parse(%q) marshals to %q", b, got)
		}
	})
}

// Ensure that a verifier's public key is the key it was made with, and a
// copy: a caller that changes it changes neither the verifier nor what it
// accepts.
func TestCosignatureVerifierPublicKey(t *testing.T) {
	pub := key(7).Public().(ed25519.PublicKey)
	v, err := checkpoint.NewCosignatureVerifier("witness.example.com/w1", pub, checkpoint.CosignatureVerifierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := v.PublicKey()
	if !got.Equal(pub) {
		t.Fatalf("PublicKey = %x, want %x", got, pub)
	}
	got[0] ^= 0xff
	if !v.PublicKey().Equal(pub) {
		t.Fatal("changing the returned key changed the verifier's")
	}
	body := []byte("example.com/log\n1\n" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n")
	line, _ := checkpoint.Cosign(body, "witness.example.com/w1", key(7), time.Now())
	if _, err := v.VerifyLine(body, line); err != nil {
		t.Fatalf("the verifier no longer accepts its key's line: %v", err)
	}
}
