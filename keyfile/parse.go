package keyfile

import (
	"bytes"
	"crypto/ed25519"
	"crypto/subtle"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	"golang.org/x/crypto/ssh"

	"github.com/kvfence/kvfence/internal/edkey"
)

const (
	pemTypeOpenSSH = "OPENSSH PRIVATE KEY"
	openSSHMagic   = "openssh-key-v1\x00"
	// openSSHBlockSize is the cipher block size OpenSSH pads an unencrypted
	// private section to.
	openSSHBlockSize = 8
)

// ParsePublic parses one authorized_keys line of type ssh-ed25519:
// "ssh-ed25519 BASE64", optionally followed by a space and a comment, and
// optionally by one newline. It refuses other key types
// ([ErrUnsupportedKeyType]), authorized_keys options, several lines, blank or
// comment lines, control characters, non-canonical base64 and inputs larger
// than [MaxPublicKeySize]. The comment is not returned: it is not part of the
// key.
func ParsePublic(data []byte) (ed25519.PublicKey, error) {
	pub, _, err := parsePublic(data)
	if err != nil {
		return nil, fmt.Errorf("keyfile: parse public key: %w", err)
	}
	return pub, nil
}

func parsePublic(data []byte) (ed25519.PublicKey, string, error) {
	if len(data) > MaxPublicKeySize {
		return nil, "", fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLarge, len(data), MaxPublicKeySize)
	}
	line := bytes.TrimSuffix(data, []byte("\n"))
	if len(line) == 0 {
		return nil, "", fmt.Errorf("%w: empty", ErrMalformedKey)
	}
	if bytes.IndexByte(line, '\n') >= 0 {
		return nil, "", fmt.Errorf("%w: more than one line (exactly one key expected)", ErrMalformedKey)
	}
	if !utf8.Valid(line) {
		return nil, "", fmt.Errorf("%w: not valid UTF-8", ErrMalformedKey)
	}
	for i, r := range string(line) {
		if !unicode.IsPrint(r) {
			return nil, "", fmt.Errorf("%w: non-printable character %U at byte %d", ErrMalformedKey, r, i)
		}
	}

	typ, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return nil, "", fmt.Errorf("%w: want \"ssh-ed25519 BASE64 [COMMENT]\"", ErrMalformedKey)
	}
	if string(typ) != ssh.KeyAlgoED25519 {
		if looksLikeKeyType(typ) {
			return nil, "", fmt.Errorf("%w: %q", ErrUnsupportedKeyType, typ)
		}
		return nil, "", fmt.Errorf("%w: line does not start with the key type ssh-ed25519", ErrMalformedKey)
	}
	b64, comment, hasComment := bytes.Cut(rest, []byte(" "))
	if hasComment {
		if err := checkComment(string(comment)); err != nil || len(comment) == 0 {
			return nil, "", fmt.Errorf("%w: bad comment or extra space", ErrMalformedKey)
		}
	}

	wire, err := base64.StdEncoding.Strict().DecodeString(string(b64))
	if err != nil {
		return nil, "", fmt.Errorf("%w: key data: %v", ErrMalformedKey, err)
	}
	sshPub, err := ssh.ParsePublicKey(wire)
	if err != nil {
		return nil, "", fmt.Errorf("%w: key data: %v", ErrMalformedKey, err)
	}
	if sshPub.Type() != ssh.KeyAlgoED25519 {
		return nil, "", fmt.Errorf("%w: line says ssh-ed25519 but the key data is %q", ErrMalformedKey, sshPub.Type())
	}
	// One key, one spelling: refuse anything the encoder would not produce.
	canonical := bytes.TrimSuffix(ssh.MarshalAuthorizedKey(sshPub), []byte("\n"))
	if !bytes.Equal(canonical, line[:len(typ)+1+len(b64)]) {
		return nil, "", fmt.Errorf("%w: non-canonical encoding", ErrMalformedKey)
	}
	pub, ok := publicFromSSH(sshPub)
	if !ok {
		return nil, "", fmt.Errorf("%w: key data is not an Ed25519 public key", ErrMalformedKey)
	}
	// A small-order key lets anyone forge its signatures; no private key
	// has one, so it is refused for every use (trust, verify-chain, ...).
	if err := edkey.Check(pub); err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrMalformedKey, err)
	}
	return pub, string(comment), nil
}

// looksLikeKeyType tells "ssh-rsa AAAA…" (a real key of the wrong type) from
// garbage, so the error names the actual problem.
func looksLikeKeyType(b []byte) bool {
	if len(b) == 0 || len(b) > 64 {
		return false
	}
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '@', c == '.':
		default:
			return false
		}
	}
	return true
}

func publicFromSSH(k ssh.PublicKey) (ed25519.PublicKey, bool) {
	ck, ok := k.(ssh.CryptoPublicKey)
	if !ok {
		return nil, false
	}
	pub, ok := ck.CryptoPublicKey().(ed25519.PublicKey)
	if !ok || len(pub) != ed25519.PublicKeySize {
		return nil, false
	}
	return append(ed25519.PublicKey(nil), pub...), true
}

// The layouts of the OpenSSH private key format (PROTOCOL.key in OpenSSH).
type (
	openSSHContainer struct {
		CipherName   string
		KdfName      string
		KdfOpts      string
		NumKeys      uint32
		PubKey       []byte
		PrivKeyBlock []byte
		Rest         []byte `ssh:"rest"`
	}
	openSSHPrivateSection struct {
		Check1  uint32
		Check2  uint32
		Keytype string
		Rest    []byte `ssh:"rest"`
	}
	openSSHEd25519Key struct {
		Pub     []byte
		Priv    []byte
		Comment string
		Pad     []byte `ssh:"rest"`
	}
)

// ParsePrivate parses an unencrypted OpenSSH private key holding one Ed25519
// key, as written by [Write] or by ssh-keygen -t ed25519 -N "". The input must
// be exactly one PEM block of type "OPENSSH PRIVATE KEY", with nothing before
// it and only white space after it. Encrypted keys are refused with
// [ErrPassphraseProtected], other key types with [ErrUnsupportedKeyType], and
// anything inconsistent with [ErrMalformedKey].
func ParsePrivate(data []byte) (ed25519.PrivateKey, error) {
	priv, err := parsePrivate(data)
	if err != nil {
		return nil, fmt.Errorf("keyfile: parse private key: %w", err)
	}
	return priv, nil
}

func parsePrivate(data []byte) (ed25519.PrivateKey, error) {
	if len(data) > MaxPrivateKeySize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLarge, len(data), MaxPrivateKeySize)
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrMalformedKey)
	}
	// pem.Decode skips text before the block; a key file has none.
	if !bytes.HasPrefix(data, []byte("-----BEGIN ")) {
		return nil, fmt.Errorf("%w: not a PEM block", ErrMalformedKey)
	}
	block, rest := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%w: incomplete or invalid PEM block", ErrMalformedKey)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%w: data after the key (exactly one key expected)", ErrMalformedKey)
	}
	if block.Type != pemTypeOpenSSH {
		if block.Type == "ENCRYPTED PRIVATE KEY" || block.Headers["Proc-Type"] == "4,ENCRYPTED" {
			return nil, fmt.Errorf("%w (PEM type %q)", ErrPassphraseProtected, block.Type)
		}
		return nil, fmt.Errorf("%w: PEM type %q, want %q (ssh-keygen -t ed25519)", ErrUnsupportedKeyType, block.Type, pemTypeOpenSSH)
	}
	if len(block.Headers) != 0 {
		return nil, fmt.Errorf("%w: unexpected PEM headers", ErrMalformedKey)
	}
	b := block.Bytes
	if !bytes.HasPrefix(b, []byte(openSSHMagic)) {
		return nil, fmt.Errorf("%w: missing openssh-key-v1 magic", ErrMalformedKey)
	}
	var c openSSHContainer
	if err := ssh.Unmarshal(b[len(openSSHMagic):], &c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformedKey, err)
	}
	if len(c.Rest) != 0 {
		return nil, fmt.Errorf("%w: trailing bytes in key container", ErrMalformedKey)
	}
	if c.NumKeys != 1 {
		return nil, fmt.Errorf("%w: %d keys in file, want 1", ErrMalformedKey, c.NumKeys)
	}
	embedded, err := ssh.ParsePublicKey(c.PubKey)
	if err != nil {
		return nil, fmt.Errorf("%w: embedded public key: %v", ErrMalformedKey, err)
	}
	// The public key is stored in the clear, so an encrypted key of the wrong
	// type reports its type rather than asking for a passphrase.
	if embedded.Type() != ssh.KeyAlgoED25519 {
		return nil, fmt.Errorf("%w: %q", ErrUnsupportedKeyType, embedded.Type())
	}
	if c.CipherName != "none" || c.KdfName != "none" {
		return nil, fmt.Errorf("%w (cipher %q, kdf %q)", ErrPassphraseProtected, c.CipherName, c.KdfName)
	}
	if c.KdfOpts != "" {
		return nil, fmt.Errorf("%w: KDF options on an unencrypted key", ErrMalformedKey)
	}
	if len(c.PrivKeyBlock)%openSSHBlockSize != 0 {
		return nil, fmt.Errorf("%w: private section is not padded to %d bytes", ErrMalformedKey, openSSHBlockSize)
	}
	var s openSSHPrivateSection
	if err := ssh.Unmarshal(c.PrivKeyBlock, &s); err != nil {
		return nil, fmt.Errorf("%w: private section: %v", ErrMalformedKey, err)
	}
	if s.Check1 != s.Check2 {
		return nil, fmt.Errorf("%w: check words differ", ErrMalformedKey)
	}
	if s.Keytype != ssh.KeyAlgoED25519 {
		return nil, fmt.Errorf("%w: private section holds %q, public key is ssh-ed25519", ErrMalformedKey, s.Keytype)
	}
	var k openSSHEd25519Key
	if err := ssh.Unmarshal(s.Rest, &k); err != nil {
		return nil, fmt.Errorf("%w: private section: %v", ErrMalformedKey, err)
	}
	if len(k.Pad) >= openSSHBlockSize {
		return nil, fmt.Errorf("%w: %d padding bytes", ErrMalformedKey, len(k.Pad))
	}
	for i, p := range k.Pad {
		if int(p) != i+1 {
			return nil, fmt.Errorf("%w: bad padding", ErrMalformedKey)
		}
	}
	if len(k.Pub) != ed25519.PublicKeySize || len(k.Priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: Ed25519 key of wrong length", ErrMalformedKey)
	}
	// The format stores the public key three times and the seed once; a key
	// is accepted only if all four agree.
	priv := ed25519.NewKeyFromSeed(k.Priv[:ed25519.SeedSize])
	pub := priv.Public().(ed25519.PublicKey)
	if subtle.ConstantTimeCompare(priv, k.Priv) != 1 {
		return nil, fmt.Errorf("%w: public half of the private key does not match its seed", ErrMalformedKey)
	}
	if !bytes.Equal(pub, k.Pub) {
		return nil, fmt.Errorf("%w: public key in the private section does not match the private key", ErrMalformedKey)
	}
	embeddedPub, ok := publicFromSSH(embedded)
	if !ok || !bytes.Equal(embeddedPub, pub) || !bytes.Equal(embedded.Marshal(), c.PubKey) {
		return nil, fmt.Errorf("%w: embedded public key does not match the private key", ErrMalformedKey)
	}

	// Cross-check with the ssh package's own parser, so that a key is never
	// accepted here that ssh tooling would refuse.
	raw, err := ssh.ParseRawPrivateKey(data)
	if err != nil {
		var pm *ssh.PassphraseMissingError
		if errors.As(err, &pm) {
			return nil, ErrPassphraseProtected
		}
		return nil, fmt.Errorf("%w: %v", ErrMalformedKey, err)
	}
	var other ed25519.PrivateKey
	switch r := raw.(type) {
	case *ed25519.PrivateKey:
		other = *r
	case ed25519.PrivateKey:
		other = r
	}
	if subtle.ConstantTimeCompare(other, priv) != 1 {
		return nil, fmt.Errorf("%w: ssh parser disagrees", ErrMalformedKey)
	}
	return priv, nil
}
