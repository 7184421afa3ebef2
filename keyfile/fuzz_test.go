package keyfile

import (
	"bytes"
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"testing"

	"golang.org/x/crypto/ssh"
)

func fuzzKey(f *testing.F) ed25519.PrivateKey {
	f.Helper()
	_, priv, err := Generate(bytes.NewReader(bytes.Repeat([]byte{42}, ed25519.SeedSize)))
	if err != nil {
		f.Fatal(err)
	}
	return priv
}

// FuzzParsePublic checks that ParsePublic never panics, that every accepted
// input is exactly what MarshalPublic produces for the key and comment it
// found (one key, one spelling), and that every refusal wraps a sentinel.
func FuzzParsePublic(f *testing.F) {
	priv := fuzzKey(f)
	pub := priv.Public().(ed25519.PublicKey)
	for _, c := range []string{"", "receiver@host", "two words"} {
		line, err := MarshalPublic(pub, c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(line)
		f.Add(bytes.TrimSuffix(line, []byte("\n")))
		f.Add(append(append([]byte(nil), line...), line...))
	}
	f.Add([]byte(""))
	f.Add([]byte("\n"))
	f.Add([]byte("ssh-ed25519 "))
	f.Add([]byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA==\n"))
	f.Add([]byte("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 user@host\n"))
	f.Add([]byte(`command="ls" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl x`))

	f.Fuzz(func(t *testing.T, data []byte) {
		got, comment, err := parsePublic(data)
		if err != nil {
			if !errors.Is(err, ErrMalformedKey) && !errors.Is(err, ErrUnsupportedKeyType) && !errors.Is(err, ErrKeyTooLarge) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		if len(got) != ed25519.PublicKeySize {
			t.Fatalf("accepted a %d-byte key", len(got))
		}
		again, err := MarshalPublic(got, comment)
		if err != nil {
			t.Fatalf("accepted key and comment %q do not marshal: %v", comment, err)
		}
		if !bytes.Equal(again, data) && !bytes.Equal(bytes.TrimSuffix(again, []byte("\n")), data) {
			t.Fatalf("accepted non-canonical input %q; canonical form is %q", data, again)
		}
	})
}

// FuzzParsePrivate checks that ParsePrivate never panics, that every accepted
// key is a consistent Ed25519 key that the ssh package parses identically
// and that survives a MarshalPrivate round trip, and that every refusal wraps
// a sentinel.
func FuzzParsePrivate(f *testing.F) {
	priv := fuzzKey(f)
	for _, c := range []string{"", "receiver@host"} {
		data, err := MarshalPrivate(priv, c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add(data[:len(data)/2])
		f.Add(append(append([]byte(nil), data...), data...))
		// The raw container, so the fuzzer can mutate the structure rather
		// than only the base64 text.
		block, _ := pem.Decode(data)
		f.Add(block.Bytes)
	}
	encrypted, err := ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte("secret"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pem.EncodeToMemory(encrypted))
	f.Add([]byte(""))
	f.Add([]byte("-----BEGIN OPENSSH PRIVATE KEY-----\n-----END OPENSSH PRIVATE KEY-----\n"))
	f.Add([]byte("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		// A raw container input is also tried wrapped in PEM.
		for _, in := range [][]byte{data, pem.EncodeToMemory(&pem.Block{Type: pemTypeOpenSSH, Bytes: data})} {
			got, err := ParsePrivate(in)
			if err != nil {
				if !errors.Is(err, ErrMalformedKey) && !errors.Is(err, ErrUnsupportedKeyType) &&
					!errors.Is(err, ErrPassphraseProtected) && !errors.Is(err, ErrKeyTooLarge) {
					t.Fatalf("error wraps no sentinel: %v", err)
				}
				continue
			}
			if err := checkPrivate(got); err != nil {
				t.Fatalf("accepted an inconsistent key: %v", err)
			}
			raw, err := ssh.ParseRawPrivateKey(in)
			if err != nil {
				t.Fatalf("accepted a key the ssh package refuses: %v", err)
			}
			if k, ok := raw.(*ed25519.PrivateKey); !ok || !got.Equal(*k) {
				t.Fatalf("ssh package parses a different key (%T)", raw)
			}
			again, err := MarshalPrivate(got, "")
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParsePrivate(again)
			if err != nil || !back.Equal(got) {
				t.Fatalf("round trip failed: %v", err)
			}
		}
	})
}
