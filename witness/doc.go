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
// # Durability
//
// The comparison with the stored checkpoint, the consistency check and the
// update are one bbolt transaction, fsynced on commit, and the witness
// signs only after the commit returned: a witness killed at any point has
// either not answered or answered from a state it will find again on
// restart, so it never cosigns two different roots for one size.
package witness
