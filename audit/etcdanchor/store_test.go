package etcdanchor

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvfence/kvfence/audit"
)

// storeKind is one AnchorStore implementation under the shared contract,
// with a way to put arbitrary bytes where it keeps the anchor.
type storeKind struct {
	name string
	// new returns an empty store of its own for t.
	new func(t *testing.T) audit.AnchorStore
	// damage replaces what s holds with bytes that are not an anchor; nil
	// if the kind has nowhere to put them.
	damage func(t *testing.T, s audit.AnchorStore, raw []byte)
	// raw returns what s holds, byte for byte.
	raw func(t *testing.T, s audit.AnchorStore) []byte
}

// kinds returns the anchor file, the in-memory store and the etcd store on
// cl: one contract, checked on each.
func kinds(cl *clientv3.Client) []storeKind {
	return []storeKind{
		{
			name: "file",
			new: func(t *testing.T) audit.AnchorStore {
				return audit.FileAnchor{Path: filepath.Join(t.TempDir(), "anchor")}
			},
			damage: func(t *testing.T, s audit.AnchorStore, raw []byte) {
				if err := os.WriteFile(s.(audit.FileAnchor).Path, raw, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			raw: func(t *testing.T, s audit.AnchorStore) []byte {
				b, err := os.ReadFile(s.(audit.FileAnchor).Path)
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
		},
		{name: "mem", new: func(*testing.T) audit.AnchorStore { return new(audit.MemAnchor) }},
		{
			name: "etcd",
			new: func(t *testing.T) audit.AnchorStore {
				s, err := New(cl, testKey(t), nil)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			damage: func(t *testing.T, s audit.AnchorStore, raw []byte) { put(t, cl, s.(*Store).Key(), raw) },
			raw:    func(t *testing.T, s audit.AnchorStore) []byte { return get(t, cl, s.(*Store).Key()) },
		},
	}
}

// Ensure that the etcd store keeps the contract of the anchor file, case by
// case, against a real 3-member cluster.
func TestConformance(t *testing.T) {
	_, cl := startCluster(t)
	for _, k := range kinds(cl) {
		t.Run(k.name, func(t *testing.T) { contractSuite(t, k) })
	}
}

func contractSuite(t *testing.T, k storeKind) {
	other := checkpoint(t, "receiver-2", 9, 0, 3)
	lowerEHW := checkpoint(t, testReceiver, 9, 0, 0)
	for _, tc := range []struct {
		name string
		old  *audit.SignedCheckpoint
		next audit.SignedCheckpoint
		want error
	}{
		{"advance", ptr(at(t, 5)), at(t, 9), nil},
		{"same again", ptr(at(t, 5)), at(t, 5), nil},
		{"first anchor over an existing one", nil, at(t, 9), audit.ErrWriteConflict},
		{"stale old", ptr(at(t, 4)), at(t, 9), audit.ErrWriteConflict},
		{"old from another fork", ptr(checkpoint(t, testReceiver, 5, 1, 2)), at(t, 9), audit.ErrWriteConflict},
		{"smaller seq", ptr(at(t, 5)), at(t, 4), audit.ErrAnchorRegression},
		{"same seq, other head", ptr(at(t, 5)), checkpoint(t, testReceiver, 5, 1, 2), audit.ErrAnchorRegression},
		{"smaller epoch high-water", ptr(at(t, 5)), lowerEHW, audit.ErrAnchorRegression},
		{"another receiver", ptr(at(t, 5)), other, audit.ErrReceiverMismatch},
		{"invalid checkpoint", ptr(at(t, 5)), audit.SignedCheckpoint{}, audit.ErrBadCheckpoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := k.new(t)
			if err := s.Store(nil, at(t, 5)); err != nil {
				t.Fatal(err)
			}
			err := s.Store(tc.old, tc.next)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Store: %v, want %v", err, tc.want)
			}
			want := at(t, 5)
			if err == nil {
				want = tc.next
			}
			if got, err := s.Load(); err != nil || got != want {
				t.Fatalf("Load after Store = seq %d, %v; want seq %d", got.Seq, err, want.Seq)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		s := k.new(t)
		if _, err := s.Load(); !errors.Is(err, audit.ErrAnchorMissing) {
			t.Fatalf("Load: %v, want ErrAnchorMissing", err)
		}
		if err := s.Store(ptr(at(t, 5)), at(t, 9)); !errors.Is(err, audit.ErrWriteConflict) || !errors.Is(err, audit.ErrAnchorMissing) {
			t.Fatalf("Store over a missing anchor: %v", err)
		}
		if err := s.Supersede(at(t, 5), at(t, 3)); !errors.Is(err, audit.ErrWriteConflict) {
			t.Fatalf("Supersede over a missing anchor: %v", err)
		}
		if _, err := s.Load(); !errors.Is(err, audit.ErrAnchorMissing) {
			t.Fatalf("Load after refused writes: %v, want ErrAnchorMissing", err)
		}
	})
	t.Run("supersede", func(t *testing.T) {
		s := k.new(t)
		if err := s.Store(nil, at(t, 9)); err != nil {
			t.Fatal(err)
		}
		if err := s.Supersede(at(t, 5), at(t, 3)); !errors.Is(err, audit.ErrWriteConflict) {
			t.Fatalf("Supersede of another anchor: %v", err)
		}
		if err := s.Supersede(at(t, 9), other); !errors.Is(err, audit.ErrReceiverMismatch) {
			t.Fatalf("Supersede to another receiver: %v", err)
		}
		if err := s.Supersede(at(t, 9), at(t, 3)); err != nil {
			t.Fatalf("Supersede: %v", err)
		}
		if got, err := s.Load(); err != nil || got != at(t, 3) {
			t.Fatalf("Load after Supersede: seq %d, %v", got.Seq, err)
		}
	})
	t.Run("concurrent writers", func(t *testing.T) {
		s := k.new(t)
		if err := s.Store(nil, at(t, 5)); err != nil {
			t.Fatal(err)
		}
		// Eight writers hold the same view and each writes its own next
		// anchor: one wins, every other one conflicts.
		const writers = 8
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() { errs[i] = s.Store(ptr(at(t, 5)), at(t, uint64(6+i))) })
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("writers %d and %d both succeeded", winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, audit.ErrWriteConflict):
				t.Fatalf("writer %d: %v, want ErrWriteConflict", i, err)
			}
		}
		if winner < 0 {
			t.Fatal("no writer succeeded")
		}
		if got, err := s.Load(); err != nil || got != at(t, uint64(6+winner)) {
			t.Fatalf("Load = seq %d, %v; want the winner's seq %d", got.Seq, err, 6+winner)
		}
	})
	if k.damage == nil {
		return
	}
	v1 := []byte("kvfence checkpoint v1\nreceiver receiver-1\n")
	text, err := at(t, 5).MarshalAnchor()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		raw  []byte
		want error
	}{
		{"not an anchor", []byte("hello"), audit.ErrBadAnchor},
		{"empty", []byte{}, audit.ErrBadAnchor},
		{"anchor text with a byte more", append(append([]byte(nil), text...), '\n'), audit.ErrBadAnchor},
		{"anchor text cut short", text[:len(text)-1], audit.ErrBadAnchor},
		{"format v1", v1, audit.ErrBadAnchor},
	} {
		t.Run("bad value/"+tc.name, func(t *testing.T) {
			s := k.new(t)
			if err := s.Store(nil, at(t, 5)); err != nil {
				t.Fatal(err)
			}
			k.damage(t, s, tc.raw)
			if _, err := s.Load(); !errors.Is(err, tc.want) {
				t.Fatalf("Load: %v, want %v", err, tc.want)
			}
			// What is there is evidence: no write replaces it.
			for _, old := range []*audit.SignedCheckpoint{nil, ptr(at(t, 5))} {
				if err := s.Store(old, at(t, 9)); !errors.Is(err, tc.want) {
					t.Fatalf("Store over it: %v, want %v", err, tc.want)
				}
			}
			if err := s.Supersede(at(t, 5), at(t, 3)); !errors.Is(err, tc.want) {
				t.Fatalf("Supersede over it: %v, want %v", err, tc.want)
			}
			if got := k.raw(t, s); string(got) != string(tc.raw) {
				t.Fatalf("the value changed to %q", got)
			}
		})
	}
}

// Ensure that a Store's remembered anchor, gone stale because another
// process wrote the key, decides nothing: each write is decided on what the
// key holds, exactly as a Store that remembers nothing decides it.
func TestStaleHint(t *testing.T) {
	_, cl := startCluster(t)
	key := testKey(t)
	a, err := New(cl, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(cl, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Store(nil, at(t, 5)); err != nil {
		t.Fatal(err)
	}
	if err := b.Store(ptr(at(t, 5)), at(t, 9)); err != nil {
		t.Fatal(err)
	}
	// a still remembers seq 5. Against it seq 4 would be a regression and
	// seq 6 an advance; against the key, both are conflicts.
	for _, next := range []uint64{4, 6} {
		if err := a.Store(ptr(at(t, 5)), at(t, next)); !errors.Is(err, audit.ErrWriteConflict) {
			t.Fatalf("Store(seq 5, seq %d) on a stale hint: %v, want ErrWriteConflict", next, err)
		}
	}
	// Writes go on from what the key holds.
	if err := a.Store(ptr(at(t, 9)), at(t, 10)); err != nil {
		t.Fatal(err)
	}
	// Rewriting the same anchor changes the mod revision, not the anchor:
	// a write that expects it still succeeds.
	put(t, cl, key, get(t, cl, key))
	if err := a.Store(ptr(at(t, 10)), at(t, 11)); err != nil {
		t.Fatalf("Store after the anchor was rewritten unchanged: %v", err)
	}
	if got, err := b.Load(); err != nil || got != at(t, 11) {
		t.Fatalf("Load = seq %d, %v; want 11", got.Seq, err)
	}
	// One value, written whole: there is no other slot to be damaged.
	if _, ok := any(b).(audit.DamageReporter); ok {
		t.Fatal("the etcd store claims to report slot damage")
	}
	if got, damage, err := audit.LoadWithDamage(b); err != nil || got != at(t, 11) || damage != nil {
		t.Fatalf("LoadWithDamage = seq %d, %v, %v; want seq 11 and no damage", got.Seq, damage, err)
	}
}

// Ensure that a remembered revision is not trusted alone: once the anchor's
// own cluster is restored from a snapshot, the revision a Store remembers
// can recur holding another anchor, and a compare on the revision alone
// would overwrite that anchor from a stale hint. The recurrence is planted
// in the hint, since a live cluster never repeats a revision.
func TestHintRevisionRecursWithAnotherValue(t *testing.T) {
	_, cl := startCluster(t)
	key := testKey(t)
	a, err := New(cl, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Store(nil, at(t, 5)); err != nil {
		t.Fatal(err)
	}
	if err := a.Store(ptr(at(t, 5)), at(t, 9)); err != nil {
		t.Fatal(err)
	}
	// The key holds seq 9 at a.last.rev; the hint is made to say seq 5
	// at that same revision.
	old := at(t, 5)
	raw, err := old.MarshalAnchor()
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	a.last = value{cur: &old, raw: raw, rev: a.last.rev}
	a.mu.Unlock()
	if err := a.Store(ptr(at(t, 5)), at(t, 6)); !errors.Is(err, audit.ErrWriteConflict) {
		t.Fatalf("Store(seq 5, seq 6) over seq 9 at the hinted revision: %v, want ErrWriteConflict", err)
	}
	b, err := New(cl, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.Load(); err != nil || got != at(t, 9) {
		t.Fatalf("Load = seq %d, %v; want 9", got.Seq, err)
	}
}
