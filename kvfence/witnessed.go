package kvfence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
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
// cosigned the last acknowledged write: the database's freshness cannot be
// established, and it is not opened. It is witness.ErrTooFewAnswers, so
// errors.Is works with either name.
var ErrWitnessAnswers = witness.ErrTooFewAnswers

// WitnessStatus is one witness of Options.Witnesses as the receiver knows
// it.
type WitnessStatus struct {
	// Name is the witness's name in the quorum.
	Name string
	// Known says whether Size was learned (by Open's check or a cosign).
	Known bool
	// Size is the witness's latest cosigned tree size of this receiver,
	// as last learned.
	Size uint64
}

// Witnesses returns each witness of Options.Witnesses with its latest
// cosigned size as this receiver last learned it, in the order given, and
// K; nil and 0 without witnesses.
func (r *Receiver) Witnesses() ([]WitnessStatus, int) {
	q := r.witnesses
	if q == nil {
		return nil, 0
	}
	var out []WitnessStatus
	for _, name := range q.Members() {
		size, known := q.LastCosigned(name)
		out = append(out, WitnessStatus{Name: name, Known: known, Size: size})
	}
	return out, q.Threshold()
}

// witnessTimeout is Options.WitnessTimeout or its default.
func (r *Receiver) witnessTimeout() time.Duration {
	if r.opts.WitnessTimeout > 0 {
		return r.opts.WitnessTimeout
	}
	return DefaultWitnessTimeout
}

// noteCheckpoint returns sc as the checkpoint of the note the receiver
// signs for it (signedCheckpoint): the witnesses compare it with theirs
// byte for byte, extension lines included.
func (r *Receiver) noteCheckpoint(sc audit.SignedCheckpoint) (checkpoint.Checkpoint, error) {
	origin, err := checkpoint.ReceiverOrigin(r.id, r.pub)
	if err != nil {
		return checkpoint.Checkpoint{}, err
	}
	st := checkpoint.ReceiverState{Head: sc.Head, State: sc.State, EpochHighWater: sc.EpochHighWater, At: sc.At, Admission: sc.Admission}
	return checkpoint.Checkpoint{Origin: origin, Size: sc.Seq, Root: tlog.Hash(sc.Root), Extensions: st.Extensions()}, nil
}

// signNote signs sc as a note with the receiver's key.
func (r *Receiver) signNote(sc audit.SignedCheckpoint) ([]byte, error) {
	cp, err := r.noteCheckpoint(sc)
	if err != nil {
		return nil, err
	}
	signer, err := checkpoint.NewSigner(cp.Origin, r.opts.Key)
	if err != nil {
		return nil, err
	}
	return checkpoint.Sign(cp, signer)
}

// cosign asks the witnesses to cosign sc, the checkpoint an anchor write
// has just made durable, and returns nil once K of them did. It runs after
// the anchor write, never beside it: a witness keeps one body per tree
// size, and a checkpoint whose anchor write failed is signed again at the
// same size (with another time) when Open moves the anchor up; it must
// not have reached a witness.
func (r *Receiver) cosign(sc audit.SignedCheckpoint) error {
	signed, err := r.signNote(sc)
	if err != nil {
		return fmt.Errorf("witnesses: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.witnessTimeout())
	defer cancel()
	prove := func(old uint64) (tlog.TreeProof, error) { return r.treeProof(old, sc.Seq) }
	res, err := r.witnesses.Cosign(ctx, signed, prove)
	if err != nil {
		return fmt.Errorf("witnesses: %w", err)
	}
	for _, f := range res.Failures {
		// A quorum reached beside a witness that holds a tree this one
		// does not extend is still a divergence to raise: the write is
		// not acknowledged, and Open will name the witness.
		var d *witness.DivergenceError
		if errors.As(f.Err, &d) {
			return fmt.Errorf("witnesses: %w: %w", integrityKind(d), d)
		}
	}
	return nil
}

// treeProof is the consistency proof from the tree of old entries to the
// tree of size entries, read from the stored tree.
func (r *Receiver) treeProof(old, size uint64) (tlog.TreeProof, error) {
	var p tlog.TreeProof
	err := r.view(func(tx engine.Tx) error {
		var err error
		p, err = tlog.ProveTree(int64(size), int64(old), auditChain.TreeReader(tx))
		return err
	})
	return p, err
}

// integrityKind is the audit sentinel for a witness's divergence, so that
// IsIntegrityError and the CLI's exit code 4 see it as they see the
// anchor's.
func integrityKind(d *witness.DivergenceError) error {
	if errors.Is(d, witness.ErrRollbackDetected) {
		return audit.ErrRollbackDetected
	}
	return audit.ErrForkDetected
}

// checkWitnesses asks every witness for its latest cosigned checkpoint of
// this receiver and compares each with the database's newest checkpoint,
// whose tree Open (or VerifyChain) has checked against the entries. A
// witness ahead of it is ErrRollbackDetected, one beside it
// ErrForkDetected, each wrapping the witness's *witness.DivergenceError;
// fewer than N-K+1 answers is ErrWitnessAnswers.
func (r *Receiver) checkWitnesses(q *witness.Quorum, timeout time.Duration) (witness.CheckResult, error) {
	var latest audit.SignedCheckpoint
	if err := r.view(func(tx engine.Tx) (err error) {
		latest, err = auditChain.LatestCheckpoint(tx)
		return err
	}); err != nil {
		return witness.CheckResult{}, fmt.Errorf("kvfence: %s: witnesses: %w", r.path, err)
	}
	local, err := r.noteCheckpoint(latest)
	if err != nil {
		return witness.CheckResult{}, err
	}
	consumed, sa, found, err := r.consumedAdmission(latest)
	if err != nil {
		return witness.CheckResult{}, fmt.Errorf("kvfence: %s: witnesses: %w", r.path, err)
	}
	if found {
		// Witnesses still on the tree the recovery superseded are asked
		// to accept the recovered one with it (Quorum.SetRecovery).
		q.SetRecovery(consumed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := q.Check(ctx, local.Origin, local, func(old, size uint64) (tlog.TreeProof, error) { return r.treeProof(old, size) })
	if err == nil {
		return res, nil
	}
	var d *witness.DivergenceError
	if found && errors.As(err, &d) {
		err = excuseRecovered(res, q, sa)
		if err == nil {
			return res, nil
		}
	}
	switch {
	case errors.As(err, &d):
		return res, fmt.Errorf("kvfence: %s: %w: %w", r.path, integrityKind(d), err)
	case errors.Is(err, witness.ErrTooFewAnswers):
		return res, fmt.Errorf("kvfence: %s: %w", r.path, err)
	}
	return res, fmt.Errorf("kvfence: %s: witnesses: %w", r.path, err)
}

// newQuorum makes the quorum of members for this receiver's notes, or nil
// for none.
func (r *Receiver) newQuorum(members []witness.Member, k int) (*witness.Quorum, error) {
	if len(members) == 0 {
		if k != 0 {
			return nil, fmt.Errorf("%w: a witness quorum of %d without witnesses", ErrInvalidArgument, k)
		}
		return nil, nil
	}
	origin, err := checkpoint.ReceiverOrigin(r.id, r.pub)
	if err != nil {
		return nil, err
	}
	logv, err := checkpoint.NewVerifier(origin, r.pub)
	if err != nil {
		return nil, err
	}
	q, err := witness.NewQuorum(witness.QuorumOptions{Members: members, Quorum: k, Log: logv})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return q, nil
}

// metaRecoveryAdmission is the meta key of the signed admission that the
// newest recovery consumed, kept so that the receiver can show it to
// witnesses still on the tree it superseded.
var metaRecoveryAdmission = []byte("recovery_admission")

// consumedAdmission returns the signed admission the database keeps, if
// it is the one latest (the database's newest checkpoint, verified with
// the receiver's key) names as consumed: its SHA-256 and its time. Found
// is false for a checkpoint that names none, or names one whose bytes are
// not kept (a recovery from before they were).
func (r *Receiver) consumedAdmission(latest audit.SignedCheckpoint) (raw []byte, sa audit.SignedAdmission, found bool, err error) {
	if latest.Admission.IsZero() || latest.Receiver != r.id || latest.Verify(r.pub) != nil {
		return nil, sa, false, nil
	}
	if err := r.view(func(tx engine.Tx) (err error) {
		raw, err = tx.Get(bucketMeta, metaRecoveryAdmission)
		return err
	}); err != nil {
		return nil, sa, false, err
	}
	if raw == nil || sha256.Sum256(raw) != [32]byte(latest.Admission.SHA256) {
		return nil, sa, false, nil
	}
	sa, err = audit.ParseSignedAdmission(raw)
	if err != nil || sa.At != latest.Admission.At || sa.Receiver != r.id {
		// The hash is the checkpoint's, so these bytes are what the
		// receiver consumed; that they do not parse now is damage.
		return nil, sa, false, fmt.Errorf("%w: the kept recovery admission does not parse as the one consumed: %v", ErrBadFormat, err)
	}
	return bytes.Clone(raw), sa, true, nil
}

// excuseRecovered returns nil if every witness that diverged in res holds
// exactly the checkpoint that the recovery admission sa names for it (by
// its key name): the tree the recovery key decided to supersede, which the
// witness will give up for the recovered one when it accepts the
// admission. Any other divergence is returned, as is too few answers.
func excuseRecovered(res witness.CheckResult, q *witness.Quorum, sa audit.SignedAdmission) error {
	var left []error
	for _, a := range res.Members {
		var d *witness.DivergenceError
		if !a.Answered || !errors.As(a.Err, &d) {
			continue
		}
		if named, ok := sa.Named(q.KeyName(a.Member)); ok && named.Size == a.Size && named.Root == audit.Hash(a.Root) && a.Size != 0 {
			continue
		}
		left = append(left, a.Err)
	}
	if len(left) > 0 {
		return errors.Join(left...)
	}
	if res.Answers < res.Needed {
		return fmt.Errorf("%w: %d of the %d needed", witness.ErrTooFewAnswers, res.Answers, res.Needed)
	}
	return nil
}
