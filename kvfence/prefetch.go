package kvfence

import (
	"slices"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/chain"
)

// readAhead is what a batch's transaction reads ahead, for an engine
// that reads keys in one request (engine.Prefetcher).
type readAhead struct {
	// keys are compared each at the commit.
	keys []engine.Key
	// chain are the audit and tree records the batch's appends read,
	// which only a chain append writes, and every transaction that
	// appends also writes the chain's head key (chain.Writer.Checkpoint):
	// an engine that can (engine.GuardedPrefetcher) compares the head key
	// for them instead of each.
	chain []engine.Key
}

// chainGuard is the key whose compare stands for readAhead.chain's.
var chainGuard = engine.Key{Bucket: bucketCheckpoints, Key: chain.HeadKey}

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
func (r *Receiver) prefetchKeys(batch []*call) readAhead {
	keys := make([]engine.Key, 0, 3+4*len(batch))
	keys = append(keys,
		chainGuard,
		engine.Key{Bucket: bucketCheckpoints, Key: checkpointState},
		engine.Key{Bucket: bucketMeta, Key: metaEpochHighWater})
	for _, c := range batch {
		if c.sub != nil {
			keys = c.sub.reads(keys)
		}
	}
	frontier := chain.FrontierKeys(r.head.Seq)
	chainKeys := make([]engine.Key, 0, len(batch)+len(frontier))
	for i := range batch {
		chainKeys = append(chainKeys, engine.Key{Bucket: bucketAudit, Key: audit.SeqKey(r.head.Seq + uint64(i) + 1)})
	}
	// The Merkle tree's appends read the roots of its complete subtrees.
	for _, k := range frontier {
		chainKeys = append(chainKeys, engine.Key{Bucket: bucketTree, Key: k})
	}
	return readAhead{keys: keys, chain: chainKeys}
}

// prefetch reads ra ahead in tx, the chain's records guarded by the head
// key where tx can, or does nothing if tx reads each key in place.
func (ra readAhead) prefetch(tx engine.Tx) error {
	if g, ok := tx.(engine.GuardedPrefetcher); ok {
		return g.PrefetchGuarded(ra.keys, chainGuard, ra.chain)
	}
	return engine.Prefetch(tx, append(slices.Clip(ra.keys), ra.chain...)...)
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
