package kvfence

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/boltengine"
	"github.com/kvfence/kvfence/internal/defect"
	bolt "go.etcd.io/bbolt"
)

// ErrSnapshotUnsupported means Snapshot was asked of a receiver whose
// engine cannot give a file snapshot of its storage (an etcd-kept one).
var ErrSnapshotUnsupported = errors.New("kvfence: a snapshot of this receiver's storage is not supported")

// VerifyOnline is VerifyChain for the running receiver r: it checks the
// audit chain, the state digest and the anchor as VerifyChain does, while
// r goes on serving. The anchor is read first, between two anchor writes
// of r; the chain, the base, the state records and the newest checkpoint
// are then all read in one read transaction of r's engine (a bbolt read
// transaction, or one etcd revision), so they are one consistent view at
// or past that anchor. Writers are not held for the run beyond what a
// read transaction does: bbolt keeps the pages the view reads from being
// reused (and a remap of a growing file waits for it), etcd must not
// compact the revision away (a compaction under the view starts the
// whole check again on a newer one).
//
// The anchor is r's own store and the public key r's own, so the result
// is r's word about itself: a receiver whose process or host is
// compromised can answer anything. VerifyChain on a copy, with the
// operator's public key, is the independent check.
func (r *Receiver) VerifyOnline(ctx context.Context) (audit.Report, error) {
	if r.closed.Load() {
		return audit.Report{}, ErrClosed
	}
	if r.opts.Anchor == nil {
		return audit.Report{}, fmt.Errorf("%w: the receiver was opened without its anchor", ErrNoAnchor)
	}
	// amu is held by each anchor write: the anchor is read whole, never
	// half-written, and every commit it covers is in the view opened after.
	r.amu.Lock()
	a, damage, err := audit.LoadWithDamage(r.opts.Anchor)
	r.amu.Unlock()
	var anchor audit.AnchorStore
	if err != nil {
		if !errors.Is(err, audit.ErrAnchorMissing) && !errors.Is(err, audit.ErrBadAnchor) {
			return audit.Report{}, fmt.Errorf("kvfence: %s: anchor: %w", r.path, err)
		}
		// Verify reports a missing or damaged anchor as its problem.
		anchor = &failedAnchor{err: err}
	} else {
		anchor = &fixedAnchor{sc: a, damage: damage}
	}
	var rep audit.Report
	err = r.eng.View(ctx, func(tx engine.Tx) error {
		v, err := openWith(frozenEngine{tx: tx, lim: r.eng.Limits()}, r.path, r.file,
			&Options{ReadOnly: true, anchorUnchecked: true}, defect.Variant{})
		if err != nil {
			return err
		}
		defer v.Close()
		rep, err = v.verifyChainAgainst(VerifyOptions{Anchor: anchor, PublicKey: r.pub})
		return err
	})
	return rep, engineErr(err)
}

// Snapshot is a consistent copy of a receiver's storage and the signed
// checkpoint of its newest entry, as Receiver.Snapshot gives it.
type Snapshot struct {
	// Checkpoint is the newest checkpoint in the copy, signed by the
	// receiver: it covers the copy's head and commits to its state.
	Checkpoint audit.SignedCheckpoint
	// Size is the number of bytes WriteTo writes.
	Size int64
	// WriteTo writes the copy, a bbolt database file, to w.
	WriteTo func(w io.Writer) (int64, error)
}

// Snapshot runs fn with a consistent copy of r's storage, taken in one
// read transaction that stays open until fn returns: writers go on
// meanwhile (bbolt keeps the pages the copy reads from being reused, and a
// remap of a growing file waits for it). fn must not keep the Snapshot.
// Only a receiver kept in a bbolt file has one (ErrSnapshotUnsupported
// otherwise): an etcd cluster's snapshot holds every prefix of the
// cluster, not this receiver's alone.
func (r *Receiver) Snapshot(ctx context.Context, fn func(Snapshot) error) error {
	if r.closed.Load() {
		return ErrClosed
	}
	// An engine that wraps a bbolt one (as a test's fault injector does)
	// gives its database too.
	be, ok := r.eng.(interface{ DB() *bolt.DB })
	if !ok || be.DB() == nil {
		return fmt.Errorf("%w: it is not kept in a bbolt file", ErrSnapshotUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return engineErr(be.DB().View(func(btx *bolt.Tx) error {
		var sc audit.SignedCheckpoint
		err := boltengine.InTx(btx, nil, func(tx engine.Tx) error {
			head, _, err := auditChain.LoadHead(tx)
			if err != nil {
				return chainErr(r.path, err)
			}
			if sc, err = latestCheckpoint(tx); err != nil {
				return err
			}
			if sc.Seq != head.Seq || sc.Head != head.Hash {
				return fmt.Errorf("%w: the newest checkpoint covers seq %d, the chain ends at seq %d", audit.ErrStateMismatch, sc.Seq, head.Seq)
			}
			return nil
		})
		if err != nil {
			return err
		}
		return fn(Snapshot{Checkpoint: sc, Size: btx.Size(), WriteTo: btx.WriteTo})
	}))
}

// frozenEngine runs every View in one transaction that is already open, so
// that a read-only receiver over it reads one state however many
// transactions it runs. It is read-only, and closing it does not end the
// transaction.
type frozenEngine struct {
	tx  engine.Tx
	lim engine.Limits
}

func (f frozenEngine) Update(context.Context, func(engine.Tx) error) error {
	return fmt.Errorf("%w: a verification does not write", ErrReadOnly)
}

func (f frozenEngine) View(ctx context.Context, fn func(engine.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return fn(f.tx)
}

func (f frozenEngine) Limits() engine.Limits { return f.lim }

func (f frozenEngine) Close() error { return nil }

// failedAnchor is an anchor store whose one read failed: the verification
// reports that, and reads it no more.
type failedAnchor struct{ err error }

func (a *failedAnchor) Load() (audit.SignedCheckpoint, error) { return audit.SignedCheckpoint{}, a.err }

func (a *failedAnchor) Store(*audit.SignedCheckpoint, audit.SignedCheckpoint) error {
	return fmt.Errorf("%w: a verification does not write the anchor", ErrReadOnly)
}

func (a *failedAnchor) Supersede(audit.SignedCheckpoint, audit.SignedCheckpoint) error {
	return fmt.Errorf("%w: a verification does not write the anchor", ErrReadOnly)
}
