package audit

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"iter"
	"testing"
)

// Fixed keys and times keep every artefact these tests make, and the golden
// files, byte-for-byte reproducible.
var (
	receiverKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	otherKey    = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, ed25519.SeedSize))
	recoveryKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, ed25519.SeedSize))
)

const (
	testReceiver = "receiver-1"
	t0           = int64(1767225600_000000000) // 2026-01-01T00:00:00Z
)

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// record is one stored key/value pair of an audit bucket.
type record struct{ k, v []byte }

// testEntry returns the i-th entry of the standard test chain: a mix of
// kinds and field sets, so that optional fields come and go. It is a
// receiver's history that keeps the fence: each applied entry uses the
// grant activated two entries before it, at that activation's epoch.
func testEntry(i uint64) *Entry {
	e := &Entry{At: t0 + int64(i)*1_000_000, Scope: "configmap/prod/backup-policy", Epoch: 1 + i/4}
	switch i % 4 {
	case 1:
		e.Kind, e.Reason, e.Note = "hold", "operator", "takeover of worker-a"
	case 2:
		e.Kind, e.Grant, e.Executor, e.Decision = "activate", fmt.Sprintf("g-%08d", i), "worker-b", "change-42"
	case 3:
		e.Kind, e.Outcome, e.Reason, e.Executor = "submit", "denied", "stale_or_unknown_epoch", "worker-a"
		e.Grant, e.Action, e.RequestSHA256 = "g-00000001", "raise-retention", bytes.Repeat([]byte{0xaa}, 32)
	default:
		e.Kind, e.Outcome, e.Executor, e.Grant, e.Action = "submit", "applied", "worker-b", fmt.Sprintf("g-%08d", i-2), "raise-retention"
		e.Epoch = (i-2)/4 + 1
		e.Target, e.RevBefore, e.RevAfter = "configmap/prod/backup-policy", i/4, i/4+1
		e.RequestSHA256, e.ValueSHA256 = bytes.Repeat([]byte{0xaa}, 32), bytes.Repeat([]byte{byte(i)}, 32)
	}
	return e
}

// testChain returns the first n entries of the standard test chain as
// stored records, and its head.
func testChain(t testing.TB, n uint64) ([]record, Head) {
	t.Helper()
	c := NewChain(Head{})
	recs := make([]record, 0, n)
	for i := uint64(1); i <= n; i++ {
		raw, _, err := c.Append(testEntry(i))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, record{SeqKey(i), raw})
	}
	return recs, c.Head()
}

func entriesOf(recs []record) iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		for _, r := range recs {
			if !yield(r.k, r.v) {
				return
			}
		}
	}
}

// checkpointOf signs the checkpoint of recs at seq with key.
func checkpointOf(t testing.TB, key ed25519.PrivateKey, receiver string, recs []record, seq uint64) SignedCheckpoint {
	t.Helper()
	sc, err := Sign(key, Checkpoint{Root: testRoot, Receiver: receiver, Seq: seq, Head: HashEntry(recs[seq-1].v),
		EpochHighWater: 1 + seq/4, At: t0 + int64(seq)*1_000_000 + 500})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// mangle calls f with every single-byte substitution of b: every position,
// every other byte value (under the race detector, every single-bit flip
// and the inverted byte).
func mangle(b []byte, f func(i int, m []byte)) {
	deltas := make([]byte, 0, 255)
	for d := 1; d < 256; d++ {
		if !(raceEnabled || testing.Short()) || d&(d-1) == 0 || d == 0xff {
			deltas = append(deltas, byte(d))
		}
	}
	m := bytes.Clone(b)
	for i := range m {
		orig := m[i]
		for _, d := range deltas {
			m[i] = orig ^ d
			f(i, m)
		}
		m[i] = orig
	}
}

// verifyChain is the helper that other tests use after building a chain:
// it fails the test unless recs verify against anchor.
func verifyChain(t testing.TB, recs []record, anchor AnchorStore) Report {
	t.Helper()
	r, err := Verify(VerifyOptions{Entries: entriesOf(recs), Anchor: anchor, PublicKey: pubOf(receiverKey), Receiver: testReceiver})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Fatalf("chain does not verify: %s: %s", r.Problem, r.Detail)
	}
	return r
}

// testRoot is a tree root for checkpoints whose tree no test reads.
var testRoot = Hash{0x7e, 0xe0}
