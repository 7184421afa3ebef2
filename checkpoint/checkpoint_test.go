package checkpoint_test

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/checkpoint"
)

// key returns a fixed Ed25519 key from one seed byte.
func key(b byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{b}, ed25519.SeedSize))
}

// Ensure that every golden checkpoint parses and marshals back to exactly
// its bytes, with the values it spells.
func TestParseGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.checkpoint")
	if err != nil || len(files) < 3 {
		t.Fatalf("golden files: %v %v", files, err)
	}
	want := map[string]struct {
		size uint64
		ext  int
	}{
		"spec-example.checkpoint": {20852163, 0},
		"empty.checkpoint":        {0, 0},
		"extensions.checkpoint":   {7, 2},
	}
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c, err := checkpoint.Parse(body)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		w := want[filepath.Base(f)]
		if c.Size != w.size || len(c.Extensions) != w.ext {
			t.Errorf("%s: size %d, %d extensions; want %d, %d", f, c.Size, len(c.Extensions), w.size, w.ext)
		}
		if got := c.Marshal(); !bytes.Equal(got, body) {
			t.Errorf("%s: marshals to %q", f, got)
		}
	}
	empty, _ := tlog.TreeHash(0, nil)
	c, _ := checkpoint.Parse([]byte("o\n0\n" + empty.String() + "\n"))
	if c.Root != empty {
		t.Errorf("empty tree root %v, want %v", c.Root, empty)
	}
}

// Ensure that Parse accepts one spelling only: each malformed body is
// refused with ErrMalformed.
func TestParseRefuses(t *testing.T) {
	root := "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I="
	for _, tc := range []struct{ name, body string }{
		{"empty", ""},
		{"no final newline", "o\n1\n" + root},
		{"two lines", "o\n1\n"},
		{"empty origin", "\n1\n" + root + "\n"},
		{"origin leading space", " o\n1\n" + root + "\n"},
		{"origin trailing space", "o \n1\n" + root + "\n"},
		{"origin control", "o\x01\n1\n" + root + "\n"},
		{"origin CR", "o\r\n1\n" + root + "\n"},
		{"origin bidi override", "o\u202e\n1\n" + root + "\n"},
		{"origin invalid UTF-8", "o\xff\n1\n" + root + "\n"},
		{"size leading zero", "o\n01\n" + root + "\n"},
		{"size plus", "o\n+1\n" + root + "\n"},
		{"size minus", "o\n-1\n" + root + "\n"},
		{"size space", "o\n 1\n" + root + "\n"},
		{"size empty", "o\n\n" + root + "\n"},
		{"size hex", "o\n0x1\n" + root + "\n"},
		{"size over int64", "o\n9223372036854775808\n" + root + "\n"},
		{"size over uint64", "o\n18446744073709551616\n" + root + "\n"},
		{"root unpadded", "o\n1\n" + strings.TrimSuffix(root, "=") + "\n"},
		{"root non-canonical bits", "o\n1\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2J=\n"},
		{"root url alphabet", "o\n1\nCsUYapGGPo4dkMgIAUqom_Xajj7h2fB2MPA3j2jxq2I=\n"},
		{"root 31 bytes", "o\n1\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxqw==\n"},
		{"root with CR inside (the decoder skips it)", "o\n1\nCsUYapGGPo4dkMgIAUqom/Xajj7h2f\rB2MPA3j2jxq2I=\n"},
		{"root with newline inside", "o\n1\nCsUYapGGPo4dkMgIAUqom/Xajj7h2f\nB2MPA3j2jxq2I=\n"},
		{"empty extension", "o\n1\n" + root + "\n\n"},
		{"empty extension between", "o\n1\n" + root + "\na\n\nb\n"},
		{"extension control", "o\n1\n" + root + "\na\tb\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := checkpoint.Parse([]byte(tc.body)); !errors.Is(err, checkpoint.ErrMalformed) {
				t.Fatalf("Parse(%q) = %v, want ErrMalformed", tc.body, err)
			}
		})
	}
}

// Ensure that a receiver's origin escapes every byte that could forge
// another origin or break a key name, and names the key.
func TestReceiverOrigin(t *testing.T) {
	pub := key(1).Public().(ed25519.PublicKey)
	for _, tc := range []struct{ id, prefix string }{
		{"r1", "kvfence/receiver/r1/"},
		{"a/b", "kvfence/receiver/a%2Fb/"},
		{"a b+c", "kvfence/receiver/a%20b%2Bc/"},
		{"é", "kvfence/receiver/%C3%A9/"},
		{"%2F", "kvfence/receiver/%252F/"},
	} {
		o, err := checkpoint.ReceiverOrigin(tc.id, pub)
		if err != nil || !strings.HasPrefix(o, tc.prefix) || len(o) != len(tc.prefix)+64 {
			t.Errorf("ReceiverOrigin(%q) = %q, %v; want prefix %q and 64 hex", tc.id, o, err, tc.prefix)
		}
		if err := checkpoint.CheckName(o); err != nil {
			t.Errorf("origin %q is not a key name: %v", o, err)
		}
	}
	a, _ := checkpoint.ReceiverOrigin("r1", pub)
	b, _ := checkpoint.ReceiverOrigin("r1", key(2).Public().(ed25519.PublicKey))
	if a == b {
		t.Error("two keys, one origin")
	}
	for _, id := range []string{"", "a\x00b", strings.Repeat("x", 513)} {
		if _, err := checkpoint.ReceiverOrigin(id, pub); !errors.Is(err, checkpoint.ErrMalformed) {
			t.Errorf("ReceiverOrigin(%q) = %v, want ErrMalformed", id, err)
		}
	}
}

// Ensure that ReceiverID reads back every id ReceiverOrigin writes, and
// refuses every other spelling: another key's fingerprint, a ledger's
// origin, and an id escaped otherwise than ReceiverOrigin escapes it, which
// would let one note name two ids.
func TestReceiverID(t *testing.T) {
	pub := key(1).Public().(ed25519.PublicKey)
	for _, id := range []string{"r1", "a/b", "a b+c", "é", "%2F", "receiver-1"} {
		o, err := checkpoint.ReceiverOrigin(id, pub)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := checkpoint.ReceiverID(o, pub); err != nil || got != id {
			t.Errorf("ReceiverID(%q) = %q, %v; want %q", o, got, err, id)
		}
	}
	r1, _ := checkpoint.ReceiverOrigin("r1", pub)
	fp := r1[len("kvfence/receiver/r1/"):]
	other, _ := checkpoint.ReceiverOrigin("r1", key(2).Public().(ed25519.PublicKey))
	ledger, _ := checkpoint.LedgerOrigin("r1", pub)
	for _, origin := range []string{
		other,
		ledger,
		"kvfence/receiver/r%31/" + fp,   // "r1" with a needless escape
		"kvfence/receiver/a%2fb/" + fp,  // lower-case escape
		"kvfence/receiver/a/b/" + fp,    // an unescaped "/"
		"kvfence/receiver/r1/" + fp[1:], // a short fingerprint
		"kvfence/receiver/%zz/" + fp,
		"kvfence/receiver/" + fp,
		"kvfence/receiver//" + fp,
		"kvfence/receivers/r1/" + fp,
		"",
	} {
		if id, err := checkpoint.ReceiverID(origin, pub); !errors.Is(err, checkpoint.ErrMalformed) {
			t.Errorf("ReceiverID(%q) = %q, %v; want ErrMalformed", origin, id, err)
		}
	}
}

// Ensure that a ledger's origin escapes its id as a receiver's does, names
// the key, and is never a receiver's origin for the same id and key.
func TestLedgerOrigin(t *testing.T) {
	pub := key(1).Public().(ed25519.PublicKey)
	for _, tc := range []struct{ id, prefix string }{
		{"l1", "kvfence/ledger/l1/"},
		{"a/b", "kvfence/ledger/a%2Fb/"},
		{"a b+c", "kvfence/ledger/a%20b%2Bc/"},
		{"%2F", "kvfence/ledger/%252F/"},
	} {
		o, err := checkpoint.LedgerOrigin(tc.id, pub)
		if err != nil || !strings.HasPrefix(o, tc.prefix) || len(o) != len(tc.prefix)+64 {
			t.Errorf("LedgerOrigin(%q) = %q, %v; want prefix %q and 64 hex", tc.id, o, err, tc.prefix)
		}
		if err := checkpoint.CheckName(o); err != nil {
			t.Errorf("origin %q is not a key name: %v", o, err)
		}
		r, _ := checkpoint.ReceiverOrigin(tc.id, pub)
		if o == r || !strings.HasSuffix(o, r[strings.LastIndexByte(r, '/'):]) {
			t.Errorf("ledger origin %q against receiver origin %q: want another log with the same key fingerprint", o, r)
		}
	}
	a, _ := checkpoint.LedgerOrigin("l1", pub)
	b, _ := checkpoint.LedgerOrigin("l1", key(2).Public().(ed25519.PublicKey))
	if a == b {
		t.Error("two keys, one origin")
	}
	for _, id := range []string{"", "a\x00b", strings.Repeat("x", 513)} {
		if _, err := checkpoint.LedgerOrigin(id, pub); !errors.Is(err, checkpoint.ErrMalformed) {
			t.Errorf("LedgerOrigin(%q) = %v, want ErrMalformed", id, err)
		}
	}
	if _, err := checkpoint.LedgerOrigin("l1", pub[:31]); !errors.Is(err, checkpoint.ErrMalformed) {
		t.Errorf("short key: %v, want ErrMalformed", err)
	}
}

// Ensure that a checkpoint signed here opens with x/mod's own Ed25519
// verifier (interoperability), and that Open refuses a note without the
// trusted key's signature, with a bad one, or with a malformed body.
func TestSignOpen(t *testing.T) {
	priv := key(1)
	pub := priv.Public().(ed25519.PublicKey)
	origin, _ := checkpoint.ReceiverOrigin("r1", pub)
	s, err := checkpoint.NewSigner(origin, priv)
	if err != nil {
		t.Fatal(err)
	}
	c := checkpoint.Checkpoint{Origin: origin, Size: 5, Root: tlog.Hash{1}, Extensions: []string{"x 1"}}
	msg, err := checkpoint.Sign(c, s)
	if err != nil {
		t.Fatal(err)
	}
	vkey, err := checkpoint.VerifierKey(origin, pub)
	if err != nil {
		t.Fatal(err)
	}
	xv, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := note.Open(msg, note.VerifierList(xv)); err != nil || n.Text != string(c.Marshal()) {
		t.Fatalf("x/mod note.Open: %v", err)
	}
	got, _, err := checkpoint.Open(msg, xv)
	if err != nil || got.Size != 5 || got.Root != c.Root || got.Extensions[0] != "x 1" {
		t.Fatalf("Open = %+v, %v", got, err)
	}

	other, _ := checkpoint.NewVerifier(origin, key(2).Public().(ed25519.PublicKey))
	if _, _, err := checkpoint.Open(msg, other); !errors.Is(err, checkpoint.ErrUnverified) {
		t.Errorf("other key: %v, want ErrUnverified", err)
	}
	tampered := bytes.Replace(msg, []byte("\n5\n"), []byte("\n6\n"), 1)
	if _, _, err := checkpoint.Open(tampered, xv); !errors.Is(err, checkpoint.ErrBadSignature) {
		t.Errorf("tampered: %v, want ErrBadSignature", err)
	}
	bad, _ := note.Sign(&note.Note{Text: origin + "\n05\n" + c.Root.String() + "\n"}, s)
	if _, _, err := checkpoint.Open(bad, xv); !errors.Is(err, checkpoint.ErrMalformed) {
		t.Errorf("leading zero under a valid signature: %v, want ErrMalformed", err)
	}
	if _, _, err := checkpoint.Open([]byte("no signature block\n"), xv); !errors.Is(err, checkpoint.ErrMalformed) {
		t.Errorf("no signatures: %v, want ErrMalformed", err)
	}
}
