package ledger

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/witness"
)

// DefaultWitnessTimeout bounds one cosign round and Open's (or
// VerifyChain's) question to the witnesses when Options.WitnessTimeout is
// zero.
const DefaultWitnessTimeout = 10 * time.Second

// ErrWitnessAnswers means too few witnesses answered Open's or
// VerifyChain's question for their answers to include one of the K that
// cosigned the last acknowledged write: the ledger's freshness cannot be
// established, and it is not opened. It is witness.ErrTooFewAnswers, so
// errors.Is works with either name.
var ErrWitnessAnswers = witness.ErrTooFewAnswers

// WitnessStatus is one witness of Options.Witnesses as the ledger knows
// it: its name, and its latest cosigned size if learned.
type WitnessStatus = witness.MemberStatus

// Witnesses returns each witness of Options.Witnesses with its latest
// cosigned size as this ledger last learned it, in the order given, and
// K; nil and 0 without witnesses.
func (l *Ledger) Witnesses() ([]WitnessStatus, int) {
	q := l.witnesses
	if q == nil {
		return nil, 0
	}
	return q.Status(), q.Threshold()
}

// witnessTimeout is t or its default.
func witnessTimeout(t time.Duration) time.Duration {
	if t > 0 {
		return t
	}
	return DefaultWitnessTimeout
}

// noteCheckpoint returns sc as the checkpoint of the note the ledger signs
// for it: origin checkpoint.LedgerOrigin of the ledger's id and pub, tree
// size the seq, root the checkpoint's Root. The witnesses compare it with
// theirs byte for byte, extension lines included.
//
// The extension lines are checkpoint.ReceiverState's, because the ledger's
// audit.Checkpoint is the receiver's struct and every field of it beyond
// the id, seq and root is signed: the head hash, the state digest (always
// the zero hash: the ledger's records have no state digest yet), the epoch
// high-water (the number of claims ever made, which only grows) and the
// commit time; the admission is always "none", as a ledger has no
// recovery. Reusing the five lines keeps one parser for both logs, and the
// origin (kvfence/ledger/...) says which meaning they have.
func noteCheckpoint(id string, pub ed25519.PublicKey, sc audit.SignedCheckpoint) (checkpoint.Checkpoint, error) {
	origin, err := checkpoint.LedgerOrigin(id, pub)
	if err != nil {
		return checkpoint.Checkpoint{}, err
	}
	return checkpoint.FromSigned(origin, sc), nil
}

// cosign asks the witnesses to cosign sc, the checkpoint an anchor write
// has just made durable, and returns nil once K of them did. It runs after
// the anchor write: a witness keeps one body per tree size, and sc is only
// ever the stored checkpoint of its size, which Open anchors as it is
// after a failed anchor write (anchorStoreHead), never a new signature.
func (l *Ledger) cosign(sc audit.SignedCheckpoint) (err error) {
	defer func() {
		// A witness client that panics leaves the write unacknowledged,
		// not the ledger's file blamed (update's recover says bbolt).
		if p := recover(); p != nil {
			err = fmt.Errorf("witnesses panicked: %v", p)
		}
	}()
	cp, err := noteCheckpoint(l.id, l.pub, sc)
	if err != nil {
		return fmt.Errorf("witnesses: %w", err)
	}
	signer, err := checkpoint.NewSigner(cp.Origin, l.opts.Key)
	if err != nil {
		return fmt.Errorf("witnesses: %w", err)
	}
	signed, err := checkpoint.Sign(cp, signer)
	if err != nil {
		return fmt.Errorf("witnesses: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), witnessTimeout(l.opts.WitnessTimeout))
	defer cancel()
	prove := func(old uint64) (tlog.TreeProof, error) { return l.treeProof(old, sc.Seq) }
	res, err := l.witnesses.Cosign(ctx, signed, prove)
	if err == nil {
		l.cosignedSeq.Store(sc.Seq)
	}
	if err != nil {
		// Short of K. A witness among the failures that told of a tree
		// this one does not extend did so unsigned (a 409 or a 422): it
		// is in the error, for the operator, and Open asks for the
		// signed account; it is not taken as evidence here.
		return fmt.Errorf("witnesses: %w", err)
	}
	for _, f := range res.Failures {
		// Beside a reached quorum, the same unsigned word keeps that
		// witness out of K and is told to the operator; it does not hold
		// back a write K others cosigned (else one witness, or whoever
		// sits between it and the ledger, could stop every write).
		var d *witness.DivergenceError
		if errors.As(f.Err, &d) {
			l.warn(fmt.Sprintf("ledger: %s: witnesses: %v (unsigned; open will check it)", l.path, d))
		}
	}
	return nil
}

// treeProof is the consistency proof from the tree of old entries to the
// tree of size entries, read from the stored tree.
func (l *Ledger) treeProof(old, size uint64) (tlog.TreeProof, error) {
	var p tlog.TreeProof
	err := l.view(func(tx engine.Tx) error {
		var err error
		p, err = tlog.ProveTree(int64(size), int64(old), ledgerChain.TreeReader(tx))
		return err
	})
	return p, err
}

// checkWitnesses asks every witness of q for its latest cosigned
// checkpoint of this ledger and compares each with the store's newest
// checkpoint, which must be signed with pub and cover the store's head
// (Open and VerifyChain have checked the tree under it against the
// entries). A witness ahead of it is audit.ErrRollbackDetected, one beside
// it audit.ErrForkDetected, each wrapping the witness's
// *witness.DivergenceError; fewer than N-K+1 answers is ErrWitnessAnswers.
func (l *Ledger) checkWitnesses(q *witness.Quorum, pub ed25519.PublicKey, timeout time.Duration) (witness.CheckResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		res, local, err := l.checkWitnessesOnce(ctx, q, pub)
		var d *witness.DivergenceError
		if err == nil || !l.shared || attempt == maxCosignRetries || !errors.As(err, &d) {
			return res, err
		}
		// On a shared store another process may have committed and had
		// the witnesses cosign between the read of the newest checkpoint
		// and their answers: asked again from a newer one, they agree.
		// A store that has not moved since is the answer.
		if moved, merr := l.storeMovedPast(local.Size); merr != nil || !moved {
			return res, err
		}
	}
}

// storeMovedPast reports whether the store's head is past seq.
func (l *Ledger) storeMovedPast(seq uint64) (bool, error) {
	var head audit.Head
	err := l.view(func(tx engine.Tx) (err error) {
		head, err = ledgerChain.ReadHead(tx)
		return err
	})
	return head.Seq > seq, err
}

// checkWitnessesOnce is one question of checkWitnesses, and the local
// checkpoint it compared with.
func (l *Ledger) checkWitnessesOnce(ctx context.Context, q *witness.Quorum, pub ed25519.PublicKey) (witness.CheckResult, checkpoint.Checkpoint, error) {
	var latest audit.SignedCheckpoint
	err := l.view(func(tx engine.Tx) error {
		head, err := ledgerChain.ReadHead(tx)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadFormat, l.path, err)
		}
		if latest, err = ledgerChain.LatestCheckpoint(tx); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadFormat, l.path, err)
		}
		// The witnesses' trees are compared with this one: it must be
		// the ledger's own, at the head, or a stale or foreign one
		// would make a rollback look like none (or the reverse).
		if err := latest.Verify(pub); err != nil {
			return fmt.Errorf("%w: %s: the store's newest checkpoint: %v", ErrBadFormat, l.path, err)
		}
		if latest.Receiver != l.id || latest.Seq != head.Seq || latest.Head != head.Hash {
			return fmt.Errorf("%w: %s: the store's newest checkpoint covers seq %d, the head is seq %d", ErrBadFormat, l.path, latest.Seq, head.Seq)
		}
		return nil
	})
	if err != nil {
		return witness.CheckResult{}, checkpoint.Checkpoint{}, fmt.Errorf("ledger: %s: witnesses: %w", l.path, err)
	}
	local, err := noteCheckpoint(l.id, pub, latest)
	if err != nil {
		return witness.CheckResult{}, local, err
	}
	res, err := q.Check(ctx, local.Origin, local, func(old, size uint64) (tlog.TreeProof, error) { return l.treeProof(old, size) })
	if err == nil {
		return res, local, nil
	}
	var d *witness.DivergenceError
	switch {
	case errors.As(err, &d):
		return res, local, fmt.Errorf("ledger: %s: %w: %w", l.path, d.AuditKind(), err)
	case errors.Is(err, witness.ErrTooFewAnswers):
		return res, local, fmt.Errorf("ledger: %s: %w", l.path, err)
	}
	return res, local, fmt.Errorf("ledger: %s: witnesses: %w", l.path, err)
}

// newQuorum makes the quorum of members for the notes of the ledger id
// signed with pub, or nil for none.
func newQuorum(id string, pub ed25519.PublicKey, members []witness.Member, k, faults int) (*witness.Quorum, error) {
	if len(members) == 0 {
		if k != 0 || faults != 0 {
			return nil, fmt.Errorf("%w: a witness quorum of %d without witnesses", ErrInvalidArgument, k)
		}
		return nil, nil
	}
	origin, err := checkpoint.LedgerOrigin(id, pub)
	if err != nil {
		return nil, err
	}
	logv, err := checkpoint.NewVerifier(origin, pub)
	if err != nil {
		return nil, err
	}
	q, err := witness.NewQuorum(witness.QuorumOptions{Members: members, Quorum: k, Faults: faults, Log: logv})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return q, nil
}

// warn reports msg through Options.Warn, or the standard logger.
func (l *Ledger) warn(msg string) {
	if l.opts.Warn != nil {
		l.opts.Warn(msg)
		return
	}
	log.Print(msg)
}

// idleAcknowledged is the acknowledgment of a call that committed nothing
// (a resumed claim, a containment record found as asked): what it
// answered from may come from a write whose round fell short of K, and
// the answer is no more acknowledged than that write was. With witnesses,
// it runs a round for the anchored checkpoint unless one this ledger knows
// K of them cosigned covers it; ErrNotAcknowledged if that falls short.
func (l *Ledger) idleAcknowledged() error {
	if l.witnesses == nil {
		return nil
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.anchor.Seq == 0 || l.cosignedSeq.Load() >= l.anchor.Seq {
		return nil
	}
	if err := l.cosign(l.anchor); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotAcknowledged, l.path, err)
	}
	return nil
}
