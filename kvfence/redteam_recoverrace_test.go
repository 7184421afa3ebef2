package kvfence

import (
	"context"
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/defect"
)

// beforeUpdate runs hook once, before its first Update: another writer of
// the same store commits between what the caller checked in its reads and
// its write transaction.
type beforeUpdate struct {
	engine.Engine
	hook atomic.Pointer[func()]
}

func (b *beforeUpdate) Update(ctx context.Context, fn func(engine.Tx) error) error {
	if h := b.hook.Swap(nil); h != nil {
		(*h)()
	}
	return b.Engine.Update(ctx, fn)
}

// Ensure that a recovery applies its admission only to the head the
// admission names, checked in the recovery's own write transaction: on a
// store that other processes write (etcd), a commit that lands between
// Recover's open, where the admission was checked, and its write is a
// database the admission never admitted (ErrAdmissionMismatch, nothing
// written), not one that the recovery signs into a new checkpoint.
func TestRedteam_RecoverAppliesOnlyToTheAdmittedHead(t *testing.T) {
	s := engines[1].new(t)
	clock := newClock()
	anchor := audit.FileAnchor{Path: filepath.Join(t.TempDir(), "r.anchor")}
	recoveryPub := recoveryKey.Public().(ed25519.PublicKey)
	if err := s.init(t, &InitOptions{ReceiverID: "rcv", Key: testKey, Anchor: anchor, RecoveryKey: recoveryPub, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, clock: clock, ctx: t.Context(), anchor: anchor, store: s}
	r, err := f.openStore(f.opts(), defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Admin().CreateScope(f.ctx, fixScope); err != nil {
		t.Fatal(err)
	}
	q, err := s.inspect(t, anchor)
	if err != nil {
		t.Fatal(err)
	}
	adm := signed(t, recoveryKey, audit.Admission{Receiver: "rcv", SupersededAnchor: q.Anchor, AdmittedHead: q.Head,
		AdmittedState: q.State, At: clock.Now().UnixNano(), Expires: clock.Now().Add(time.Hour).UnixNano(), Reason: "drill"})

	eng := &beforeUpdate{Engine: s.engine(t, nil)}
	late := func() {
		// Another receiver process on the prefix commits a scope the
		// admission never saw.
		if _, err := r.Admin().CreateScope(f.ctx, "late"); err != nil {
			t.Errorf("the other writer's commit: %v", err)
		}
	}
	eng.hook.Store(&late)
	_, err = RecoverEngine(eng, adm, RecoverOptions{Key: testKey, Anchor: anchor, RecoveryKey: recoveryPub, Now: clock.Now})
	if !errors.Is(err, audit.ErrAdmissionMismatch) {
		t.Fatalf("Recover after another commit = %v, want ErrAdmissionMismatch", err)
	}
	var head audit.Head
	if err := r.view(func(tx engine.Tx) (err error) {
		head, err = auditChain.ReadHead(tx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if head.Seq != q.Head.Seq+1 {
		t.Fatalf("head after the refused recovery is seq %d, want %d (the other writer's commit, no recovery entry)", head.Seq, q.Head.Seq+1)
	}
}

// Ensure that a receiver running on a shared store (etcd) that is put back
// to an older state under it does not commit on it: here the prefix goes
// back to exactly this process's own last commit, while another process
// on the prefix had held the scope since and moved the anchor. The stale
// worker's grant, active again in the restored records, must not change
// the target: the anchor that covers the other process's commits is
// checked before the commit, not only the one this process last wrote.
func TestRedteam_RestoredPrefixUnderRunningReceiver(t *testing.T) {
	s, _, _, one, two := sharedPrefix(t)
	a := one.activate("worker-a", "claim-1", one.patchRequest("raise-retention"))
	before := s.snapshot(t)
	two.hold("worker-a deposed")
	b := two.activate("worker-b", "claim-2", two.patchRequest("lower-retention"))
	if res := two.submit("worker-b", b.envelope); res.Outcome != Applied {
		t.Fatalf("worker B: %+v", res)
	}
	s.restore(t, before)

	res, err := one.r.Submit(one.ctx, "worker-a", a.envelope)
	if err == nil || errors.Is(err, ErrNotAcknowledged) {
		t.Fatalf("stale worker on the restored prefix = %+v, %v; want an integrity error and nothing committed", res, err)
	}
	if !IsIntegrityError(err) {
		t.Fatalf("stale worker on the restored prefix: %v, want an integrity error", err)
	}
	tgt, err := two.r.Target(fixTarget)
	if err != nil {
		t.Fatal(err)
	}
	if tgt.Revision != 1 {
		t.Fatalf("target at revision %d after the stale worker's call on the restored prefix, want 1 (unchanged)", tgt.Revision)
	}
}

// Ensure that a running receiver on a shared store (etcd) signs over a head
// that another writer left only if that writer signed it: a checkpoint of
// this receiver's key for exactly that head and state. Someone who can
// write the prefix but holds no key edits a target, keeps the stored state
// digest in step, appends an entry linked to the chain and moves the head
// key; the receiver's next write must refuse (state_mismatch), not take
// the digest as found and sign the edit into a checkpoint that the next
// Open accepts.
func TestRedteam_ForeignHeadNeedsItsSignedCheckpoint(t *testing.T) {
	f := newFixtureOn(t, engines[1].new(t), defect.Variant{})
	before := f.store.snapshot(t)
	err := f.r.rawUpdate(func(tx engine.Tx) error {
		head, err := auditChain.ReadHead(tx)
		if err != nil {
			return err
		}
		state, err := storedState(tx)
		if err != nil {
			return err
		}
		old, err := tx.Get(bucketTargets, []byte(fixTarget))
		if err != nil {
			return err
		}
		tgt, err := parseTarget(fixTarget, old)
		if err != nil {
			return err
		}
		tgt.Value = []byte(`{"retention_days":1}`)
		raw, err := encodeCanonical(tgt)
		if err != nil {
			return err
		}
		state.Remove(string(bucketTargets), []byte(fixTarget), old)
		state.Add(string(bucketTargets), []byte(fixTarget), raw)
		if err := tx.Put(bucketTargets, []byte(fixTarget), raw); err != nil {
			return err
		}
		digest, _ := state.AppendBinary(nil)
		if err := tx.Put(bucketCheckpoints, checkpointState, digest); err != nil {
			return err
		}
		w := auditChain.NewWriter(tx, head)
		if _, err := w.Append(&audit.Entry{Kind: KindSubmit, Outcome: string(Denied), Reason: string(ReasonUnknownScope),
			Executor: "nobody", At: f.clock.Now().UnixNano(), Note: "scope 1B sha256:00"}); err != nil {
			return err
		}
		h := w.Head()
		return tx.Put(bucketCheckpoints, []byte("head"), append(audit.SeqKey(h.Seq), h.Hash[:]...))
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.admin.CreateScope(f.ctx, "after")
	if err == nil {
		f.reopen()
		tgt := f.target()
		t.Fatalf("the receiver signed over a head no key of its signed: the edited target %q passed the next Open", tgt.Value)
	}
	if !errors.Is(err, audit.ErrStateMismatch) {
		t.Fatalf("write after a foreign, unsigned head = %v, want ErrStateMismatch", err)
	}
	// Put the store back as the receiver left it, for the cleanup's walk
	// of its chain.
	f.store.restore(t, before)
}
