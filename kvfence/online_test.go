package kvfence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/defect"
)

// churn runs writes that move the chain, the state records and the anchor
// until stop is closed: activate a grant, submit under it (applied), submit
// it again (already_applied), hold. It returns a function that waits for
// it and reports its first error.
func churn(f *fixture, stop <-chan struct{}) func() error {
	var wg sync.WaitGroup
	var firstErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v := []byte(fmt.Sprintf(`{"n":%d}`, i))
			req, err := EncodeRequest(&Request{V: 1, Action: fmt.Sprintf("a-%d", i), Target: fixTarget, Set: &v})
			if err == nil {
				var g Grant
				if g, err = f.admin.Activate(f.ctx, ActivateRequest{Scope: fixScope, Executor: "w", Claim: "c", Request: req}); err == nil {
					var env []byte
					env, err = EncodeEnvelope(&Envelope{V: 1, Scope: fixScope, Epoch: g.Epoch, Grant: g.ID, Executor: "w", Claim: "c", Request: req})
					for k := 0; k < 2 && err == nil; k++ {
						var res Result
						if res, err = f.r.Submit(f.ctx, "w", env); err == nil && res.Outcome == Denied {
							err = fmt.Errorf("submit %d denied: %s", i, res.Detail)
						}
					}
				}
			}
			if err == nil {
				_, err = f.admin.Hold(f.ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "churn"})
			}
			if err != nil {
				firstErr = err
				return
			}
		}
	}()
	return func() error { wg.Wait(); return firstErr }
}

// Ensure that VerifyOnline finds a running receiver's chain, state and
// anchor whole while writes move all three, on both engines: the anchor is
// read between anchor writes and the rest in one read transaction, so no
// verification sees a chain behind its anchor or state from another
// commit than its checkpoint.
func TestVerifyOnline_ConcurrentWrites(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		stop := make(chan struct{})
		wait := churn(f, stop)
		runs := 40
		if s.name == "etcd" {
			runs = 10
		}
		var lastSeq uint64
		// Verify at least runs times, and on until the writes have moved
		// the chain well past where they began.
		for i := 0; i < runs || lastSeq < 40; i++ {
			if i > 100000 {
				t.Fatalf("the writes moved the chain to seq %d only", lastSeq)
			}
			rep, err := f.r.VerifyOnline(context.Background())
			if err != nil {
				close(stop)
				wait()
				t.Fatalf("run %d: %v", i, err)
			}
			if !rep.OK() {
				close(stop)
				wait()
				t.Fatalf("run %d: %s: %s", i, rep.Problem, rep.Detail)
			}
			if rep.Head.Seq < rep.Anchor.Seq || rep.Head.Seq < lastSeq {
				t.Errorf("run %d: head %d, anchor %d, previous head %d", i, rep.Head.Seq, rep.Anchor.Seq, lastSeq)
			}
			lastSeq = rep.Head.Seq
		}
		close(stop)
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	})
}

// Ensure that VerifyOnline reports what the store holds, not what the
// receiver believes: a target record changed in the store under the
// running receiver is state_mismatch.
func TestVerifyOnline_ReportsEditedState(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		rep, err := f.r.VerifyOnline(context.Background())
		if err != nil || !rep.OK() {
			t.Fatalf("before the edit: %v %s %s", err, rep.Problem, rep.Detail)
		}
		var saved []byte
		err = f.r.eng.Update(context.Background(), func(tx engine.Tx) error {
			v, err := tx.Get(bucketTargets, []byte(fixTarget))
			if err != nil || v == nil {
				return fmt.Errorf("target record: %v", err)
			}
			saved = append([]byte(nil), v...)
			edited := append([]byte(nil), v...)
			edited[len(edited)-2] ^= 1
			return tx.Put(bucketTargets, []byte(fixTarget), edited)
		})
		if err != nil {
			t.Fatal(err)
		}
		rep, err = f.r.VerifyOnline(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rep.Problem != audit.ProblemStateMismatch {
			t.Errorf("problem = %s (%s), want state_mismatch", rep.Problem, rep.Detail)
		}
		// Put back, for the chain check at cleanup.
		if err := f.r.eng.Update(context.Background(), func(tx engine.Tx) error {
			return tx.Put(bucketTargets, []byte(fixTarget), saved)
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// Ensure that VerifyOnline reports a missing anchor as the problem it is.
func TestVerifyOnline_AnchorMissing(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	if err := os.Rename(f.anchor.Path, f.anchor.Path+".aside"); err != nil {
		t.Fatal(err)
	}
	rep, err := f.r.VerifyOnline(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Problem != audit.ProblemAnchorMissing {
		t.Errorf("problem = %s, want anchor_missing", rep.Problem)
	}
	if err := os.Rename(f.anchor.Path+".aside", f.anchor.Path); err != nil {
		t.Fatal(err)
	}
}

// Ensure that Snapshot gives a bbolt file whose newest checkpoint is the
// one it names, while writes go on, and that a receiver kept in etcd has
// none (ErrSnapshotUnsupported).
func TestSnapshot_ConsistentAndEtcdUnsupported(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		f := newFixtureOn(t, s, defect.Variant{})
		if s.name == "etcd" {
			err := f.r.Snapshot(context.Background(), func(Snapshot) error { return nil })
			if !errors.Is(err, ErrSnapshotUnsupported) {
				t.Fatalf("Snapshot on etcd: %v, want ErrSnapshotUnsupported", err)
			}
			return
		}
		stop := make(chan struct{})
		wait := churn(f, stop)
		defer func() {
			close(stop)
			if err := wait(); err != nil {
				t.Error(err)
			}
		}()
		for i := 0; i < 10; i++ {
			path := filepath.Join(t.TempDir(), "copy.db")
			var sc audit.SignedCheckpoint
			err := f.r.Snapshot(context.Background(), func(s Snapshot) error {
				sc = s.Checkpoint
				out, err := os.Create(path)
				if err != nil {
					return err
				}
				defer out.Close()
				n, err := s.WriteTo(out)
				if err == nil && n != s.Size {
					err = fmt.Errorf("wrote %d of %d bytes", n, s.Size)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			anchor := &audit.MemAnchor{}
			if err := anchor.Store(nil, sc); err != nil {
				t.Fatal(err)
			}
			rep, err := VerifyChain(path, VerifyOptions{Anchor: anchor, PublicKey: f.r.PublicKey()})
			if err != nil || !rep.OK() || rep.Head != (audit.Head{Seq: sc.Seq, Hash: sc.Head}) {
				t.Fatalf("copy %d: %v %s %s, head %v, checkpoint seq %d", i, err, rep.Problem, rep.Detail, rep.Head, sc.Seq)
			}
		}
	})
}
