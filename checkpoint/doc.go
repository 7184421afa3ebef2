// Package checkpoint holds the C2SP formats a witness speaks: the
// tlog-checkpoint body, the signed note that carries it (Ed25519 note
// signatures, c2sp.org/signed-note), and the timestamped Ed25519
// cosignature of c2sp.org/tlog-cosignature ("cosignature/v1", signature
// type 0x04). It does no I/O.
//
// # Checkpoints
//
// A checkpoint body is an origin line, the tree size in decimal, the base64
// root of the RFC 6962 Merkle tree, then optional extension lines, each
// ending in a newline. [Parse] accepts exactly one encoding of each value
// ([Checkpoint.Marshal]'s): a size without leading zeros or sign, canonical
// padded base64 of exactly 32 bytes, an origin of printable characters
// without leading or trailing spaces, and non-empty extension lines of
// printable characters only; anything else is [ErrMalformed]. So a
// checkpoint has one body, and a signature over it cannot be replayed over
// another spelling of the same values. Sizes above [MaxSize] (2^62) are
// refused: the RFC 6962 proof code loops for ever above it. Log and
// witness public keys of small order are refused ([ErrWeakKey]).
//
// # Cosignatures
//
// A cosignature line is
//
//	— <witness name> base64(key ID || u64 big-endian timestamp || Ed25519 signature)
//
// where key ID = SHA-256(name || "\n" || 0x04 || public key)[:4] and the
// signature covers
//
//	"cosignature/v1\n" || "time " || decimal timestamp || "\n" || checkpoint body
//
// A [CosignatureVerifier] is a note.Verifier, so note.Open checks
// cosignatures together with the log's own signature.
package checkpoint
