package kvfence

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/defect"
)

// storeImage is every key of every bucket of a store, as read in one
// transaction.
type storeImage map[string]map[string][]byte

// imageOf copies every bucket of r's store, as someone who can read the
// store would.
func imageOf(t testing.TB, r *Receiver) storeImage {
	t.Helper()
	img := storeImage{}
	err := r.eng.View(context.Background(), func(tx engine.Tx) error {
		for _, b := range allBuckets {
			m := map[string][]byte{}
			if err := tx.Scan(b, nil, func(k, v []byte) error {
				m[string(k)] = bytes.Clone(v)
				return nil
			}); err != nil {
				return err
			}
			img[string(b)] = m
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// putImage writes img back in place of the store's content, as a process
// that writes the database file (and holds no key) would.
func putImage(t testing.TB, r *Receiver, img storeImage) {
	t.Helper()
	err := r.rawUpdate(func(tx engine.Tx) error {
		for _, b := range allBuckets {
			var gone [][]byte
			if err := tx.Scan(b, nil, func(k, _ []byte) error {
				if _, ok := img[string(b)][string(k)]; !ok {
					gone = append(gone, bytes.Clone(k))
				}
				return nil
			}); err != nil {
				return err
			}
			for _, k := range gone {
				if err := tx.Delete(b, k); err != nil {
					return err
				}
			}
			for k, v := range img[string(b)] {
				if err := tx.Put(b, []byte(k), v); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// gatedClock is the fixture's clock with a gate: once armed, the next
// reading waits until the gate is opened, which lets a test hold a commit
// leader inside its transaction while more calls queue behind it.
type gatedClock struct {
	c       *testClock
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (g *gatedClock) arm() {
	g.mu.Lock()
	g.armed, g.entered, g.release = true, make(chan struct{}), make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedClock) Now() time.Time {
	g.mu.Lock()
	armed := g.armed
	g.armed = false
	entered, release := g.entered, g.release
	g.mu.Unlock()
	if armed {
		close(entered)
		<-release
	}
	return g.c.Now()
}

// pendingCalls is how many calls wait in r's commit queue.
func pendingCalls(r *Receiver) int {
	r.queue.mu.Lock()
	defer r.queue.mu.Unlock()
	return len(r.queue.pending)
}

// Ensure that a database file put back, whole, to the signed state before
// an acknowledged hold, under the running receiver, is never decided on,
// even by a batch whose calls carry the new checkpoint's seq past the
// anchor's. The hold does not raise the epoch high-water (another scope is
// at a higher epoch), so the put-back state's high-water is the anchor's;
// re-verification after the head moved accepts the old signed state, and
// the anchor's seq and high-water rules alone, which a batch of two calls
// satisfies, do not see that the chain no longer holds the anchored head.
// Before the fix the stale worker's write was committed and anchored, the
// hold erased from the history, and the database reopened cleanly.
func TestRedteam9_FileRollbackPastAnchorByBatch(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	// Another scope at a higher epoch keeps the high-water above fixScope's.
	if err := f.admin.CreateScope(f.ctx, "other"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{"other"}, Reason: "bump"}); err != nil {
			t.Fatal(err)
		}
	}
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	open := imageOf(t, f.r)
	f.hold("worker-a lease expired") // acknowledged: the anchor covers it
	heldHead := f.r.head
	held := imageOf(t, f.r)

	g := &gatedClock{c: f.clock}
	f.r.opts.Now = g.Now
	putImage(t, f.r, open)

	// The leader of the first batch waits inside its transaction while
	// two calls of the stale worker queue behind it, to share one batch.
	g.arm()
	first := make(chan error, 1)
	go func() {
		_, err := f.r.Submit(f.ctx, "nobody", []byte("junk"))
		first <- err
	}()
	gated := true
	select {
	case <-g.entered:
	case err := <-first:
		// Refused before it decided anything: nothing holds the queue.
		t.Logf("first call: %v", err)
		gated = false
		first <- err
	}
	type out struct {
		res Result
		err error
	}
	outs := make(chan out, 2)
	for range 2 {
		go func() {
			res, err := f.r.Submit(f.ctx, "worker-a", a.envelope)
			outs <- out{res, err}
		}()
	}
	for gated && pendingCalls(f.r) < 2 {
		time.Sleep(time.Millisecond)
	}
	close(g.release)
	<-first
	for range 2 {
		o := <-outs
		if o.err == nil && o.res.Outcome == Applied {
			t.Errorf("the stale worker's envelope was applied after an acknowledged hold: %+v", o.res)
		}
	}
	if tg := f.target(); tg.Revision != 1 {
		t.Errorf("target at revision %d (%s): a write under the superseded grant was committed", tg.Revision, tg.Value)
	}
	if an, err := f.anchor.Load(); err == nil && (an.Seq != heldHead.Seq || an.Head != heldHead.Hash) {
		var same bool
		_ = f.r.view(func(tx engine.Tx) error {
			h, err := hashAt(tx, heldHead.Seq)
			same = err == nil && h == heldHead.Hash
			return nil
		})
		if !same {
			t.Errorf("the anchor (seq %d) now covers a chain without the acknowledged hold at seq %d", an.Seq, heldHead.Seq)
		}
	}
	if t.Failed() {
		return
	}
	// With the held state back, the receiver decides again.
	putImage(t, f.r, held)
	wantDenied(t, f.submit("worker-a", a.envelope), ReasonReceiverHeld)
}
