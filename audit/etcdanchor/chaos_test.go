package etcdanchor

import (
	"errors"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/etcdproc"
)

// openStore opens a Store on c's members at key with short timeouts, so
// that a killed member turns writes into unknown outcomes within the test.
func openStore(t *testing.T, c *etcdproc.Cluster, key string, timeout time.Duration, attempts int) *Store {
	t.Helper()
	s, err := Open(Address{Endpoints: c.Endpoints(), Key: key}, &Options{Timeout: timeout, Attempts: attempts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// loadEventually reads the anchor until the cluster answers, for at most
// 30 seconds; it fails t if it cannot.
func loadEventually(t *testing.T, s *Store) audit.SignedCheckpoint {
	t.Helper()
	sc, err := tryLoad(s)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// tryLoad reads the anchor until the cluster answers, for at most 30
// seconds; it does not touch t, so that any goroutine may call it.
func tryLoad(s *Store) (audit.SignedCheckpoint, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		sc, err := s.Load()
		if err == nil || errors.Is(err, audit.ErrBadAnchor) || errors.Is(err, audit.ErrAnchorMissing) || time.Now().After(deadline) {
			return sc, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Ensure that an anchor write that loses its quorum is reported as of
// unknown outcome, never as success or conflict, and that once the cluster
// is back a read decides it and writing goes on from there.
func TestOutcomeUnknownWithoutQuorum(t *testing.T) {
	c := etcdproc.Start(t, 3)
	s := openStore(t, c, testKey(t), 500*time.Millisecond, 2)
	if err := s.Store(nil, at(t, 1)); err != nil {
		t.Fatal(err)
	}
	// The store remembers the anchor it wrote, so the next write goes
	// straight to its compare-and-swap: the one request that can be lost.
	c.Member(1).Kill()
	c.Member(2).Kill()
	err := s.Store(ptr(at(t, 1)), at(t, 2))
	switch {
	case err == nil:
		t.Fatal("Store without a quorum succeeded")
	case !errors.Is(err, ErrOutcomeUnknown):
		t.Fatalf("Store without a quorum: %v, want ErrOutcomeUnknown", err)
	case errors.Is(err, audit.ErrWriteConflict):
		t.Fatalf("an unknown outcome reported as a conflict: %v", err)
	}
	t.Logf("without a quorum: %v", err)
	c.RestartAll()
	got := loadEventually(t, s)
	if got != at(t, 1) && got != at(t, 2) {
		t.Fatalf("after the unknown outcome the anchor is seq %d, neither the old nor the new one", got.Seq)
	}
	t.Logf("the re-read found seq %d", got.Seq)
	if err := s.Store(&got, at(t, 3)); err != nil {
		t.Fatalf("Store after the re-read: %v", err)
	}
	if got := loadEventually(t, s); got != at(t, 3) {
		t.Fatalf("Load = seq %d, want 3", got.Seq)
	}
}

// Ensure that a write whose first attempts find no quorum lands once a
// quorum is back within its attempts: Store settles the unknown outcome
// itself by repeating the compare-and-swap, and reports success only when
// the anchor holds the new checkpoint.
func TestOutcomeSettledByRepeat(t *testing.T) {
	c := etcdproc.Start(t, 3)
	s := openStore(t, c, testKey(t), 500*time.Millisecond, 20)
	if err := s.Store(nil, at(t, 1)); err != nil {
		t.Fatal(err)
	}
	c.Member(1).Kill()
	c.Member(2).Kill()
	done := make(chan error, 1)
	go func() { done <- s.Store(ptr(at(t, 1)), at(t, 2)) }()
	time.Sleep(1500 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Store returned without a quorum: %v", err)
	default:
	}
	c.Member(1).Restart()
	if err := <-done; err != nil {
		t.Fatalf("Store once the quorum is back: %v", err)
	}
	if n := s.unknowns.Load(); n == 0 {
		t.Fatal("no attempt had an unknown outcome: the test did not exercise settling")
	}
	if got := loadEventually(t, s); got != at(t, 2) {
		t.Fatalf("Load = seq %d, want 2", got.Seq)
	}
}

// Ensure that while members, the leader among them, are SIGKILLed and
// restarted during a stream of anchor writes, every acknowledged write
// survives and none is lost: each Store names the last anchor its writer
// knows as old, so a lost write would surface as a conflict; an unknown
// outcome is resolved by a re-read, and at the end the cluster loses power
// as a whole and still holds the last anchor.
func TestKillRestartDuringWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs in the full test command (go test without -short)")
	}
	c := etcdproc.Start(t, 3)
	// One writer alternates between a store that reports the first unknown
	// outcome, for the writer to resolve by a re-read, and one that
	// settles it by repeating the write.
	stores := []*Store{openStore(t, c, testKey(t), time.Second, 1), openStore(t, c, testKey(t), time.Second, 3)}
	s := stores[0]
	const kills = 4
	type result struct {
		acked, unknown, late, failed int
		cur                          audit.SignedCheckpoint
		lastAcked                    uint64
	}
	stop := make(chan struct{})
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() { done <- r }()
		var cur *audit.SignedCheckpoint
		var pending *audit.SignedCheckpoint // a write of unknown outcome that may still land
		for seq := uint64(1); ; seq++ {
			select {
			case <-stop:
				if cur != nil {
					r.cur = *cur
				}
				return
			default:
			}
			next := at(t, seq)
			err := stores[seq%2].Store(cur, next)
			switch {
			case err == nil:
				r.acked++
				r.lastAcked = seq
				cur, pending = &next, nil
			case errors.Is(err, ErrOutcomeUnknown):
				if errors.Is(err, audit.ErrWriteConflict) {
					t.Errorf("seq %d: an unknown outcome reported as a conflict: %v", seq, err)
					return
				}
				r.unknown++
				got, err := tryLoad(s)
				if err != nil {
					t.Errorf("seq %d: re-read after an unknown outcome: %v", seq, err)
					return
				}
				if got != next && (cur == nil || got != *cur) {
					t.Errorf("seq %d: after an unknown outcome the anchor is seq %d, neither the old nor the new one", seq, got.Seq)
					return
				}
				cur, pending = &got, &next
			case errors.Is(err, audit.ErrWriteConflict):
				// Only a write of unknown outcome landing late may change
				// the anchor behind this writer's back.
				got, lerr := tryLoad(s)
				if lerr != nil {
					t.Errorf("seq %d: re-read after a conflict: %v", seq, lerr)
					return
				}
				if pending == nil || got != *pending {
					t.Errorf("seq %d: conflict with no write of ours pending: an acknowledged anchor was lost or replaced: %v", seq, err)
					return
				}
				r.late++
				cur, pending = &got, nil
			default:
				// A read that failed before the write: nothing written.
				r.failed++
				time.Sleep(50 * time.Millisecond)
			}
			if cur != nil && cur.Seq < r.lastAcked {
				t.Errorf("the anchor went back to seq %d after seq %d was acknowledged", cur.Seq, r.lastAcked)
				return
			}
		}
	}()
	began := time.Now()
	for i := range kills {
		time.Sleep(400 * time.Millisecond)
		m := c.Member(i % 3)
		if i%2 == 0 {
			if l := c.Leader(); l != nil {
				m = l
			}
		}
		m.Kill()
		time.Sleep(300 * time.Millisecond)
		m.Restart()
		t.Logf("killed and restarted %s", m.Name)
	}
	time.Sleep(400 * time.Millisecond)
	close(stop)
	r := <-done
	if t.Failed() {
		return
	}
	t.Logf("%d kills in %v: %d writes acknowledged, %d of unknown outcome, %d landed late, %d failed before writing; "+
		"attempts of unknown outcome: %d reported, %d settled by a repeat",
		kills, time.Since(began).Round(time.Millisecond), r.acked, r.unknown, r.late, r.failed,
		stores[0].unknowns.Load(), stores[1].unknowns.Load())
	if r.acked < 10 {
		t.Fatalf("only %d writes acknowledged: the test did not exercise the store", r.acked)
	}
	if got := loadEventually(t, s); got != r.cur {
		t.Fatalf("Load = seq %d, want the writer's last anchor seq %d", got.Seq, r.cur.Seq)
	}
	// Every member down at once: only what a majority fsynced survives.
	c.KillAll()
	c.RestartAll()
	if got := loadEventually(t, s); got != r.cur || got.Seq < r.lastAcked {
		t.Fatalf("after a whole-cluster power loss Load = seq %d, want seq %d (last acknowledged %d)", got.Seq, r.cur.Seq, r.lastAcked)
	}
}
