// Package audit keeps kvfence's tamper-evident history: a hash chain of audit
// entries stored with the receiver's state, Ed25519-signed checkpoints of the
// chain's head, an anchor that keeps the latest checkpoint outside the
// database, a streaming verifier, and the signed admission with which a
// separately held recovery key re-admits a database whose history was
// questioned. It imports nothing else from kvfence; the receiver and the
// ledger both build on it.
//
// # Guarantee
//
// Let the anchor hold a checkpoint at seq s with head h, signed by the
// receiver's key. A database passes [CheckAnchor] and [Verify] only if its
// chain has an entry s whose hash is h, and [Verify] also checks every link
// from entry 1. Each hash covers the previous one, so, SHA-256 being
// collision-resistant, entries 1 to s are then byte for byte the ones the
// receiver had when it signed. A copy restored from before s ends too early
// (rollback); a history rewritten at or below s has another hash at s (fork).
// Both are refused, and only a recovery admission lets such a database back
// into service. A receiver that returns from a write only once the anchor
// covering it is durable therefore has every acknowledged write covered.
//
// # Encoding
//
// Entries, checkpoints and admissions are CBOR (RFC 8949) in core
// deterministic encoding (§4.2.1), and the decoders accept nothing else. Each
// is one map with text-string keys; integers, lengths and map sizes take their
// shortest form; lengths are definite; keys are sorted by their encoded bytes,
// which for keys shorter than 24 bytes means shorter keys first, then
// bytewise; there are no tags, floats, duplicate or unknown keys; text is
// valid UTF-8; nothing follows the map. Decoders parse, re-encode and compare
// bytes, so one value has exactly one accepted spelling. Below, uint is major
// type 0, int major type 0 or 1, bstr major type 2 and tstr major type 3.
//
// # Entry Format
//
// An entry ([Entry], [EncodeEntry]) is a map with these keys, in this order:
//
//	at              int   required  Unix nanoseconds, receiver clock
//	seq             uint  required  1, 2, 3, …
//	kind            tstr  required  not empty
//	note            tstr
//	prev            bstr  required  32 bytes: the hash of entry seq-1
//	actor           tstr            the administrator who made the change
//	epoch           uint
//	grant           tstr
//	scope           tstr
//	action          tstr
//	reason          tstr
//	target          tstr
//	outcome         tstr
//	decision        tstr
//	executor        tstr
//	rev_after       uint
//	rev_before      uint
//	value_sha256    bstr  32 bytes
//	request_sha256  bstr  32 bytes
//
// A key not marked required is present exactly when its value is not zero or
// empty, so that an absent field has one spelling. actor names the
// authenticated administrator (such as "spiffe://example.org/ops/alice" or
// "unix:uid:1000") on the entry of an administrative change; entries of
// decisions, and changes made by a caller that named no one, have none. An entry is at most
// [MaxEntrySize] bytes. The entry with at 0, seq 1, kind "init" and nothing
// else is these 59 bytes:
//
//	a4                                 map of 4 pairs
//	62 61 74  00                       "at"    0
//	63 73 65 71  01                    "seq"   1
//	64 6b 69 6e 64  64 69 6e 69 74     "kind"  "init"
//	64 70 72 65 76  58 20  00 … 00     "prev"  32 zero bytes
//
// # Hash Linkage
//
// The hash of an entry ([HashEntry]) is
//
//	SHA-256("kvfence/audit/v1\n" || entry bytes)
//
// over the bytes exactly as stored; the prefix keeps an entry hash apart from
// every other SHA-256 that kvfence computes. Entry 1's prev is 32 zero bytes;
// entry n's prev is the hash of entry n-1. Entries are stored under their seq
// as 8 bytes big-endian ([SeqKey]), so that a cursor walks them in order, and
// are never rewritten. A chain's [Head] is its newest entry's seq and hash.
//
// # Checkpoint Format
//
// A checkpoint ([Checkpoint]) is a map with these keys, in this order, all
// required:
//
//	at                int   Unix nanoseconds, receiver clock
//	seq               uint  the head's seq, at least 1
//	head              bstr  32 bytes: the head's hash
//	receiver          tstr  the receiver id
//	epoch_high_water  uint  no scope's epoch was higher at seq
//
// The receiver id is 1 to [MaxReceiverLen] bytes of UTF-8 without control
// characters (U+0000 to U+001F and U+007F), so that it fits on one line of the
// anchor file. At 0, seq 1, a zero head, receiver "r" and epoch high-water 1
// encode as
//
//	a5 62 61 74 00 63 73 65 71 01 64 68 65 61 64 58 20 00 … 00
//	68 72 65 63 65 69 76 65 72 61 72
//	70 65 70 6f 63 68 5f 68 69 67 68 5f 77 61 74 65 72 01
//
// # Signatures
//
// Signatures are Ed25519 (RFC 8032, pure Ed25519) over a domain-separated
// message:
//
//	checkpoint:  "kvfence/checkpoint/v1\n" || checkpoint bytes
//	admission:   "kvfence/admission/v1\n" || admission bytes
//
// The prefixes make a signature on one kind of statement worthless as the
// other, even under one key. A key is named by its [Fingerprint]: the SHA-256
// of its OpenSSH wire form, 00 00 00 0b "ssh-ed25519" 00 00 00 20 and the
// 32-byte key, written "SHA256:" and unpadded base64 as "ssh-keygen -l" writes
// it. The fingerprint travels with the signature but is not signed; it only
// lets an error say which key signed. Verification always uses the key the
// caller trusts.
//
// # Signed Checkpoint Format
//
// A signed checkpoint ([SignedCheckpoint]) in CBOR, as the receiver keeps it
// in its database, is a map with these keys, in this order:
//
//	key         bstr  32 bytes: the signing key's fingerprint
//	sig         bstr  64 bytes: the signature
//	checkpoint  bstr  the checkpoint bytes, exactly as signed
//
// so it is a3 63 6b 65 79 58 20, the fingerprint, 63 73 69 67 58 40, the
// signature, 6a 63 68 65 63 6b 70 6f 69 6e 74 and the checkpoint as a bstr; it
// is at most [MaxCheckpointSize] bytes. A signed admission ([SignedAdmission])
// has the same form with the key "admission" (69 61 64 6d 69 73 73 69 6f 6e)
// in place of "checkpoint", and is at most [MaxAdmissionSize] bytes.
//
// # Anchor File Format
//
// An anchor ([SignedCheckpoint.MarshalAnchor], [ParseAnchor]) is one signed
// checkpoint as eight lines of UTF-8 text, each ended by one line feed
// (0x0a); after the first, each line is a label, one space (0x20) and a
// value:
//
//	kvfence checkpoint v1
//	receiver receiver-1
//	seq 42
//	head dead000000000000000000000000000000000000000000000000000000000000
//	epoch_high_water 7
//	at 2026-01-01T00:00:00.123456789Z
//	key SHA256:fe85JkIjo8VPe+XqXJGH5Mau1EMFdK1OdKvJUFicyA8
//	sig z+WtodMcIoZtG6+lchq3vczQVKnH/bIHvNqKsnyo7G8CW5jrE5ML1JMWWn4h24+61VlQfOlDmyXJEGj2Z0IMCA==
//
// The receiver is the id as is; seq and epoch_high_water are decimal without
// sign or leading zeros; head is 64 lower-case hex digits; at is RFC 3339 in
// UTC with as many fractional digits as needed and no more (Go's
// [time.RFC3339Nano]); key is the fingerprint; sig is the signature in padded
// standard base64 (RFC 4648 §4). Nothing precedes the first line or follows
// the last line feed, and there are no carriage returns. An anchor is at most
// [MaxCheckpointSize] bytes. The signature covers the checkpoint these lines
// spell, in its CBOR form; the parser refuses every spelling but the one it
// writes itself, so an anchor that verifies has exactly one possible content.
// An operator can compare it with verify-chain output and its key line with
// "ssh-keygen -l -f receiver.pub".
//
// The anchor file ([FileAnchor]) is exactly [AnchorFileSize] (8192) bytes:
// two slots of [AnchorSlotSize] (4096) bytes, slot 0 at offset 0 and slot 1
// at offset 4096. A slot is either 4096 zero bytes (empty) or, in bytes:
//
//	0    27  "kvfence-anchor-slot v1 gen="
//	27   20  gen: decimal, zero-padded to 20 digits, at least 1
//	47    5  " len="
//	52    4  len: the anchor's length, decimal, zero-padded to 4 digits
//	56    8  " sha256="
//	64   64  lower-case hex of SHA-256(bytes 0 to 55 || anchor)
//	128   1  line feed
//	129 len  the anchor
//	         zero bytes to the end of the slot
//
// so slot 0 of the file that the FileAnchor example writes, a 310-byte
// anchor at generation 1, begins
//
//	kvfence-anchor-slot v1 gen=00000000000000000001 len=0310 sha256=2ac9…91bf
//	kvfence checkpoint v1
//
// The checksum covers the header up to and including the len digits and the
// anchor, so a torn header or anchor does not match. A slot is valid only if
// it is exactly this: the header as it would be written for its gen, len and
// anchor, the anchor in canonical form and the padding zero. The current
// anchor is in the valid slot with the higher gen. A file of another size,
// without a valid slot, or with two valid slots of the same gen is damaged;
// a slot that is neither empty nor valid, beside a valid one, is what a
// write interrupted by a crash leaves, and is skipped. Text editors and
// "cat" show the anchor; "head -c 4096" and "tail -c 4096" show one slot.
//
// A write puts the new anchor, at the current gen plus one, into the slot
// that is not current, in one 4096-byte write followed by fdatasync(2). A
// new file holds the anchor in slot 0 at gen 1 and an empty slot 1, and is
// created with mode 0600, fsynced, and made durable by fsyncing its
// directory.
//
// The C2SP formats signed-note (https://c2sp.org/signed-note) and
// tlog-checkpoint (https://c2sp.org/tlog-checkpoint) were considered for this
// file and not used. A tlog checkpoint's hash is the root of an RFC 6962
// Merkle tree, which witnesses and monitors check with consistency proofs;
// this chain's head is a linear hash chain that no such proof covers, and
// labelling it a Merkle root would invite tools to misread it. A signed note
// signs its text, whereas a kvfence checkpoint is signed once, in CBOR, so
// that the copy in the database and the anchor are the same statement under
// the same signature. What this format takes from them is one human-readable
// file per head, a key id that names the signer, and the witness's rule below.
//
// # Anchor Rules
//
// An [AnchorStore] replaces its anchor only by compare-and-swap, like the
// WriteConfig of golang.org/x/mod/sumdb: [AnchorStore.Store] names the anchor
// it expects to replace and fails with [ErrWriteConflict] if another is
// stored. Like a transparency-log witness, it refuses a checkpoint with a
// smaller seq, with the same seq and another head, or with a smaller epoch
// high-water ([ErrAnchorRegression]), and one for another receiver
// ([ErrReceiverMismatch]). Only [AnchorStore.Supersede], after a verified
// recovery admission, moves an anchor back. Loading never creates an anchor: a
// missing anchor is [ErrAnchorMissing], never an occasion to initialise one.
//
// [FileAnchor] writes the slot that is not current, in place, under an
// exclusive lock on the file; the current slot is never written, so a crash
// leaves the new anchor or the previous one, never a mix or none. It refuses
// symbolic links, directories and other non-regular files
// ([ErrAnchorNotRegular]), files writable by group or others
// ([ErrAnchorPermissions]) and damaged files ([ErrBadAnchor]), and never
// overwrites any of them; only a damaged slot beside a valid one is
// overwritten, by the next write.
//
// # Admission Format
//
// An admission ([Admission]) is a map with these keys, in this order, all
// required:
//
//	at               int   Unix nanoseconds, recovery operator's clock
//	reason           tstr  1 to MaxReasonLen bytes
//	receiver         tstr  the receiver id
//	admitted_seq     uint  the database head's seq, at least 1
//	admitted_head    bstr  32 bytes: the database head's hash
//	superseded_seq   uint  the superseded anchor's seq, at least 1
//	superseded_head  bstr  32 bytes: the superseded anchor's head
//
// It is signed with the recovery key, which is not the receiver's key, under
// its own prefix (see Signatures). [Admission.Check] accepts it only for the
// receiver, anchor and head it names, so it cannot be replayed against any
// other state.
//
// # Verification
//
// [Verify] streams a chain from an iterator such as a bbolt cursor and keeps
// only the previous entry's hash, so its memory does not grow with the log. It
// reports the first problem as a stable [Problem] code, looking in this order:
// the anchor (anchor_missing, bad_signature, receiver_mismatch); each entry in
// seq order (bad_entry, seq_gap, broken_link, and fork_detected at the
// anchored seq); the chain's end (rollback_detected); and, if asked, the
// anchor's age (anchor_stale). [CheckAnchor] is the cheap check for opening a
// database: the anchor's signature and receiver, and the hash of one stored
// entry.
//
// # Caveats
//
// Entries are not signed; checkpoints are. Whoever can write the database file
// can append entries after the anchored seq, and the receiver adopts them when
// it next opens and moves the anchor up: a database ahead of its anchor cannot
// be told from the crash window between a commit and its anchor write. The
// anchor protects the history up to its seq, not what follows; protect the
// database file itself.
//
// The anchor is only as independent as the place it is kept. Whoever can put
// back old copies of both the database and the anchor presents a stale but
// valid state (a freeze attack, in TUF's terms) that nothing in either file
// reveals; [VerifyOptions.MaxAge] bounds it for receivers that write often.
// Keep the anchor on another volume or host, administered apart from the
// database.
//
// Anchor stores check structure and order, not signatures: the receiver
// verifies the anchor it loads and signs what it stores.
//
// [FileAnchor] locks with flock(2) on the anchor file, which excludes
// writers in other processes on Linux, macOS and the BSDs, though perhaps not
// on network file systems; on other systems it excludes writers in the same
// process only. Only the anchor path's last element is checked for being a
// symbolic link; links among its parent directories are followed, as
// everywhere else. FileAnchor does not exist on Windows, where file modes do
// not say who may write a file.
//
// Whoever can write the anchor file can damage its current slot, and Load
// then returns the previous anchor, one write older: no more than putting
// back an old copy of the file, which such a writer can do anyway. A crash
// while a new anchor file is being created, or a Load during that first
// write, can find it short, which is [ErrBadAnchor]; the receiver was not
// initialised, and the file must be removed before trying again.
//
// Times are Unix nanoseconds in an int64 from the signer's clock: evidence of
// what that clock said, within the years 1678 to 2262.
//
// The [VerifyOptions.Entries] iterator cannot return an error; a caller whose
// source can fail must check it after Verify returns.
package audit
