package kvfence

import (
	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/chain"
)

// prefetchKeys names the keys a batch's transaction will read, for an
// engine that reads them in one request (engine.Prefetcher): the chain's
// head key, the stored state digest (read when another writer moved the
// head) and the epoch high-water that every checkpoint reads; the audit
// keys of the batch's entries, one per call from the head this process
// committed last (each append checks that its key is free); and for each
// Submit what decide reads: its scope's control record, its grant, its
// receipt and its target; and the tree records that the batch's appends
// read. A key named but not read costs the engine a
// compare, and a key read but not named a request of its own: the list
// decides speed, never an outcome.
func (r *Receiver) prefetchKeys(batch []*call) []engine.Key {
	keys := make([]engine.Key, 0, 3+5*len(batch))
	keys = append(keys,
		engine.Key{Bucket: bucketCheckpoints, Key: chain.HeadKey},
		engine.Key{Bucket: bucketCheckpoints, Key: checkpointState},
		engine.Key{Bucket: bucketMeta, Key: metaEpochHighWater})
	for i := range batch {
		keys = append(keys, engine.Key{Bucket: bucketAudit, Key: audit.SeqKey(r.head.Seq + uint64(i) + 1)})
	}
	// The Merkle tree's appends read the roots of its complete subtrees.
	for _, k := range chain.FrontierKeys(r.head.Seq) {
		keys = append(keys, engine.Key{Bucket: bucketTree, Key: k})
	}
	for _, c := range batch {
		if c.sub != nil {
			keys = c.sub.reads(keys)
		}
	}
	return keys
}

// reads appends to keys what decide reads for s. Identifiers that are no
// valid key are left out: decide meets them on its own.
func (s *submission) reads(keys []engine.Key) []engine.Key {
	if s.env == nil {
		return keys
	}
	add := func(bucket, key []byte) {
		if engine.CheckKey(key) == nil {
			keys = append(keys, engine.Key{Bucket: bucket, Key: key})
		}
	}
	add(bucketControl, s.keys.scope)
	if s.req != nil {
		add(bucketGrants, s.keys.grant)
		add(bucketReceipts, s.keys.receipt)
		add(bucketTargets, s.keys.target)
	}
	return keys
}
