package kvfence

import (
	"context"
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

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
	if err := r.Admin().CreateScope(f.ctx, fixScope); err != nil {
		t.Fatal(err)
	}
	q, err := s.inspect(t, anchor)
	if err != nil {
		t.Fatal(err)
	}
	adm := signed(t, recoveryKey, audit.Admission{Receiver: "rcv", SupersededAnchor: q.Anchor, AdmittedHead: q.Head,
		AdmittedState: q.State, At: clock.Now().UnixNano(), Reason: "drill"})

	eng := &beforeUpdate{Engine: s.engine(t, nil)}
	late := func() {
		// Another receiver process on the prefix commits a scope the
		// admission never saw.
		if err := r.Admin().CreateScope(f.ctx, "late"); err != nil {
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
