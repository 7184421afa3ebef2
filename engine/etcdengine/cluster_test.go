package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/etcdtest"
)

// outcome is what one Update of the workload was told.
type outcome struct {
	id         string
	start, end time.Time
	err        error
}

// Ensure that on a 3-member cluster whose leader is hard-stopped, and then
// one more member cut off so that no quorum is left for a while, every
// acknowledged Update is in the store, every Update refused with a verdict
// (conflict, a failed read) is not, the counter that each Update read and
// wrote matches the entries exactly, and a commit whose fate is unknown is
// reported as ErrOutcomeUnknown, never as success or conflict.
func TestClusterFaults(t *testing.T) {
	c := etcdtest.NewCluster(t, etcdtest.Config{Members: 3, Gates: true})
	t.Logf("3 members ready in %v", c.Ready)
	e := newEngine(t, c, Options{})
	ctx := context.Background()
	if err := e.Update(ctx, func(tx engine.Tx) error { return tx.CreateBucket(bk) }); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var outcomes []outcome
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		// Half the workers read the counter (a read-modify-write), half
		// write blindly: a blind Update goes straight to its commit, so
		// it is the one whose commit meets a cluster without quorum.
		counted := w%2 == 0
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%04d", w, i)
				start := time.Now()
				cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				err := e.Update(cctx, func(tx engine.Tx) error {
					if counted {
						v, err := tx.Get(bk, []byte("counter"))
						if err != nil {
							return err
						}
						if err := tx.Put(bk, []byte("counter"), fmt.Append(nil, atoi(v)+1)); err != nil {
							return err
						}
					}
					return tx.Put(bk, []byte("id/"+id), []byte("x"))
				})
				cancel()
				if err == nil {
					acked.Add(1)
				}
				mu.Lock()
				outcomes = append(outcomes, outcome{id: id, start: start, end: time.Now(), err: err})
				mu.Unlock()
				if err != nil {
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	waitAcks := func(n int64, what string) {
		t.Helper()
		target := acked.Load() + n
		deadline := time.Now().Add(20 * time.Second)
		for acked.Load() < target {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("no %d acknowledged writes %s", n, what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitAcks(30, "at the start")
	leader := c.Leader(t)
	stopped := time.Now()
	c.HardStop(leader)
	waitAcks(30, "after the leader stopped")
	cut := (leader + 1) % 3
	c.Partition(cut)
	time.Sleep(1500 * time.Millisecond)
	c.Heal(cut)
	waitAcks(30, "after the partition healed")
	close(stop)
	wg.Wait()

	// Read back through the surviving members.
	stored := map[string]bool{}
	counter := 0
	err := e.View(ctx, func(tx engine.Tx) error {
		clear(stored)
		v, err := tx.Get(bk, []byte("counter"))
		if err != nil {
			return err
		}
		counter = atoi(v)
		return tx.Scan(bk, []byte("id/"), func(k, _ []byte) error {
			stored[string(k[len("id/"):])] = true
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	var ok, unknown, conflicts, failed, countedStored int
	var firstAfterStop time.Duration
	for _, o := range outcomes {
		switch {
		case o.err == nil:
			ok++
			if !stored[o.id] {
				t.Errorf("acknowledged write %s is lost", o.id)
			}
			if d := o.end.Sub(stopped); o.start.After(stopped) && (firstAfterStop == 0 || d < firstAfterStop) {
				firstAfterStop = d
			}
		case errors.Is(o.err, engine.ErrOutcomeUnknown):
			if errors.Is(o.err, engine.ErrConflict) {
				t.Errorf("%s: an unknown outcome that is also a conflict: %v", o.id, o.err)
			}
			unknown++
		default:
			if errors.Is(o.err, engine.ErrConflict) {
				conflicts++
			} else {
				failed++
			}
			if stored[o.id] {
				t.Errorf("write %s was refused (%v) but is in the store", o.id, o.err)
			}
		}
		if stored[o.id] && o.id[1]%2 == 0 {
			countedStored++
		}
	}
	if counter != countedStored {
		t.Errorf("counter %d, but %d counted entries are stored", counter, countedStored)
	}
	if unknown == 0 {
		t.Errorf("no commit met the cluster without quorum as an unknown outcome")
	}
	t.Logf("%d Updates: %d acknowledged, %d unknown (%d of those applied), %d conflicts, %d failed before commit; %d stored",
		len(outcomes), ok, unknown, len(stored)-ok, conflicts, failed, len(stored))
	t.Logf("writes resumed %v after the leader stopped (the first acknowledged Update begun after it)", firstAfterStop)
}

func atoi(v []byte) int {
	n := 0
	for _, c := range v {
		n = n*10 + int(c-'0')
	}
	return n
}
