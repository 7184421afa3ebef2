// Package keyfile reads and writes the Ed25519 keys that sign and verify kvfence
// checkpoints, anchors and recovery admissions.
//
// Keys use the OpenSSH formats, so keys made by
//
//	ssh-keygen -t ed25519 -N "" -f receiver.key
//
// work unchanged:
//
//   - a private key is one unencrypted PEM block of type "OPENSSH PRIVATE KEY"
//     holding exactly one ssh-ed25519 key;
//   - a public key is one authorized_keys line "ssh-ed25519 BASE64[ COMMENT]",
//     optionally followed by a single newline.
//
// # Guarantees
//
// A key is returned only if the whole input is well-formed; nothing is
// repaired or guessed. [ParsePublic] accepts exactly one line in exactly one
// encoding: it decodes the key and re-encodes it, and refuses the input
// unless the bytes are identical, so one key has one accepted spelling (the
// comment is not part of the key and is not authenticated). [ParsePrivate]
// checks the OpenSSH container field by field: no trailing data, no
// encryption, one key, consistent check words and padding, and a private key
// whose seed, public half and embedded public key all agree.
//
// [LoadPrivate] refuses a private key file that group or others may read or
// write ([ErrKeyPermissions]), a symbolic link ([ErrSymlink]), anything but a
// regular file ([ErrNotRegularFile]), a file larger than [MaxPrivateKeySize]
// ([ErrKeyTooLarge]), a passphrase-protected key ([ErrPassphraseProtected])
// and any key type other than Ed25519 ([ErrUnsupportedKeyType]). Every error
// wraps one of the sentinels in this package, or an [io/fs] error for a
// missing or unreadable file, so callers can test it with [errors.Is].
//
// [Write] never overwrites: it creates the private key (mode 0600) and the
// public key (mode 0644) with O_EXCL, fsyncs both files and their directory,
// and removes whatever it created if any step fails.
//
// # Caveats
//
// Only the last path element is checked for being a symbolic link; symbolic
// links among the parent directories are followed, as everywhere else.
//
// The permission check relies on POSIX permission bits. On systems without
// them (Windows), Go reports private key files as readable by everyone and
// [LoadPrivate] refuses them.
//
// Passphrase-protected keys are refused rather than decrypted: a receiver
// runs unattended, and a prompt would either block it or invite storing the
// passphrase next to the key. Protect the key with file permissions, or use
// a key held by an agent or HSM in a future signer.
//
// Go cannot reliably erase secrets from memory; the private key bytes
// returned by this package are ordinary slices.
package keyfile
