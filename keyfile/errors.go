package keyfile

import (
	"errors"

	"github.com/kvfence/kvfence/internal/edkey"
)

// Errors returned while loading a key file.
var (
	// ErrKeyPermissions means a private key file may be read or written by its group or by others.
	ErrKeyPermissions = errors.New("private key file is accessible by group or others")

	// ErrSymlink means a private key path names a symbolic link rather than the key file itself.
	ErrSymlink = errors.New("key path is a symbolic link")

	// ErrNotRegularFile means a key path names a directory, device, pipe or socket instead of a regular file.
	ErrNotRegularFile = errors.New("key path is not a regular file")

	// ErrKeyTooLarge means a key file or key input exceeds MaxPrivateKeySize or MaxPublicKeySize.
	ErrKeyTooLarge = errors.New("key too large")
)

// Errors returned while parsing a key.
var (
	// ErrMalformedKey means the input is not a well-formed, canonical key of the expected format.
	ErrMalformedKey = errors.New("malformed key")

	// ErrPassphraseProtected means the private key is encrypted; kvfence only loads unencrypted keys.
	ErrPassphraseProtected = errors.New("private key is passphrase-protected; an unencrypted key is required (ssh-keygen -p removes the passphrase)")

	// ErrUnsupportedKeyType means the key is well-formed but is not an ssh-ed25519 key.
	ErrUnsupportedKeyType = errors.New("unsupported key type (want ssh-ed25519)")

	// ErrSmallOrderKey means a public key is an Ed25519 point of small
	// order, under which anyone can forge signatures; it comes wrapped
	// with ErrMalformedKey.
	ErrSmallOrderKey = edkey.ErrSmallOrder
)

// Errors returned while writing a key.
var (
	// ErrInvalidComment means a key comment contains a non-printable character or leading or trailing spaces.
	ErrInvalidComment = errors.New("invalid key comment")

	// ErrInvalidPrivateKey means a private key passed to Write or MarshalPrivate is not a consistent Ed25519 key.
	ErrInvalidPrivateKey = errors.New("invalid Ed25519 private key")
)
