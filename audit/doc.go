// Package audit keeps kvfence's tamper-evident history: a hash chain of audit
// entries stored with the receiver's state, Ed25519-signed checkpoints of the
// chain's head, an anchor that keeps the latest checkpoint outside the
// database, a streaming verifier, and the signed admission with which a
// separately held recovery key re-admits a database whose history was
// questioned or whose anchor was lost. It imports nothing else from
// kvfence; the receiver and the ledger both build on it.
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
// into service; so is a database whose anchor is missing or damaged, which
// only a lost-anchor admission re-anchors. A receiver that returns from a
// write only once the anchor covering it is durable therefore has every
// acknowledged write covered.
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
//	base_seq        uint
//	decision        tstr
//	executor        tstr
//	base_hash       bstr  32 bytes
//	rev_after       uint
//	base_fence      bstr  32 bytes
//	rev_before      uint
//	value_sha256    bstr  32 bytes
//	request_sha256  bstr  32 bytes
//
// A key not marked required is present exactly when its value is not zero or
// empty, so that an absent field has one spelling. actor names the
// authenticated administrator (such as "spiffe://example.org/ops/alice" or
// "unix:uid:1000") on the entry of an administrative change; entries of
// decisions, and changes made by a caller that named no one, have none.
// base_seq, base_hash and base_fence appear only on an archive entry
// ([KindArchived]; see Archive Format). An entry is at most
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
// required but the two admission keys:
//
//	at                int   Unix nanoseconds, receiver clock
//	seq               uint  the head's seq, at least 1
//	head              bstr  32 bytes: the head's hash
//	root              bstr  32 bytes, not all zero: the RFC 6962 root
//	                        (tlog.TreeHash) of the entries 1 to seq
//	state             bstr  32 bytes: the state digest's sum (State Digest)
//	receiver          tstr  the receiver id
//	admission_at      int   the consumed admission's at
//	admission_sha256  bstr  32 bytes, not all zero: the consumed admission's
//	                        SHA-256, over its signed bytes
//	epoch_high_water  uint  no scope's epoch was higher at seq
//
// The admission keys ([Checkpoint.Admission], [AdmissionRecord]) are both
// present or both absent: present from the checkpoint a recovery signs on,
// naming the recovery admission it consumed, and carried unchanged by
// every later checkpoint until another recovery names a later one. See
// Admission Format for why.
//
// The receiver id is 1 to [MaxReceiverLen] bytes of UTF-8 without control
// characters (U+0000 to U+001F and U+007F), so that it fits on one line of the
// anchor file. At 0, seq 1, a zero head, a root of 32 bytes of 0x11, a zero
// state, receiver "r" and epoch high-water 1 encode as
//
//	a7 62 61 74 00 63 73 65 71 01 64 68 65 61 64 58 20 00 … 00
//	64 72 6f 6f 74 58 20 11 … 11
//	65 73 74 61 74 65 58 20 00 … 00
//	68 72 65 63 65 69 76 65 72 61 72
//	70 65 70 6f 63 68 5f 68 69 67 68 5f 77 61 74 65 72 01
//
// The same checkpoint naming an admission signed at 3600000000000 whose
// digest is 32 bytes of 0xad has nine pairs (a9 in place of a7), and these
// two between receiver and epoch_high_water:
//
//	6c 61 64 6d 69 73 73 69 6f 6e 5f 61 74  1b 00 00 03 46 30 b8 a0 00
//	70 61 64 6d 69 73 73 69 6f 6e 5f 73 68 61 32 35 36  58 20  ad … ad
//
// The admission keys were added to the second version rather than making a
// third: a checkpoint that names no admission is byte for byte what it was,
// so the anchors and databases written before stay valid, and their lack
// of a record is true of them, since no admission that predates the keys
// is accepted any longer (an admission of the second format is refused,
// see Admission Format). A reader from before the keys refuses a
// checkpoint that has them, as an unknown key, rather than reading it
// without them.
//
// This is the third version of the checkpoint, signed under the prefix
// "kvfence/checkpoint/v3\n": it added root, so that the anchor commits to
// the stored Merkle tree and every proof drawn from it, and a tree record
// edited apart from the entries (one of an archived leaf included, which
// no check of the stored entries reads) changes a root the receiver
// signed. The second had no root (prefix "kvfence/checkpoint/v2\n"); a
// second-version anchor is refused ([ErrAnchorV2]), as are the databases
// that wrote it. The first had no state either, and its signatures used
// the prefix "kvfence/checkpoint/v1\n". A first-version anchor is refused
// ([ErrAnchorV1]), not upgraded: nothing can vouch after the fact for the
// state it did not cover. A lost-anchor recovery admission re-anchors such
// a receiver, holding every scope.
//
// # State Digest
//
// The chain pins the history, not the state beside it: a backup taken while
// a grant was active, with the live chain's entries copied into it, has the
// anchored chain and the old state, and would let the superseded grant
// write. So each checkpoint also commits to the fence state: the set of
// records (bucket, key, value) of the receiver's control, grant, target,
// receipt, hold and effect (application record) buckets, hashed by
// [StateHash].
//
// [StateHash] is LtHash16: each record is expanded by BLAKE3, in its plain
// hashing mode (no key, no context string), into the first 2048 bytes of its
// extendable output over
//
//	"kvfence/state/v2\n" || uvarint(len(bucket)) || bucket ||
//	uvarint(len(key)) || key || value
//
// read as 1024 lanes of 16 bits, each a 16-bit little-endian integer, lane 0
// first; the state's digest is the lane-wise sum of its records' expansions,
// modulo 2^16, stored as 2048 bytes in the same order. The checkpoint's state
// is SHA-256("kvfence/state-sum/v2\n" || those 2048 bytes).
//
// Why this construction. The digest has to follow every put at a cost that
// does not grow with the state, and a reader has to recompute it from the
// records alone, in any order. A hash over the sorted records is not
// incremental; a Merkle tree would need an index that bbolt does not keep. A
// homomorphic set hash is both, and the question is which. XOR of record
// hashes (XHASH) is linear over GF(2): with a few hundred known records,
// Gaussian elimination finds a subset whose XOR is any chosen digest, so it
// is not collision-resistant at all (Bellare and Micciancio, 1997). Addition
// modulo 2^256 (AdHash with a small modulus) falls to Wagner's generalised
// birthday attack. LtHash, addition of long vectors modulo a small power of
// two, is collision-resistant if the short integer solution (SIS) lattice
// problem is hard; with n = 1024 and q = 2^16, the parameters Lewi, Kim,
// Maykov and Weis chose for a deployed system (Securing Update Propagation
// with Homomorphic Hashing, 2019), the estimated security is over 200 bits.
// MuHash (multiplication modulo a 3072-bit prime) would do as well but needs
// a modular inverse to remove a record and costs more per update.
//
// What is assumed of the expansion. The reduction to SIS (Bellare and
// Micciancio; Lewi et al.) models the function that expands a record as a
// random oracle: then two distinct multisets of records with one digest give
// a nonzero vector of small integer coefficients (the differences of the
// records' multiplicities; the receiver's sets hold each record once, so they
// are -1, 0 or 1) that combines independent uniform vectors of Z_q^n into
// zero, which is an SIS solution. So the expansion must behave as a random
// function of the framed record, for outputs of 2048 bytes. BLAKE3 (O'Connor,
// Aumasson, Neves and Wilcox-O'Hearn, 2020) claims 128-bit security for every
// output length, indifferentiability from a random oracle included, and
// argues the claim in two parts: its tree mode meets the sufficient
// conditions for sound tree hashing of Bertoni, Daemen, Peeters and Van
// Assche (2014), so that it is indifferentiable from a random oracle when its
// compression function is ideal, and the compression function is BLAKE2s's
// with 7 rounds instead of 10, which its designers argue leaves a margin over
// the best published attacks on the BLAKE family's rounds. This is the
// assumption, and it is a younger one than SHAKE128's: the design has had
// less public cryptanalysis than Keccak. The 2048-byte output is 32 blocks of
// the root compression with counters 0 to 31, a prefix of one random string
// under that claim; a longer output does not raise the security level above
// 128 bits, and does not lower it: the generic attacks on the expansion (a
// collision of framed records, a second preimage, telling it from a random
// function) cost about 2^128 whatever the output length, and an attack on the
// sum itself has to solve SIS. The digest's security is the smaller of the
// two, 128 bits, as it was with SHAKE128, whose claim FIPS 202 states the
// same way (min(d/2, 128) bits of collision resistance for d output bits).
// Nothing here is secret, so no key is used: anyone who reads the records
// recomputes the digest, as Open and Verify's caller do.
//
// Domain separation. The framing is injective: the bucket and key are
// length-prefixed and the value is last, so distinct records are distinct
// inputs (TestStateHash_RecordsAreDistinct). The prefix names the
// construction, so this hash of a record is never the input of any other
// hash kvfence computes (each has its own prefix) and differs from version
// 1's, which expanded the same framing under "kvfence/state/v1\n" with
// SHAKE128 (FIPS 202). BLAKE3's key-derivation mode, whose context string
// would separate domains through the compression's flags instead, was not
// chosen: it is made for deriving keys from secret material, the prefix in
// the plain mode separates as well in the random-oracle model above, and a
// term can then be checked with any BLAKE3 tool that prints long outputs
// (b3sum --length 2048 over the framed bytes; testdata/statehash holds such
// known answers, TestStateHash_KnownAnswers). The sum's prefix has a version
// too, so that a checkpoint's state names the construction of the lanes it
// covers.
//
// Cost. BLAKE3 does what SHAKE128 did for several times less CPU: the term
// of a record with a 120-byte value took 2.5 to 12 times less time in pairs
// of runs on a loaded 2-core VM with AVX-512 (BenchmarkStateElement), 0.6 to
// 0.9 µs against 3.6 to 4.2 µs in the quietest, so a fenced write's three
// terms (a target and its receipt; a denial's control record counted twice,
// removed and added) cost about 2 µs instead of 12. The output blocks are
// independent compressions, computed side by side (16 at a time with
// AVX-512, 8 with AVX2; one at a time in portable Go elsewhere, which was not
// measured), which is where the speed comes from; the input is fed and the
// output read a 1024-byte chunk at a time, so that the library never starts
// goroutines of its own on the commit leader's path.
//
// What changed for old databases. A database of receiver format 4 or older
// stores SHAKE128 lanes, and its checkpoints, its anchor and any witness's
// cosigned notes commit to their version-1 sums; this version of the
// receiver no longer computes those, so it cannot check them, and nothing
// it could recompute would be vouched for by a signature made before. Such a
// database is refused at Open with ErrBadFormat, naming its format, as the
// earlier format changes were: initialise a new receiver, exporting what is
// needed with observe first.
//
// The receiver keeps the digest current in each write transaction, removing a
// record's old bytes and adding its new ones, and stores its 2048 bytes in
// the checkpoints bucket beside the latest checkpoint, which every commit
// writes in the same transaction. On opening with an anchor, and in Verify's
// caller, the digest is recomputed from every record and must equal the sum
// the database's own newest checkpoint signs, that checkpoint must cover the
// chain's head, the stored lanes must equal the recomputed ones, and the
// database's epoch high-water must be the signed one and no lower than the
// anchor's; otherwise the database is refused ([ErrStateMismatch], problem
// state_mismatch). Only the receiver's key signs checkpoints, so a copied-in
// checkpoint describes the live state, not the copy's.
//
// # Signatures
//
// Signatures are Ed25519 (RFC 8032, pure Ed25519) over a domain-separated
// message:
//
//	checkpoint:             "kvfence/checkpoint/v3\n" || checkpoint bytes
//	admission:              "kvfence/admission/v3\n" || admission bytes
//	lost-anchor admission:  "kvfence/reanchor/v3\n" || admission bytes
//	archive statement:      "kvfence/archive/v1\n" || statement bytes
//	hold acknowledgment:    "kvfence/hold-ack/v1\n" || acknowledgment bytes
//
// The prefixes make a signature on one kind of statement worthless as any
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
// of either kind has the same form with the key "admission" (69 61 64 6d 69
// 73 73 69 6f 6e) in place of "checkpoint", and is at most
// [MaxAdmissionSize] bytes.
//
// # Anchor File Format
//
// An anchor ([SignedCheckpoint.MarshalAnchor], [ParseAnchor]) is one signed
// checkpoint as ten lines of UTF-8 text, or twelve for a checkpoint that
// names a consumed admission, each ended by one line feed (0x0a); after the
// first, each line is a label, one space (0x20) and a value:
//
//	kvfence checkpoint v3
//	receiver receiver-1
//	seq 42
//	head dead000000000000000000000000000000000000000000000000000000000000
//	root 7ee0000000000000000000000000000000000000000000000000000000000000
//	state 57a7000000000000000000000000000000000000000000000000000000000000
//	epoch_high_water 7
//	at 2026-01-01T00:00:00.123456789Z
//	key SHA256:fe85JkIjo8VPe+XqXJGH5Mau1EMFdK1OdKvJUFicyA8
//	sig BNM6342UOItVs6lZ8UVsMRXqLxIIPuLRLoYFMcRtTAILPJtCQ9+Add39uS4WvAA0hcfUa9Sw7zkotgxJJwbUDg==
//
// A checkpoint that names a consumed admission has two more lines, in
// this order, between epoch_high_water and at: "admission_sha256" and 64
// lower-case hex digits, and "admission_at" and the admission's at in the
// form of the at line. The two come together or not at all.
//
// The receiver is the id as is; seq and epoch_high_water are decimal without
// sign or leading zeros; head, root and state are 64 lower-case hex digits each; at is RFC 3339 in
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
// so slot 0 of the file that the FileAnchor example writes, a 451-byte
// anchor at generation 1, begins
//
//	kvfence-anchor-slot v1 gen=00000000000000000001 len=0451 sha256=ae79…06e5
//	kvfence checkpoint v3
//
// The checksum covers the header up to and including the len digits and the
// anchor, so a torn header or anchor does not match. A slot is valid only if
// it is exactly this: the header as it would be written for its gen, len and
// anchor, the anchor in canonical form and the padding zero. The current
// anchor is in the valid slot with the higher gen. A file of another size,
// without a valid slot, or with two valid slots of the same gen is damaged
// and holds no anchor. A slot that is neither empty nor valid, beside a
// valid one, is what a write interrupted by a crash leaves, and so is not
// needed to read the anchor; but it is damage, and [FileAnchor.Inspect]
// describes it ([SlotDamage]): which slot, why (a malformed header, a
// checksum mismatch, non-zero padding, a bad anchor text), and the gen it
// was written at. That gen is the one the header names or, where the
// header is damaged, the one under which the checksum still matches the
// slot, so that one changed byte anywhere in a slot never hides its gen.
// An empty slot beside a current gen of 2 or more is damage too (erased):
// from gen 2 on, both slots have been written. Text editors and "cat"
// show the anchor; "head -c 4096" and "tail -c 4096" show one slot.
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
// recovery admission, moves an anchor back. Every store also keeps the
// consumed admission a checkpoint names: [AnchorStore.Store] refuses a
// checkpoint whose admission record differs from the anchor's, dropped or
// replaced ([ErrAnchorRegression]), and [AnchorStore.Supersede] one that
// names none, or an earlier one, where the anchor names one. Loading never creates an anchor: a
// missing anchor is [ErrAnchorMissing], never an occasion to initialise one;
// after init, only a verified lost-anchor admission leads the receiver to
// store an anchor where there is none ([AnchorStore.Store] with a nil old).
//
// [FileAnchor] writes the slot that is not current, in place, under an
// exclusive lock on the file; the current slot is never written, so a crash
// leaves the new anchor or the previous one, never a mix or none. A
// supersession then writes the new anchor a second time, at the next
// generation, into the other slot, so that no slot holds the superseded
// anchor: damage to one slot would otherwise make it current again, and a
// copy of the database from before the recovery would pass against it
// with the recovery's own admission. A crash during that second write
// leaves the superseded slot damaged beside the recovery's anchor, which
// the rule below reads as a suspected rollback of a database at the
// recovery's head; a new admission, or the file moved aside and a
// lost-anchor admission, is then the way back. It refuses
// symbolic links, directories and other non-regular files
// ([ErrAnchorNotRegular]), files writable by group or others
// ([ErrAnchorPermissions]) and damaged files ([ErrBadAnchor]), and never
// overwrites any of them; only a damaged slot beside a valid one is
// overwritten, by the next write, since the crash window needs that. A
// receiver reads the anchor with [LoadWithDamage] when it opens, before
// it writes, and reports a damaged slot; a write whose expected anchor is
// in the damaged slot fails with [ErrWriteConflict] naming the damage.
//
// A damaged slot is judged by [SlotDamage.Check]. The receiver commits to
// its database before it writes the anchor that covers the commit, every
// commit adds at least one entry, and the anchor written when a receiver
// opens a database ahead of its anchor covers that database's head; so an
// anchor write of the gen after the current slot's began only once the
// database had committed past the current slot's seq. If the damaged slot
// was written at that next gen (damage to the newest slot, or that write
// torn by a crash), then:
//
//   - if its anchor text still parses and verifies under the receiver's
//     key (the damage is in the header, the checksum or the padding), its
//     seq and head are known, and the database is checked against them as
//     against the anchor itself: a chain that ends before its seq is a
//     rollback, another hash at its seq a fork;
//   - otherwise, a database whose head is exactly the current slot's seq is
//     older than the write that damaged the slot, which is what a copy
//     restored to the previous write, with the newest slot then damaged,
//     presents: a suspected rollback ([SuspectedRollbackError], matching
//     [ErrRollbackDetected]), refused like any rollback, with a recovery
//     admission as the way back;
//   - a database past the current slot's seq is the crash window between a
//     commit and its anchor write: it is accepted and the damage reported.
//
// Damage to the older slot, or damage that erased the gen, is reported
// and never refused.
//
// # Admission Format
//
// An admission ([Admission]) is one of two kinds, each a map of nine
// pairs. An ordinary admission, which supersedes an anchor, has these keys,
// in this order, all required:
//
//	at               int   Unix nanoseconds, recovery operator's clock
//	reason           tstr  1 to MaxReasonLen bytes
//	expires          int   Unix nanoseconds, recovery operator's clock:
//	                       after at, at most MaxAdmissionValidity after it
//	receiver         tstr  the receiver id
//	admitted_seq     uint  the database head's seq, at least 1
//	admitted_head    bstr  32 bytes: the database head's hash
//	admitted_state   bstr  32 bytes: the sum of the database's StateHash
//	superseded_seq   uint  the superseded anchor's seq, at least 1
//	superseded_head  bstr  32 bytes: the superseded anchor's head
//
// A lost-anchor admission, for a receiver whose anchor is missing or
// damaged as a whole, has these keys, in this order, all required:
//
//	at               int   Unix nanoseconds, recovery operator's clock
//	reason           tstr  1 to MaxReasonLen bytes
//	expires          int   as above
//	receiver         tstr  the receiver id
//	epoch_floor      uint  the operator's highest known epoch; 0 allowed
//	lost_anchor      true  the simple value true (f5), nothing else
//	admitted_seq     uint  the database head's seq, at least 1
//	admitted_head    bstr  32 bytes: the database head's hash
//	admitted_state   bstr  32 bytes: the sum of the database's StateHash
//
// Both name the state as well as the head: recovery signs a checkpoint
// over the records it finds, so an admission that named only the head
// would let records changed after it was signed be signed too.
//
// The kind is written out, not inferred: a lost-anchor admission carries
// lost_anchor true and no superseded key; an ordinary one carries neither
// lost_anchor nor epoch_floor. Any mix (lost_anchor false, a zero
// superseded anchor, an epoch floor beside a superseded anchor) is refused.
// At 0, reason "r", expiry an hour later, receiver "r", epoch floor 7 and
// head seq 1 with a zero hash and a zero state, a lost-anchor admission is
// these 179 bytes:
//
//	a9                                          map of 9 pairs
//	62 61 74  00                                "at"             0
//	66 72 65 61 73 6f 6e  61 72                 "reason"         "r"
//	67 65 78 70 69 72 65 73                     "expires"
//	    1b 00 00 03 46 30 b8 a0 00              3600000000000
//	68 72 65 63 65 69 76 65 72  61 72           "receiver"       "r"
//	6b 65 70 6f 63 68 5f 66 6c 6f 6f 72  07     "epoch_floor"    7
//	6b 6c 6f 73 74 5f 61 6e 63 68 6f 72  f5     "lost_anchor"    true
//	6c 61 64 6d 69 74 74 65 64 5f 73 65 71  01  "admitted_seq"   1
//	6d 61 64 6d 69 74 74 65 64 5f 68 65 61 64   "admitted_head"
//	    58 20  00 … 00                          32 zero bytes
//	6e 61 64 6d 69 74 74 65 64 5f 73 74 61 74 65
//	                                            "admitted_state"
//	    58 20  00 … 00                          32 zero bytes
//
// Both kinds are signed with the recovery key, which is not the receiver's
// key, each under its own prefix (see Signatures), so a signature on one
// kind never verifies as the other. [Admission.Check] accepts only an
// ordinary admission, and only for the receiver, anchor, head and state it
// names; [Admission.CheckLostAnchor] accepts only a lost-anchor admission,
// and only for the receiver, head and state it names. Neither can be replayed against
// any other state. Whether the anchor is really lost is for the receiver
// to establish when it applies the admission: the admission records only
// that its signer believed so, and the epoch floor the signer chose,
// because without its anchor nothing vouches for the database's own epoch
// high-water.
//
// An admission is a bearer token for the state it names: whoever holds it
// and a copy of that state can present both. Two things bound its use.
//
// It expires. [Admission.CheckTime] refuses it at and after expires by the
// clock of the machine that applies it ([ErrAdmissionExpired]), and refuses
// one whose at is more than [MaxAdmissionSkew] ahead of that clock
// ([ErrAdmissionNotYetValid]): a signer's clock that runs ahead would
// otherwise stretch the validity on the applying machine by as much. Both
// clocks are trusted for this and nothing else; whoever sets the applying
// machine's clock back extends the validity. This is the third format of
// the admission: the second had no expiry, and so was valid forever. Its
// admissions are refused ([ErrAdmissionV2]), never read as ones that do
// not expire, and the signature prefixes changed with it, so no
// second-format signature verifies over a third-format body.
//
// It is consumed. The checkpoint a recovery signs names the admission it
// applied (admission_sha256 and admission_at, Checkpoint Format), and so
// does every later checkpoint, carried unchanged; the anchor stores refuse
// to drop it (Anchor Rules). A recovery refuses an admission that the
// current anchor, the damaged slot beside it if that still verifies, or
// the database's own newest checkpoint names, and one whose at is not
// after the named one's ([AdmissionRecord.Refuses], [ErrAdmissionReplayed]):
// a second use, or the use of an older admission, is refused while the
// anchor that the recovery wrote, or any later one, survives. The record
// is in the checkpoint, signed by the receiver's key, because the
// checkpoint is the one statement that both the anchor and the database
// carry and that nobody without that key can write: a record in the
// database alone would be lost with a copy put back from before the
// recovery, and the anchor holds nothing but a signed checkpoint. The
// digest names the admission exactly; at orders admissions, since one
// signed before a consumed one was signed against a state that the
// consumed one has since superseded.
//
// What this cannot do: whoever deletes the anchor (or replaces the file
// with an old copy) and puts back the database the admission names
// presents exactly the state the admission was signed for, with nothing
// left that says it was used. Until it expires, the admission then
// re-admits that copy once more, with every scope held above the floor
// and every grant revoked; after it expires, it cannot.
//
// # Archive Format
//
// A receiver's chain may be cut at a base: the entries from seq 1 (or from
// the previous base) up to the base's seq go into an archive file and are
// removed from the database. What is removed is described by a base record
// ([Base], [MarshalBase]), a map with these keys, in this order:
//
//	seq     uint  the newest archived entry's seq; 0 only for the start
//	hash    bstr  32 bytes: its hash (32 zero bytes at the start)
//	scopes  array of maps, one per scope in name order: the scope's fence
//	              state after that entry, as the fence replay holds it
//	              ([ScopeBase]: scope, epoch, grant, activated, hold,
//	              hold_epoch, recovery, ended, ended_by, ended_by_epoch,
//	              ended_by_recovery; zero fields left out)
//
// and is named by its digest, [BaseDigest]:
//
//	SHA-256("kvfence/archive-base/v1\n" || base record bytes)
//
// The transaction that removes the entries stores the base record in the
// database and appends an entry of kind "archived" with base_seq,
// base_hash and base_fence (the digest), so the chain records the cut, and
// that entry is anchored like any other. The stored chain then begins at
// base_seq+1, whose prev is base_hash.
//
// An archive statement ([ArchiveStatement]) is a map with these keys, in
// this order, all required:
//
//	at          int   Unix nanoseconds, receiver clock
//	to_seq      uint  the newest entry in the archive, above from_seq
//	to_hash     bstr  32 bytes: entry to_seq's hash
//	from_seq    uint  the base the archive continues; 0 for the start
//	receiver    tstr  the receiver id
//	to_fence    bstr  32 bytes: the digest of the base record at to_seq
//	from_hash   bstr  32 bytes: the hash at from_seq (zero at the start)
//	from_fence  bstr  32 bytes: the digest of the base record at from_seq
//
// signed by the receiver's key in its own domain (see Signatures). Its
// signed form is the signed checkpoint's with the key "archive" (67 61 72
// 63 68 69 76 65). An archive file is:
//
//	"kvfence archive v1\n"
//	frame: the signed statement (at most 2 KiB)
//	frame: the base record at from_seq (at most [MaxBaseSize] bytes)
//	frame: entry from_seq+1, ..., frame: entry to_seq (each at most
//	       [MaxEntrySize] bytes, exactly as stored)
//
// where a frame is a 4-byte big-endian length and that many bytes, and
// nothing follows the last entry. [ReadArchive] checks, streaming: the
// magic; the signature under the caller's key and the receiver id; that the
// base record is canonical and is the one from_seq, from_hash and
// from_fence name; that each entry decodes canonically, has its seq and
// links to the one before, starting from from_hash; that there are exactly
// to_seq-from_seq of them, the last hashing to to_hash; that the fence,
// replayed from the base record, shows no violation and ends in the state
// whose base record digest is to_fence; and that the file ends there. A
// statement commits to its entries through the hash chain: to_hash covers
// every entry back to from_hash.
//
// [Verify] with [VerifyOptions.BaseRecord] walks the stored chain from the
// base, the fence replay starting from the base record's scopes, and
// requires that an archive entry in the chain records exactly that base
// (seq, hash and digest), that no archive entry records a base after it,
// and that no entry at or before it is stored (base_mismatch otherwise:
// archived entries put back, the base record edited). With
// [VerifyOptions.Archives] it first reads each archive and requires that
// they run from seq 0 and each from_* is the previous archive's to_*, the
// last ending exactly at the base: the whole history.
//
// Why this keeps the guarantee: the anchor and every checkpoint still name
// the head, which an archive only moves forward; a receiver archives only
// entries its current anchor covers, so the anchor's seq is always at or
// after the base, and the hash at the base is kept in the base record,
// which the first stored entry links to and the archive entry records. An
// anchor that names an archived entry is therefore older than the archive,
// an old anchor put back: anchor_stale ([ErrAnchorStale]), refused at Open
// too. The older slot of an anchor file holds the anchor from before the
// archive's commit, at or after the base, so the damaged-slot rule (see
// Anchor Rules) still finds every seq it needs. A database restored from
// before the archive ends before the anchor (rollback_detected), and one
// with the archived entries put back has the archive entry recording a base
// its stored chain contradicts. The state digest covers the state records,
// not the chain, and archiving changes no state record.
//
// # Verification
//
// [Verify] streams a chain from an iterator such as a bbolt cursor and keeps
// only the previous entry's hash for the links, and one small record per
// scope for the fence replay below, so its memory grows with the number of
// scopes, not with the number of entries. It reports the first problem as a
// stable [Problem] code, looking in this order: the anchor (anchor_missing;
// anchor_damaged for a store that holds no readable anchor, such as an
// anchor file without a valid slot or with two slots of one gen;
// bad_signature, receiver_mismatch); each entry in seq order (bad_entry,
// seq_gap, broken_link, and fork_detected at the anchored seq); the chain's
// end (rollback_detected, and a damaged slot judged by [SlotDamage.Check]:
// rollback_detected or fork_detected); for a chain cut at a base, the
// archives and the base before the entries (bad_archive, base_mismatch, and
// anchor_stale for an anchor that names an archived entry); then the
// replay (fence_violation);
// and, if asked, the anchor's age (anchor_stale). A damaged slot is in the
// [Report] whatever the problem, ok included. The receiver's caller then
// checks the state beside the chain (state_mismatch, see State Digest). [CheckAnchor] is the cheap check for
// opening a database: the anchor's signature and receiver, and the hash of
// one stored entry.
//
// # Fence Replay
//
// While it walks a receiver's chain, [Verify] replays each scope's control
// state from the entries the receiver writes ([KindScopeCreated]: held at
// epoch 1; [KindActivate]: open at the entry's epoch under its grant;
// [KindHold]: held at the entry's epoch, no active grant; [KindRecovered]:
// every scope held, every active grant removed, until the scope's next
// activation). A [KindSubmit] entry with outcome [OutcomeApplied] or
// [OutcomeDispatching], and a [KindGrantExtended] entry, must name its scope's active grant and that
// grant's epoch; one that does not, or that names a held or unknown scope,
// is a fence_violation
// ([ErrFenceViolation], [FenceViolationError]), whose detail names the
// entry, the grant and the hold that superseded it. Entries with outcome
// already_applied or denied change nothing and are not checked. This is the
// receiver's own evidence that it skipped checks 2-4. The execution
// ledger's chain has no scopes to replay and is verified with
// [VerifyOptions.NoFenceReplay]. From a base, the replay starts from the
// scopes' state that the base record holds, which the archive entry's
// base_fence vouches for; each later entry is then judged exactly as a
// replay from seq 1 would judge it.
//
// # Caveats
//
// Entries are not signed; checkpoints are. A database ahead of its anchor
// cannot be told from the crash window between a commit and its anchor
// write, so the anchor alone protects the history up to its seq, not what
// follows. The receiver closes most of that gap with its own newest
// checkpoint, which each commit writes in the same transaction: entries
// appended by someone without the receiver's key are not covered by it and
// the database is refused (state_mismatch). What remains is a database put
// back, whole, to a state it really had after the anchored seq, within the
// crash window: protect the database file itself.
//
// The anchor is only as independent as the place it is kept. Whoever can put
// back old copies of both the database and the anchor presents a stale but
// valid state (a freeze attack, in TUF's terms) that nothing in either file
// reveals; [VerifyOptions.MaxAge] bounds it for receivers that write often.
// The state digest does not change that: a database and anchor put back
// together are a consistent old state.
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
// back an old copy of the file, which such a writer can do anyway. The
// damage is reported, and a database restored to that previous write is
// refused (see Anchor Rules); but damage that erases the newest slot's gen
// cannot be ordered, and erasing slot 1 at gen 2 leaves exactly a new file,
// so, as with an old copy, only an anchor kept where the database's
// writers cannot write protects it. The rule assumes the database's
// commits are durable before the anchor write: a receiver that does not
// sync its commits (a benchmark setting) can lose a commit whose anchor
// write was then torn, and be refused as a suspected rollback after a
// power failure. A crash
// while a new anchor file is being created, or a Load during that first
// write, can find it short, which is [ErrBadAnchor]; the receiver was not
// initialised, and the file must be removed before trying again.
//
// Times are Unix nanoseconds in an int64 from the signer's clock: evidence of
// what that clock said, within the years 1678 to 2262.
//
// The [VerifyOptions.Entries] iterator cannot return an error; a caller whose
// source can fail must check it after Verify returns.
//
// The fence replay checks what the entries say, not the state: it catches a
// receiver that skipped its checks and recorded what it did, not one that
// records a mutation under a grant it did not use, nor an edit of the
// database's state that writes no entry.
package audit
