// Package kvfence is a fenced receiver: the place where an effect is
// committed, which refuses requests whose authority has been superseded.
//
// A receiver is one bbolt file ([Init], [Open]) or a prefix of an etcd
// cluster, through any engine of package engine ([InitEngine],
// [OpenEngine]). Each protected scope has a control record (epoch, mode,
// active grant), and owns targets (key, value, revision).
// [Receiver.Submit] checks a worker's envelope against that state and, only
// if every check passes, applies the mutation, all inside one write
// transaction; a hold and a mutation are therefore strictly ordered.
//
// # Engines
//
// The fence runs against engine.Tx, where a transaction function may run
// more than once (etcd commits optimistically and runs it again after a
// conflict): every run starts from the head the store holds and keeps
// nothing of a run that did not commit. Every write transaction reads and
// writes the audit chain's head key, so several receiver processes on one
// etcd prefix take turns on it: one whose cached head fell behind re-reads
// every state record and goes on only if they hash to the digest that the
// store's newest checkpoint, signed by this receiver's key, commits to for
// that head; past 16 such rounds in one call it is [ErrStorageBusy]. A write whose outcome the engine cannot tell is
// [ErrOutcomeUnknown], never a verdict: retrying the same envelope is
// answered from its receipt (already_applied). Conflicts past the engine's
// retry bound are [ErrStorageBusy]; a call too large for one commit of the
// engine is [ErrTooLarge] and writes nothing, and a batch too large is
// split. The reserve for administrators applies to a bbolt file only.
//
// # Guarantee
//
// After the receiver commits a hold for a scope, requests that use the
// superseded grant never create a new mutation in that scope — including
// requests that arrive before the replacement's first write and requests
// that copy the new epoch number. Every decision, applied or denied, and
// every state change is appended to a hash-chained audit log in the same
// transaction (see package audit).
//
// # Checks
//
// Submit runs these in order and stops at the first that fails; each
// failure is a [Result] with Outcome [Denied] and a stable [Reason]:
//
//	0  envelope and request decode strictly       malformed_envelope, malformed_request
//	1  scope exists                                unknown_scope
//	2  scope is open                               receiver_held
//	3  envelope epoch == scope epoch               stale_or_unknown_epoch
//	4  envelope grant == scope's active grant      inactive_grant
//	5  grant exists for this scope and epoch       unknown_grant
//	6  caller == envelope executor == grant's      executor_mismatch
//	7  envelope claim == grant's                   claim_mismatch
//	8  SHA-256(request) and action == grant's      request_mismatch
//	9  now in [not_before, not_after)              grant_not_yet_valid, grant_expired
//	10 receipt for (scope, action): same digest is already_applied,
//	   another digest                              action_reuse_conflict
//	11 target in scope; expected revision/value;
//	   a patch's test ops hold                     unknown_target, precondition_failed
//	12 apply: value, revision+1, receipt, audit entry, all or nothing
//
// Errors are faults (storage, corruption, a closed receiver). An error never
// means "go ahead" and never leaves a partial write.
//
// # Group commit
//
// Concurrent Submit and Admin calls share commits. A call that finds no
// commit in progress commits at once; calls that arrive meanwhile queue,
// and the next commit runs them in arrival order in one transaction, with
// one checkpoint and one anchor write (docs/design.md §10). There is no timer and
// no fixed delay. Each call gets the result it would have got had the calls
// run one by one in that order. If any call of a batch fails, or the
// commit does, the batch is rolled back and each call runs again in a
// transaction of its own, so one call's fault never fails another. A call
// returns only once the anchor covers its commit; if that anchor write
// fails, every call of the batch gets [ErrNotAcknowledged].
//
// # Envelope and request format
//
// Both are CBOR (RFC 8949) maps with text keys in core deterministic
// encoding (§4.2.1): shortest-form integers and lengths, definite lengths,
// keys sorted bytewise by their encoding. An envelope has exactly these
// keys, in this order:
//
//	"v"        uint   1
//	"claim"    tstr   the claim ref the grant binds
//	"epoch"    uint   the scope epoch the grant was minted at
//	"grant"    tstr   the grant id (32 lowercase hex digits as minted)
//	"scope"    tstr
//	"request"  bstr   the exact approved request bytes
//	"executor" tstr   must equal the authenticated caller
//
// A request has "v" (1), "set" (bstr) or "patch" (bstr, an RFC 6902 JSON
// Patch), "action" (tstr), "target" (tstr), and optionally
// "expect_value" (bstr) and "expect_revision" (uint, at least 1), in the
// same canonical order (by encoded length, then bytewise). The size limit is
// 64 KiB by default. The decoders decode, re-encode, and require the same
// bytes, so duplicate keys, unknown keys, missing keys, indefinite lengths,
// tags, floats, non-shortest forms, unsorted keys and trailing bytes are all
// rejected. Identifiers are 1-512 bytes of UTF-8 without control characters.
// The grant binds SHA-256 of the request bytes exactly as the envelope
// carries them; the receiver never re-encodes what it hashes.
//
// # Patches
//
// A request's "patch" is an RFC 6902 JSON Patch with RFC 6901 pointers,
// and the receiver applies exactly what those RFCs say, since an approver
// reviews the patch's bytes and nothing else. [EncodeRequest],
// [Admin.Activate] and Submit (check 0) refuse, with [ErrMalformedPatch],
// a patch that is not UTF-8 JSON with nothing after it, not an array of
// operation objects, or has an object anywhere with a member name twice, a
// string with an unpaired surrogate escape, an operation with a member
// RFC 6902 does not define for its op (the RFC would ignore it; the
// receiver refuses it) or without one it requires (a test needs its
// "value"), or a pointer that is not RFC 6901 syntax. [ValidatePatch] runs
// the same check.
//
// When applied, an array index is "0" or digits without a leading zero,
// never signed or negative; "-" is allowed only as add's append; "/" names
// the member "" of the root, and "" the whole document; a location that
// must exist and does not is an error, and a test on it fails; a move into
// its own child is an error; test compares by JSON value (numbers exactly by
// value, strings by code point, objects in any order, arrays in order). A
// failed test and a patch that does not apply are both precondition_failed,
// and change nothing. The target's value must be UTF-8 JSON; an object the
// patch must look into (a pointer passes through it or a test compares it)
// must not have a member name twice, since which one is meant would be a
// guess. The rest of the value is kept as it was, compacted and never
// re-escaped. Copies count against [MaxTargetValueSize], so a small patch
// cannot make the receiver do unbounded work.
//
// # Authority
//
// The caller passed to Submit is the identity the embedding application
// authenticated on its own channel; it is never read from the envelope.
// Scope creation, target creation, activation and holds are on [Admin],
// a handle an embedding service keeps for its administrators.
//
// # Records Edited Under a Running Receiver
//
// A writable receiver decides only on records it verified or wrote. It
// keeps a fingerprint (128 bits of a SHA-256 keyed with a per-process
// random salt) of every control, grant, target and receipt record: taken
// while Open recomputes the state digest from those very records and
// compares it with the signed checkpoint, replaced by each of its own
// writes once their transaction commits (a transaction that rolls back,
// or a batch retried call by call, teaches it nothing). Every record a
// submit, hold or activation reads, or overwrites, is compared with its
// fingerprint first; other bytes, a record it never had, or one that
// disappeared are [ErrStateMismatch]: a fault, nothing decided, nothing
// written. The check costs a SHA-256 of the record and a probe of an
// open-addressing table, about 0.25 µs a record. The table holds at most
// [Options.MaxRecords] records ([DefaultMaxRecords]), about 50 bytes each
// (192 MiB for 1,000,000 scopes of four records); beyond it Open refuses
// the store, and a call that would add a record fails with
// [ErrRecordLimit], writing nothing, while holds and denials still commit.
//
// Open also verifies the stored chain from its archive base and replays
// the fence over it as [VerifyChain] does: a chain that records a mutation
// under a superseded grant is refused with [ErrFenceViolation], since
// either a receiver without its fence checks or an edit under a running
// receiver of an earlier version wrote it. That replay costs about 2 µs of
// CPU an entry since the last archive, mostly decoding it (11 s of Open at
// 1,000,000 entries on two shared cores); archiving bounds it.
//
// # Audit Retention
//
// [Admin.Archive] moves the oldest audit entries into a signed archive file
// and removes them in one anchored transaction that records the new base
// in the chain (see Archive Format in package audit). Open checks that the
// stored chain begins right after the base record and links to its hash,
// and that the anchor names no archived entry; [VerifyChain] checks that
// the chain records exactly that base, and with [VerifyOptions.Archives]
// the whole history. The state digest, the head and the anchor are not
// moved back by an archive.
//
// # Caveats
//
// The receiver guarantees nothing about effects outside its own
// transaction: a target that stands for a remote system is only as fenced
// as that system's own conditional write. Identity strings are compared,
// not authenticated. A process that can write the database file can change
// anything in it; the audit chain, the state digest and the known records
// detect changes but cannot prevent them, so such a process can stop the
// scopes whose records it edits (every call on them fails) though not
// have a superseded grant applied.
//
// Open reads the anchor with audit.LoadWithDamage. A damaged slot of the
// anchor file is reported through [Options.Warn] and kept for
// [Receiver.AnchorDamage] before the first write replaces it; if it was the
// newest anchor write and the database ends exactly at the older slot's
// seq, Open refuses the database as a rollback (audit.SlotDamage.Check):
// the receiver commits before it anchors, so that write was covering a
// commit the database no longer has.
//
// Open checks the structure of every page bbolt will read before bbolt
// reads it (where flock is available), since bbolt trusts its pages and some
// damage would otherwise abort the process rather than fail the call. The
// check reads each page in use once: about 50 ms per 100 MiB of used pages
// from the page cache. SECURITY.md states the whole threat model.
package kvfence
