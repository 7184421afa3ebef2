package audit

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"testing"
)

type stateRecord struct {
	bucket     string
	key, value []byte
}

func randomRecords(rnd *rand.Rand, n int) []stateRecord {
	recs := make([]stateRecord, n)
	for i := range recs {
		k := make([]byte, 1+rnd.IntN(20))
		v := make([]byte, rnd.IntN(60))
		for j := range k {
			k[j] = byte(rnd.Uint32())
		}
		for j := range v {
			v[j] = byte(rnd.Uint32())
		}
		recs[i] = stateRecord{[]string{"control", "grants", "targets", "receipts"}[rnd.IntN(4)], k, v}
	}
	return recs
}

// Ensure that the digest of a set does not depend on the order in which its
// records were added, removed or merged, which is what lets Open recompute
// what writers kept current.
func TestStateHash_SetSemantics(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	recs := randomRecords(rnd, 200)
	var inOrder StateHash
	for _, r := range recs {
		inOrder.Add(r.bucket, r.key, r.value)
	}
	var shuffled StateHash
	for _, i := range rnd.Perm(len(recs)) {
		shuffled.Add(recs[i].bucket, recs[i].key, recs[i].value)
	}
	if inOrder != shuffled || inOrder.Sum() != shuffled.Sum() {
		t.Fatal("the digest depends on the order of additions")
	}
	var a, b StateHash
	for i, r := range recs {
		if i%2 == 0 {
			a.Add(r.bucket, r.key, r.value)
		} else {
			b.Add(r.bucket, r.key, r.value)
		}
	}
	a.Merge(&b)
	if a != inOrder {
		t.Fatal("merging two halves differs from adding all")
	}
	// Add and remove extra records in between: back to the same digest.
	extra := randomRecords(rnd, 50)
	for _, r := range extra {
		shuffled.Add(r.bucket, r.key, r.value)
	}
	if shuffled == inOrder {
		t.Fatal("adding records did not change the digest")
	}
	for _, i := range rnd.Perm(len(extra)) {
		shuffled.Remove(extra[i].bucket, extra[i].key, extra[i].value)
	}
	if shuffled != inOrder {
		t.Fatal("removing what was added does not restore the digest")
	}
	var empty StateHash
	for _, r := range recs {
		inOrder.Remove(r.bucket, r.key, r.value)
	}
	if inOrder != empty {
		t.Fatal("removing every record does not give the empty digest")
	}
}

// Ensure that the record encoding is unambiguous: moving bytes between
// bucket, key and value, or changing any one of them, changes the digest.
func TestStateHash_RecordsAreDistinct(t *testing.T) {
	digest := func(bucket, key, value string) Hash {
		var s StateHash
		s.Add(bucket, []byte(key), []byte(value))
		return s.Sum()
	}
	base := digest("control", "scope-a", "v")
	for _, tc := range []struct{ bucket, key, value string }{
		{"control", "scope-", "av"},
		{"control", "scope-av", ""},
		{"contro", "lscope-a", "v"},
		{"grants", "scope-a", "v"},
		{"control", "scope-b", "v"},
		{"control", "scope-a", "w"},
		{"control", "scope-a", "v\x00"},
	} {
		if digest(tc.bucket, tc.key, tc.value) == base {
			t.Errorf("record %q/%q/%q has the digest of control/scope-a/v", tc.bucket, tc.key, tc.value)
		}
	}
	// A record added twice is not the record added once: a set hash over
	// a multiset, which is why writers remove the old bytes on every put.
	var twice StateHash
	twice.Add("control", []byte("scope-a"), []byte("v"))
	twice.Add("control", []byte("scope-a"), []byte("v"))
	if twice.Sum() == base {
		t.Fatal("a record added twice digests like one added once")
	}
}

// Ensure that the binary form round-trips, is refused at the wrong length,
// and that the digest of known records stays what it was (a change of the
// construction would invalidate every stored checkpoint). The known answers
// were computed by a separate implementation of SHAKE128, SHA-256 and the
// 16-bit lane sums, not by this package.
func TestStateHash_Binary(t *testing.T) {
	var s StateHash
	s.Add("control", []byte("configmap/prod/backup-policy"), []byte{0xa1, 0x65, 'e', 'p', 'o', 'c', 'h', 0x01})
	s.Add("targets", []byte("configmap/prod/backup-policy"), []byte(`{"data":{"retention_days":"30"}}`))
	raw, _ := s.AppendBinary(nil)
	if len(raw) != StateHashSize {
		t.Fatalf("binary form is %d bytes", len(raw))
	}
	var back StateHash
	if err := back.UnmarshalBinary(raw); err != nil || back != s {
		t.Fatalf("round trip: %v", err)
	}
	for _, n := range []int{0, StateHashSize - 1, StateHashSize + 1} {
		if err := back.UnmarshalBinary(make([]byte, n)); err == nil {
			t.Errorf("UnmarshalBinary accepted %d bytes", n)
		}
	}
	var empty StateHash
	for _, tc := range []struct {
		name string
		s    *StateHash
		want string
	}{
		{"empty", &empty, "59068897ca6a5fba494b6bf9c2a33a864c0c0e51e7c464e14cef8027c831e000"},
		{"two records", &s, "044f602e4d78f534fb912ee99cdae95406aa1c148cdd79c12145463d1ff95070"},
	} {
		got := tc.s.Sum()
		if hex.EncodeToString(got[:]) != tc.want {
			t.Errorf("%s: Sum = %x, want %s", tc.name, got, tc.want)
		}
	}
}

func BenchmarkStateHash_Add(b *testing.B) {
	var s StateHash
	value := make([]byte, 120)
	for i := 0; b.Loop(); i++ {
		s.Add("control", fmt.Appendf(nil, "scope-%d", i%64), value)
	}
}
