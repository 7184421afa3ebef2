// Package etcdanchor keeps a receiver's anchor in one key of an etcd
// cluster administered apart from the receiver's database, as an
// audit.AnchorStore beside the anchor file (audit.FileAnchor).
//
// # Address
//
// An anchor on etcd is named etcd://HOST:PORT[,HOST:PORT...]/KEY, where KEY
// is the etcd key with its leading slash: etcd://127.0.0.1:2379/kvfence/anchor
// is the key /kvfence/anchor ([ParseAddress]). TLS comes from [Options]: a
// CA file, and a client certificate and key for a cluster that checks
// them. The cluster must not be the one that holds the receiver's state:
// restoring a snapshot of that cluster would roll back the state and its
// anchor together, and the anchor would detect nothing.
//
// # Format and Semantics
//
// The key's value is the anchor text that audit.SignedCheckpoint.MarshalAnchor
// writes and audit.ParseAnchor reads, byte for byte: the same format as a
// slot of the anchor file, without the slot's header. The contract is the
// file store's: an absent key is audit.ErrAnchorMissing and is never a
// reason to create one; Store is compare-and-swap (audit.ErrWriteConflict),
// refuses to move back (audit.ErrAnchorRegression) or to another receiver
// (audit.ErrReceiverMismatch); Supersede skips the regression check; a
// value that is not a canonical anchor is audit.ErrBadAnchor and is never
// overwritten, as a file without a valid slot is not.
//
// The compare is on the key's mod revision, the revision of its last
// write, which etcd never reuses for the key while it exists: a writer
// reads the key, checks the swap against the anchor it read, and commits
// one Txn that puts next only if the mod revision is still the one it read
// (0 for an absent key). If it is not, the Txn reads the key instead and
// the writer decides again on what it holds now. A Store remembers the
// anchor it last read or wrote with its mod revision, so a receiver's
// steady stream of writes, each naming the previous one as old, costs one
// round trip each; a remembered value that has gone stale only makes the
// compare fail, and no write is refused on it without reading the key.
//
// # Why One Value, Not Two Slots
//
// The anchor file has two slots because a write in place can be torn by a
// crash: the slot being written may end up damaged, and the other slot
// still holds the previous anchor. Its generation numbers order the slots,
// and the damage rule (audit.SlotDamage.Check) lets a receiver tell a torn
// write that covered a commit it does not have from the crash window. An
// etcd write cannot be torn: a Txn is one Raft log entry, applied whole or
// not at all on every member, and acknowledged only once a majority has
// fsynced it. So the key holds one value: the previous anchor is not
// needed to survive a crash, the key's mod revision is the generation, and
// there is no damaged slot to report; a Store does not implement
// audit.DamageReporter, and audit.LoadWithDamage reports no damage for it.
// What a torn slot told the file store is here told by an error: a write
// whose answer was lost reports ErrOutcomeUnknown (below), and the
// receiver does not acknowledge what it covered.
//
// # Unknown Outcomes
//
// A write can reach the cluster and lose its answer: a timeout, a leader
// change, a member killed or cut off mid-request. Such a failure is never
// reported as success or as a conflict. Store first settles it itself: it
// repeats the same compare-and-swap, which can take effect at most once
// because it compares the revision read before the first attempt. The
// repeat either lands (the anchor holds next), or finds the key changed
// and reads it: next means the first attempt landed; anything else is
// decided as any compare-and-swap is. Only if the cluster gives no answer
// within Options.Attempts attempts does Store return an error that wraps
// ErrOutcomeUnknown. The key then holds old or next, and a write still in
// flight inside the cluster may yet land; a later Load decides which. A
// failure that proves the request was refused before it could take effect
// (malformed, too large, not permitted) is a plain error.
//
// # Caveats
//
// Load is a linearizable read: it needs a majority of the members, as
// Store does. The interface methods have no context; each request is
// bounded by Options.Timeout, and the Context variants take the caller's.
// Anyone who may write the key may replace the anchor with an older one
// signed by the receiver; the key's permissions (etcd's RBAC, client
// certificates) guard it as the file's mode guards the anchor file.
package etcdanchor
