package kvfence

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvfence/kvfence/audit"
)

// Ensure that a digest moved through the term cache is the digest moved by
// hashing every record, whatever the cache holds: terms of other versions
// of a record (the bytes differ), terms evicted when it is full, and
// buckets whose terms it does not keep.
func TestTermCache_DigestMatchesHashing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var cache termCache
	var cached, plain audit.StateHash
	buckets := []string{string(bucketControl), string(bucketTargets), string(bucketGrants), string(bucketReceipts)}
	// The store the changes describe: bucket/key -> current bytes.
	store := map[string][]byte{}
	// Other copies of the cache hold terms of versions the store no
	// longer has, as a cache left by a transaction that rolled back.
	keys := maxCachedTerms + 200
	for i := range 20000 {
		bucket := buckets[rng.IntN(len(buckets))]
		key := []byte(fmt.Sprintf("k%d", rng.IntN(keys)))
		raw := []byte(fmt.Sprintf("v%d-%d", i, rng.IntN(3)))
		old := store[bucket+"/"+string(key)]
		if rng.IntN(10) == 0 {
			// A rolled-back write: its term is kept, the store unchanged.
			var scratch audit.StateHash
			(&stateChange{bucket: bucket, key: key, old: nil, raw: []byte("rolled back"), terms: &cache}).apply(&scratch)
			continue
		}
		(&stateChange{bucket: bucket, key: key, old: old, raw: raw, terms: &cache}).apply(&cached)
		(&stateChange{bucket: bucket, key: key, old: old, raw: raw}).apply(&plain)
		store[bucket+"/"+string(key)] = raw
		if cached != plain {
			t.Fatalf("change %d (%s %s): the digest through the cache differs from hashing", i, bucket, key)
		}
	}
	if n := len(cache.control) + len(cache.targets); n > maxCachedTerms {
		t.Fatalf("cache holds %d terms, bound %d", n, maxCachedTerms)
	}
}
