package checkpoint_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/kvfence/kvfence/checkpoint"
)

// Ensure that ParseSize takes sizes up to 2^62 and refuses every size
// above it, where the RFC 6962 proof code would loop for ever.
func TestParseSizeLimit(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"0", true},
		{"4611686018427387904", true}, // 2^62
		{"4611686018427387905", false},
		{"9223372036854775807", false},
		{"9223372036854775808", false},
	} {
		_, err := checkpoint.ParseSize(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseSize(%s): %v, want ok=%v", tc.in, err, tc.ok)
		}
	}
}

// Ensure that every way a log or witness key enters the package refuses a
// key of small order with ErrWeakKey, and takes a real key.
func TestWeakKeys(t *testing.T) {
	weak := make(ed25519.PublicKey, ed25519.PublicKeySize)
	weak[0] = 1
	good := ed25519.NewKeyFromSeed(make([]byte, 32)).Public().(ed25519.PublicKey)
	weakVkey, err := note.NewEd25519VerifierKey("log.example", weak)
	if err != nil {
		t.Fatal(err)
	}
	goodVkey, _ := note.NewEd25519VerifierKey("log.example", good)
	checks := []struct {
		name string
		run  func(ed25519.PublicKey, string) error
	}{
		{"VerifierKey", func(p ed25519.PublicKey, _ string) error {
			_, err := checkpoint.VerifierKey("log.example", p)
			return err
		}},
		{"NewVerifier", func(p ed25519.PublicKey, _ string) error {
			_, err := checkpoint.NewVerifier("log.example", p)
			return err
		}},
		{"NewCosignatureVerifier", func(p ed25519.PublicKey, _ string) error {
			_, err := checkpoint.NewCosignatureVerifier("w.example", p, checkpoint.CosignatureVerifierOptions{Now: time.Now})
			return err
		}},
		{"ParseVerifierKey", func(_ ed25519.PublicKey, v string) error { _, err := checkpoint.ParseVerifierKey(v); return err }},
		{"CosignatureVerifierKey", func(p ed25519.PublicKey, _ string) error {
			_, err := checkpoint.CosignatureVerifierKey("w.example", p)
			return err
		}},
	}
	for _, c := range checks {
		if err := c.run(weak, weakVkey); !errors.Is(err, checkpoint.ErrWeakKey) || !errors.Is(err, checkpoint.ErrMalformed) {
			t.Errorf("%s(weak): %v, want ErrWeakKey", c.name, err)
		}
		if err := c.run(good, goodVkey); err != nil {
			t.Errorf("%s(good): %v", c.name, err)
		}
	}
	if _, err := checkpoint.ParseVerifierKey("log.example+00000000+AQ=="); !errors.Is(err, checkpoint.ErrMalformed) {
		t.Errorf("short vkey: %v", err)
	}
}

// Ensure that Open checks every signature line with the trusted key's name
// and key ID: a failing line after a good one is ErrBadSignature, though
// note.Open alone would skip it.
func TestOpenRepeatedTrustedLine(t *testing.T) {
	priv := ed25519.NewKeyFromSeed(make([]byte, 32))
	s, err := checkpoint.NewSigner("log.example", priv)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := checkpoint.NewVerifier("log.example", priv.Public().(ed25519.PublicKey))
	var root [32]byte
	good, err := checkpoint.Sign(checkpoint.Checkpoint{Origin: "log.example", Size: 1, Root: root}, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := checkpoint.Open(good, v); err != nil {
		t.Fatalf("good note: %v", err)
	}
	text, sigs, _ := strings.Cut(string(good), "\n\n")
	name, b64, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(sigs, "— "), "\n"), " ")
	raw, _ := base64.StdEncoding.DecodeString(b64)
	raw[len(raw)-1] ^= 1
	bad := text + "\n\n" + sigs + "— " + name + " " + base64.StdEncoding.EncodeToString(raw) + "\n"
	if _, _, err := checkpoint.Open([]byte(bad), v); !errors.Is(err, checkpoint.ErrBadSignature) {
		t.Errorf("good line then a failing line of the same key: %v, want ErrBadSignature", err)
	}
}
