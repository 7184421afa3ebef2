package keyfile_test

import (
	"bytes"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/keyfile"
)

// Ensure that ParsePublic accepts one canonical ssh-ed25519 line and nothing
// else.
func TestParsePublic(t *testing.T) {
	pub, _ := mustGenerate(t, 10)
	pub2, _ := mustGenerate(t, 11)
	line := string(bytes.TrimSuffix(mustMarshalPublic(t, pub, ""), []byte("\n"))) // "ssh-ed25519 AAAA…"
	typ, b64, _ := strings.Cut(line, " ")
	wire, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	rsaLine := strings.TrimSuffix(string(foreignKey(t, "rsa-pub")), "\n")
	_, rsaB64, _ := strings.Cut(rsaLine, " ")

	tests := []struct {
		name    string
		in      string
		wantErr error // nil: expect pub
	}{
		{"no comment, newline", line + "\n", nil},
		{"no comment, no newline", line, nil},
		{"comment", line + " receiver@host\n", nil},
		{"comment with spaces", line + " receiver key one\n", nil},
		{"UTF-8 comment", line + " clé réception\n", nil},

		{"empty", "", keyfile.ErrMalformedKey},
		{"newline only", "\n", keyfile.ErrMalformedKey},
		{"two newlines", line + "\n\n", keyfile.ErrMalformedKey},
		{"two keys", line + "\n" + string(mustMarshalPublic(t, pub2, "")), keyfile.ErrMalformedKey},
		{"same key twice", line + "\n" + line + "\n", keyfile.ErrMalformedKey},
		{"CRLF", line + "\r\n", keyfile.ErrMalformedKey},
		{"tab separator", typ + "\t" + b64, keyfile.ErrMalformedKey},
		{"two spaces", typ + "  " + b64, keyfile.ErrMalformedKey},
		{"leading space", " " + line, keyfile.ErrMalformedKey},
		{"trailing space", line + " ", keyfile.ErrMalformedKey},
		{"comment with two leading spaces", line + "  c", keyfile.ErrMalformedKey},
		{"comment with control character", line + " a\x01b", keyfile.ErrMalformedKey},
		{"comment not UTF-8", line + " a\xffb", keyfile.ErrMalformedKey},
		{"authorized_keys options", `command="true" ` + line, keyfile.ErrMalformedKey},
		{"comment line", "# " + line, keyfile.ErrMalformedKey},
		{"type only", typ, keyfile.ErrMalformedKey},
		{"type and space", typ + " ", keyfile.ErrMalformedKey},
		{"base64 only", b64, keyfile.ErrMalformedKey},
		{"truncated base64", typ + " " + b64[:len(b64)-4], keyfile.ErrMalformedKey},
		{"base64 with padding", typ + " " + b64 + "==", keyfile.ErrMalformedKey},
		{"invalid base64", typ + " " + b64[:10] + "!" + b64[11:], keyfile.ErrMalformedKey},
		{"URL base64", typ + " " + base64.URLEncoding.EncodeToString(append(wire[:len(wire)-3:len(wire)-3], 0xfb, 0xff, 0xbf)), keyfile.ErrMalformedKey},
		{"trailing bytes in key data", typ + " " + base64.StdEncoding.EncodeToString(append(append([]byte(nil), wire...), 0, 0, 0)), keyfile.ErrMalformedKey},
		{"ed25519 type with rsa data", typ + " " + rsaB64, keyfile.ErrMalformedKey},
		{"rsa line", rsaLine + "\n", keyfile.ErrUnsupportedKeyType},
		{"ecdsa line", string(foreignKey(t, "ecdsa-pub")), keyfile.ErrUnsupportedKeyType},
		{"certificate type", "ssh-ed25519-cert-v01@openssh.com " + b64, keyfile.ErrUnsupportedKeyType},
		{"security key type", "sk-ssh-ed25519@openssh.com " + b64, keyfile.ErrUnsupportedKeyType},
		{"garbage", "hello, world", keyfile.ErrMalformedKey},
		{"binary", "\x00\x01\x02", keyfile.ErrMalformedKey},
		{"too large", line + " " + strings.Repeat("x", keyfile.MaxPublicKeySize), keyfile.ErrKeyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keyfile.ParsePublic([]byte(tt.in))
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("ParsePublic: %v", err)
				}
				if !pub.Equal(got) {
					t.Fatal("ParsePublic returned a different key")
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ParsePublic(%q): err = %v, want %v", tt.in, err, tt.wantErr)
			}
			if got != nil {
				t.Error("ParsePublic returned a key with an error")
			}
		})
	}
}

// Ensure that no single-byte change to a public key line is accepted as the
// same key. The line is "TYPE SP BASE64 SP COMMENT LF"; the comment is not
// part of the key, so there a change may be accepted, but only as the same
// key. Everywhere before the comment every change must either be refused or
// (when it lands on the key's 32 bytes) produce a different key.
func TestParsePublic_Mangle(t *testing.T) {
	pub, _ := mustGenerate(t, 12)
	const comment = "mangle"
	line := mustMarshalPublic(t, pub, comment)
	commentStart := len(line) - len(comment) - 1 // index of the comment's first byte
	b64Start := len("ssh-ed25519 ")
	b64End := commentStart - 1 // index of the space before the comment

	var differentKeys int
	for i := range line {
		for v := 0; v < 256; v++ {
			if byte(v) == line[i] {
				continue
			}
			m := append([]byte(nil), line...)
			m[i] = byte(v)
			got, err := keyfile.ParsePublic(m)
			if err != nil {
				continue
			}
			switch {
			case i < commentStart && pub.Equal(got):
				t.Fatalf("byte %d changed to %#x: same key accepted under a different encoding: %q", i, v, m)
			case i < commentStart && (i < b64Start || i >= b64End):
				t.Fatalf("byte %d changed to %#x: type or separator change accepted: %q", i, v, m)
			case i >= commentStart && !pub.Equal(got):
				t.Fatalf("byte %d changed to %#x: comment change altered the key: %q", i, v, m)
			case i < commentStart:
				differentKeys++
			}
		}
	}
	// Sanity check that the loop reached the key bytes at all.
	if differentKeys == 0 {
		t.Error("no change to the key data produced a different key; the test is not exercising the parser")
	}

	// Every truncation before the comment is refused, except the one that
	// drops the comment and its separator.
	for n := 0; n < commentStart; n++ {
		_, err := keyfile.ParsePublic(line[:n])
		if n == b64End {
			if err != nil {
				t.Errorf("line without comment refused: %v", err)
			}
			continue
		}
		if err == nil {
			t.Errorf("truncation to %d bytes accepted: %q", n, line[:n])
		}
	}
}

// Ensure that ParsePrivate refuses every single-byte change to the key
// container except in the comment, where it returns the same key. The
// OpenSSH format repeats the public key three times and the check word twice,
// so a change elsewhere must never yield a different key.
func TestParsePrivate_Mangle(t *testing.T) {
	_, priv := mustGenerate(t, 13)
	const comment = "mangle-comment"
	good := mustMarshalPrivate(t, priv, comment)
	block, _ := pem.Decode(good)
	if block == nil {
		t.Fatal("no PEM block")
	}
	cStart := bytes.Index(block.Bytes, []byte(comment))
	if cStart < 0 || bytes.Count(block.Bytes, []byte(comment)) != 1 {
		t.Fatal("comment not found exactly once")
	}
	cEnd := cStart + len(comment)

	for i := range block.Bytes {
		for _, flip := range []byte{0x01, 0x80, 0xff} {
			m := append([]byte(nil), block.Bytes...)
			m[i] ^= flip
			data := pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: m})
			got, err := keyfile.ParsePrivate(data)
			if err != nil {
				if !errors.Is(err, keyfile.ErrMalformedKey) && !errors.Is(err, keyfile.ErrPassphraseProtected) && !errors.Is(err, keyfile.ErrUnsupportedKeyType) {
					t.Fatalf("byte %d ^ %#x: error %v wraps no sentinel", i, flip, err)
				}
				continue
			}
			if i < cStart || i >= cEnd {
				t.Fatalf("byte %d ^ %#x outside the comment was accepted", i, flip)
			}
			if !priv.Equal(got) {
				t.Fatalf("byte %d ^ %#x in the comment changed the key", i, flip)
			}
		}
	}

	// Every truncation of the PEM text is refused.
	for n := 0; n < len(good)-1; n++ {
		if _, err := keyfile.ParsePrivate(good[:n]); err == nil {
			t.Fatalf("truncation to %d bytes accepted", n)
		}
	}
}

// Ensure that ParsePrivate and MarshalPrivate round-trip and that two
// encodings of one key differ only in their random check words.
func TestParsePrivate_Roundtrip(t *testing.T) {
	_, priv := mustGenerate(t, 14)
	for _, comment := range []string{"", "c", "receiver@example.org"} {
		data := mustMarshalPrivate(t, priv, comment)
		got, err := keyfile.ParsePrivate(data)
		if err != nil {
			t.Fatalf("comment %q: %v", comment, err)
		}
		if !priv.Equal(got) {
			t.Fatalf("comment %q: different key", comment)
		}
	}
	if _, err := keyfile.ParsePrivate(bytes.Repeat([]byte("A"), keyfile.MaxPrivateKeySize+1)); !errors.Is(err, keyfile.ErrKeyTooLarge) {
		t.Errorf("oversize: err = %v, want ErrKeyTooLarge", err)
	}
}
