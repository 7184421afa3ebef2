package kvfence

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/defect"
	clientv3 "go.etcd.io/etcd/client/v3"
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
// Before the fix, on a file, the stale worker's write was committed and
// anchored and the hold erased from the history; on etcd the anchor read
// before each batch refused the old head.
func TestRedteam9_FileRollbackPastAnchorByBatch(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		// Another scope at a higher epoch keeps the high-water above fixScope's.
		if _, err := f.admin.CreateScope(f.ctx, "other"); err != nil {
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
	})
}

// rt9FailAnchor is an anchor store whose writes fail while fail is set,
// as an anchor volume that is full or gone would.
type rt9FailAnchor struct {
	audit.AnchorStore
	fail atomic.Bool
}

func (a *rt9FailAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	if a.fail.Load() {
		return errors.New("anchor volume unavailable")
	}
	return a.AnchorStore.Store(old, next)
}

// hookEngine runs before before the first View that starts after a
// transaction read the stored state digest (the end of Open's state
// check), and after after it.
type hookEngine struct {
	engine.Engine
	mu            sync.Mutex
	seen, done    bool
	before, after func()
}

type hookTx struct {
	engine.Tx
	e *hookEngine
}

func (t hookTx) Get(bucket, key []byte) ([]byte, error) {
	if bytes.Equal(bucket, bucketCheckpoints) && bytes.Equal(key, checkpointState) {
		t.e.mu.Lock()
		t.e.seen = true
		t.e.mu.Unlock()
	}
	return t.Tx.Get(bucket, key)
}

func (e *hookEngine) View(ctx context.Context, fn func(engine.Tx) error) error {
	e.mu.Lock()
	fire := e.seen && !e.done
	if fire {
		e.done = true
	}
	e.mu.Unlock()
	if fire {
		e.before()
		defer e.after()
	}
	return e.Engine.View(ctx, func(tx engine.Tx) error { return fn(hookTx{tx, e}) })
}

// Ensure that Open's fence replay walks the chain whose head the state
// check verified. A receiver without checks 2-4 applied a superseded grant
// and its anchor write failed, so the violation is past the anchor (the
// window between a commit and its anchor write). Someone who can write the
// etcd prefix removes that last entry while Open replays the chain and
// puts it back after: before the fix the replay saw a clean chain ending
// at the anchor, Open succeeded, and the receiver went on over a chain
// that records a fence violation (and anchored it).
func TestRedteam9_OpenReplaySeesVerifiedHead(t *testing.T) {
	s := engines[1].new(t)
	f := newFixtureOn(t, s, defect.Variant{SkipAuthority: true})
	s = f.store
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	f.hold("worker-a lease expired")
	fa := &rt9FailAnchor{AnchorStore: f.anchor}
	f.r.opts.Anchor = fa
	fa.fail.Store(true)
	_, err := f.r.Submit(f.ctx, "worker-a", a.envelope)
	if !errors.Is(err, ErrNotAcknowledged) {
		t.Fatalf("stale submit on the defective receiver = %v, want ErrNotAcknowledged", err)
	}
	last := f.r.head
	f.r.Close()
	key := s.prefix + string(bucketAudit) + "/" + string(audit.SeqKey(last.Seq))
	cli := etcdClient(t)
	defer cli.Close()
	resp, err := cli.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		all, _ := cli.Get(context.Background(), s.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		for _, kv := range all.Kvs {
			t.Logf("%q", kv.Key)
		}
		t.Fatalf("the violating entry at %q: %v", key, err)
	}
	entry := resp.Kvs[0].Value
	he := &hookEngine{Engine: s.engine(t, nil),
		before: func() {
			if _, err := cli.Delete(context.Background(), key); err != nil {
				t.Error(err)
			}
		},
		after: func() {
			if _, err := cli.Put(context.Background(), key, string(entry)); err != nil {
				t.Error(err)
			}
		}}
	r, err := openWith(he, "etcd "+s.prefix, false, f.opts(), defect.Variant{})
	if err == nil {
		f.r = r
		t.Fatalf("Open over a chain whose head records a fence violation succeeded (head %v)", r.Head())
	}
	if !he.done {
		t.Fatalf("the replay's view was not reached: %v", err)
	}
	t.Logf("Open: %v", err)
	ro, err := f.openStore(&Options{ReadOnly: true}, defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	f.r = ro
}

// Ensure that the epoch high-water, which every checkpoint signs and the
// anchor keeps, is not taken from the store as edited under the running
// receiver. It lives in the meta bucket, outside the known records: raised
// there to the largest epoch, it was signed into the next checkpoint and
// the anchor, whose high-water only grows, and every later recovery
// (which holds each scope above the anchor's high-water) then failed with
// ErrEpochExhausted: a receiver that could never be re-admitted.
func TestRedteam9_EpochHighWaterEditedUnderReceiver(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		saved := rawGet(t, f.r, bucketMeta, string(metaEpochHighWater))
		storePut(t, f, bucketMeta, string(metaEpochHighWater), binary.BigEndian.AppendUint64(nil, math.MaxUint64))
		_, err := f.r.Submit(f.ctx, "nobody", []byte("junk"))
		an, lerr := f.anchor.Load()
		if lerr != nil {
			t.Fatal(lerr)
		}
		if an.EpochHighWater == math.MaxUint64 {
			t.Errorf("the anchor signs the high-water edited in the store (%d); Submit = %v", an.EpochHighWater, err)
		} else if !errors.Is(err, ErrStateMismatch) {
			t.Errorf("Submit on an edited high-water = %v, want ErrStateMismatch", err)
		}
		if t.Failed() {
			return
		}
		storePut(t, f, bucketMeta, string(metaEpochHighWater), saved)
		if _, err := f.r.Submit(f.ctx, "nobody", []byte("junk")); err != nil {
			t.Fatal(err)
		}
	})
}
