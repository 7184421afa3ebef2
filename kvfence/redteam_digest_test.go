package kvfence

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// Attack: one record is often rewritten several times in one transaction
// (a scope's control record by every denial in a batch), and the term
// cache keeps the terms of records written; an entry evicted and reused
// while a later change of the same key relies on it, or a rolled-back
// transaction whose terms the cache keeps, would move the digest away from
// the records. Every transaction here applies its changes with the shared
// cache, some transactions abandoned (their digest dropped, the cache
// keeping their terms), with more keys than the cache holds; after every
// fourth the digest must be the one recomputed from the records alone.
func TestRedteamDigest_CacheMatchesRecompute(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 3))
	var (
		cache termCache
		state audit.StateHash
	)
	buckets := []string{string(bucketControl), string(bucketTargets), string(bucketGrants), string(bucketApp)}
	store := map[[2]string][]byte{}
	recompute := func() audit.StateHash {
		var s audit.StateHash
		for k, v := range store {
			s.Add(k[0], []byte(k[1]), v)
		}
		return s
	}
	keys := maxCachedTerms + 300
	for txn := range 160 {
		w := state
		next := map[[2]string][]byte{}
		cur := func(k [2]string) []byte {
			if v, ok := next[k]; ok {
				return v
			}
			return store[k]
		}
		n := 1 + rng.IntN(60)
		for i := range n {
			bucket := buckets[rng.IntN(len(buckets))]
			// A few hot keys, rewritten several times in a transaction,
			// and many cold ones, more than the cache holds.
			key := fmt.Sprintf("k%d", rng.IntN(8))
			if rng.IntN(2) == 0 {
				key = fmt.Sprintf("k%d", rng.IntN(keys))
			}
			k := [2]string{bucket, key}
			old := cur(k)
			var raw []byte
			if bucket == string(bucketApp) && old != nil && rng.IntN(4) == 0 {
				raw = nil // an app record deleted
			} else {
				raw = []byte(fmt.Sprintf("%s-%d-%d-%d", key, txn, i, rng.IntN(3)))
			}
			if old == nil && raw == nil {
				continue
			}
			c := stateChange{bucket: bucket, key: []byte(key), old: old, raw: raw, terms: &cache}
			c.apply(&w)
			next[k] = raw
		}
		if rng.IntN(8) == 0 {
			continue // rolled back: the digest and the records stay as they were
		}
		for k, v := range next {
			if v == nil {
				delete(store, k)
			} else {
				store[k] = v
			}
		}
		state = w
		if txn%4 != 3 {
			continue
		}
		if want := recompute(); state != want {
			t.Fatalf("transaction %d: the digest kept through the cache differs from the records'", txn)
		}
	}
	if n := len(cache.control) + len(cache.targets); n > maxCachedTerms {
		t.Fatalf("cache holds %d terms, bound %d", n, maxCachedTerms)
	}
}

// cachedBytes is what the term cache keeps beyond its terms: the capacity
// of the record bytes it compares with.
func (t *termCache) cachedBytes() (n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range []map[string]*cachedTerm{t.control, t.targets} {
		for _, c := range m {
			n += cap(c.raw)
		}
	}
	return n
}

// Attack: a target's value may be up to MaxTargetValueSize (1 MiB, a
// Kubernetes object's limit), and every applied write puts the target
// record, value included, in the term cache, whose bound the code states
// as maxCachedTerms records of "about 2.3 KiB each". Workers whose writes
// set large values on many targets, once each, make the receiver keep up
// to maxCachedTerms MiB on its heap; and since an entry keeps its buffer
// when the record shrinks or the entry is reused for another key, the heap
// stays there after every target is small again. Here 40 targets get a
// 256 KiB value and then a 100-byte one: the cache must keep no more than
// a few KiB a record.
func TestRedteamDigest_TermCacheKeepsSmall(t *testing.T) {
	var cache termCache
	var s audit.StateHash
	const targets, perRecord = 40, 8 << 10
	big := make([]byte, 256<<10)
	for i := range targets {
		key := []byte(fmt.Sprintf("configmap/prod/t%d", i))
		big[0] = byte(i)
		cache.add(&s, string(bucketTargets), key, big)
	}
	if n := cache.cachedBytes(); n > targets*perRecord {
		t.Errorf("with %d large targets the cache keeps %d bytes of records, over %d a record", targets, n, perRecord)
	}
	for i := range targets {
		key := []byte(fmt.Sprintf("configmap/prod/t%d", i))
		cache.add(&s, string(bucketTargets), key, []byte("small"))
	}
	if n := cache.cachedBytes(); n > targets*perRecord {
		t.Errorf("with every target small again the cache keeps %d bytes of records, over %d a record", n, perRecord)
	}
}

// The same through the receiver: targets created with values of 1 MiB,
// the most a target holds, stay whole in the term cache after the writes
// that made them committed.
func TestRedteamDigest_LargeTargetsStayOnTheHeap(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	const targets = 8
	for i := range targets {
		value := bytes.Repeat([]byte{'a' + byte(i)}, MaxTargetValueSize)
		if _, err := f.admin.CreateTarget(f.ctx, fixScope, fmt.Sprintf("configmap/prod/large-%d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.r.terms.cachedBytes(); n > targets<<13 {
		t.Fatalf("after %d targets of %d bytes the term cache keeps %d bytes of records", targets, MaxTargetValueSize, n)
	}
}
