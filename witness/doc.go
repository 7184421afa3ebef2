// Package witness is a transparency-log witness for kvfence receivers: it
// cosigns a receiver's checkpoint (package checkpoint) only if the
// checkpoint verifies with the key it trusts for that receiver's origin and
// is consistent with the last checkpoint it cosigned for it, so that a
// receiver restored together with its anchor cannot present an older tree
// to a quorum of witnesses.
//
// # Protocol
//
// [Server] speaks c2sp.org/tlog-witness: POST /add-checkpoint takes an
// "old N" line, up to 63 consistency-proof lines, a blank line and the
// signed checkpoint, and answers 200 with one cosignature/v1 line; 409 with
// the witness's latest size (Content-Type text/x.tlog.size) when N is not
// that size; 422 for a proof that does not verify, a non-empty proof from
// size zero, or another root at the same size; 404 for an origin it does
// not trust; 403 for a checkpoint without a valid signature of the trusted
// key; 400 for a request that does not parse or an old size above the
// checkpoint's. It also serves the spec's monitor endpoint
// GET /<hex SHA-256 of the origin>/checkpoint.
//
// # Departures from C2SP
//
// GET /kvfence/v1/latest?origin=O is kvfence's own: it answers the same
// note as the monitor endpoint (the latest checkpoint cosigned for O, with
// the log's signature and a cosignature appended) and 404 when there is
// none, addressed by the origin itself, so a receiver opening asks every
// witness for it without hashing. Both read endpoints cosign at the time of
// the request, not at the time of add-checkpoint: the cosignature then says
// that, as of now, this is still the largest tree the witness has seen,
// which is the statement a receiver checking for a rollback needs. The
// witness cosigns with Ed25519 (cosignature/v1), not ML-DSA-44, which the
// spec recommends, because x/mod's note package and kvfence's keys are
// Ed25519.
//
// # Quorum
//
// [Quorum] is the client side of N witnesses of one log, K of which
// (1 <= K <= N, its threshold) make a checkpoint acknowledged. The members
// have distinct names and distinct keys: one key under two names would be
// one witness counted twice.
//
// [Quorum.Cosign] sends the log's signed checkpoint to every member at
// once and returns as soon as K cosignatures, each verified with its
// member's key, are in; the other requests are cancelled and waited for,
// so none outlives the call. The quorum remembers each member's last
// cosigned size and asks from it (from 0 at first); a 409 answer naming a
// size at most the checkpoint's is retried once from that size, with a
// proof from it, as c2sp.org/tlog-witness clients do. A witness whose size
// is above the checkpoint's is not retried: the log once showed it a
// larger tree, so the log lost entries (a restore), and Cosign reports it
// as ErrRollbackDetected. A witness that refuses the proof from its own
// size (422) holds a tree the checkpoint does not extend: ErrForkDetected.
// Neither answer is signed, so at Cosign they are signs, not proof: they
// keep the witness out of K, and Check, whose answers are signed by the
// log and cosigned by the witness, is what proves a rollback.
// When K can no longer be reached Cosign returns a *QuorumError, matching
// ErrNoQuorum and each member's error, naming every member's failure.
// Rounds run one at a time, so that two checkpoints in flight cannot reach
// a witness in the wrong order and look like a rollback.
//
// [Quorum.Check] asks every member for its latest cosigned checkpoint of
// the log and compares it with the local checkpoint: a larger size is
// ErrRollbackDetected; the same size with another root, or a smaller tree
// the local one does not extend (its consistency proof fails
// tlog.CheckTree), is ErrForkDetected. Each is a *DivergenceError naming
// the witness, its size and root, and the local size and root, and one is
// enough, however many members answered. Otherwise Check needs N-K+1
// answers (ErrTooFewAnswers): any K members and any N-K+1 members share at
// least one, so N-K+1 answers include one of the K that cosigned the last
// acknowledged checkpoint, and a log restored to before it is caught. An
// answer counts only if its cosignature verifies with the member's key and
// is fresh, and its checkpoint verifies with the log's key; a witness
// saying plainly that it has no checkpoint of the log (ErrNoCheckpoint)
// answers size 0; a transport error, a witness that does not know the log
// (ErrUnknownLog) or any other 404 is no answer.
//
// # Durability
//
// The comparison with the stored checkpoint, the consistency check and the
// update are one bbolt transaction, fsynced on commit, and the witness
// signs only after the commit returned: a witness killed at any point has
// either not answered or answered from a state it will find again on
// restart, so it never cosigns two different roots for one size.
package witness
