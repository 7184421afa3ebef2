// Package etcdengine is the engine seam over an etcd cluster (client v3):
// an optimistic transaction that reads at one revision, buffers its writes
// and commits them as one etcd Txn whose compares fail if anything it read
// changed. On a failed compare the transaction function runs again on the
// newer state, within a bound (then engine.ErrConflict).
//
// # Key layout
//
// A bucket b under the prefix P (default "/kvfence/") keeps key k at
// P + b + "/" + k, and its existence marker at P + b. Bucket names hold only
// letters, digits and '_', all above '/', so no other bucket's key falls
// inside P + b + "/" … P + b + "0", and etcd's bytewise order of those keys
// is the order of k. Two engines must not use nested prefixes.
//
// # What a commit compares
//
// The first read of a transaction fixes its revision R (a linearizable
// read); every later read is at R, so one run of the function sees one
// consistent state, at least as new as every commit acknowledged before
// the transaction began. The commit's Txn compares:
//
//   - every key read with Get or Prefetch (or found by Last): its mod
//     revision equals the one seen at R, 0 for an absent key. A write, a
//     delete or a creation of that key after R fails the commit;
//   - for the guarded keys of PrefetchGuarded, nothing of their own: the
//     guard's compare above stands for them, while the guard was present
//     at R and read from etcd. That holds only if every writer of such a
//     key writes the guard in the same Txn (engine.GuardedPrefetcher); a
//     guard that was absent leaves its keys compared one by one;
//   - every range a Scan walked, from its start to the last key handed to
//     the scan function (to the bucket's end if the scan ran out): every
//     key in it has a mod revision at most R. A key created or changed in
//     the walked range after R fails the commit;
//   - for each bucket scanned in an Update, the mod revision of the
//     bucket's marker. Every Delete through this package rewrites the
//     marker of its bucket, so a key deleted from a scanned bucket after R
//     fails the commit: etcd's range compares see only live keys and
//     cannot see a deletion themselves;
//   - for Last, the range from the key it returned (or from the bucket's
//     start if empty) to the bucket's end, as for a scan, and that key
//     itself as for Get.
//
// So an Update is serializable against every other Update through this
// package on the same prefix. A key deleted under the prefix by another
// client (etcdctl del) is not seen by a scan's compares; nothing but this
// package may write under the prefix. Bucket existence, once seen, is
// remembered by the engine: buckets are never deleted through the seam.
//
// # Outcome unknown
//
// Once the commit's Txn was sent, an error that is not a definite refusal
// by the server (a deadline, a lost or changed leader, an unavailable
// member, a closed connection) is engine.ErrOutcomeUnknown: the Txn may
// have applied. A retry of the same operation must be answered from what
// the first attempt left behind (the fence's receipts).
//
// # Limits
//
// etcd refuses a Txn with more than --max-txn-ops (default 128) operations
// in a list and a request larger than --max-request-bytes (default 1.5 MiB).
// An Update whose writes or compares exceed Options.MaxTxnOps, or whose
// estimated size exceeds Options.MaxRequestBytes, fails with
// engine.ErrTxnTooLarge before anything is sent. A key written twice is one
// operation (etcd refuses a key twice in one Txn); a Delete also writes its
// bucket's marker.
//
// # Caveats
//
// Every Get of a key not read before is a range request of its own: the
// first read linearizable, the later ones serializable at the first one's
// revision (the same answer from any member that has applied it, without a
// round of the leader). A transaction costs a round trip per key it reads,
// unless the caller names the keys ahead: the transaction is an
// engine.Prefetcher, whose Prefetch reads them all in one Txn of range
// requests at that revision (one per --max-txn-ops keys), and its later
// Gets of them send nothing. A prefetched key is compared at the commit
// whether or not it is read again, so a prefetch of keys the function does
// not need costs compares, never correctness. A caller that runs many
// operations in one Update (a group-commit leader) saves more than the
// commit. etcd has no reverse range: Last asks for the
// bucket's keys in descending order, which etcd sorts in its index, so
// Last costs time in the bucket's size; keep the newest position of an
// append-only bucket in a key of its own and read that. etcd's own
// concurrency.STM is not used: it retries without a bound and does not
// bound its size.
//
// A transaction is also an engine.RawTx: keys of the cluster outside the
// prefix (and outside Options.Reserved) are read into the same read set,
// compared by mod revision at the commit (0 for an absent key), and
// written in the same Txn; OnCommit gets the Txn's revision, which is the
// new mod revision of every key the Txn wrote.
package etcdengine
