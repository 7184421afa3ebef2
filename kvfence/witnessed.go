package kvfence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
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
// it: its name, and its latest cosigned size if learned.
type WitnessStatus = witness.MemberStatus

// Witnesses returns each witness of Options.Witnesses with its latest
// cosigned size as this receiver last learned it, in the order given, and
// K; nil and 0 without witnesses.
func (r *Receiver) Witnesses() ([]WitnessStatus, int) {
	q := r.witnesses
	if q == nil {
		return nil, 0
	}
	return q.Status(), q.Threshold()
}

// cosignedNote is the newest checkpoint note the witnesses cosigned in
// this process, with their cosignature lines.
type cosignedNote struct {
	size uint64
	note []byte
}

// CosignedCheckpoint returns the newest checkpoint note that K witnesses
// cosigned since Open, with their cosignature lines after the receiver's
// signature, and its tree size; ErrNotFound if there is none yet (no
// write since Open, or no witnesses).
func (r *Receiver) CosignedCheckpoint() ([]byte, uint64, error) {
	c := r.cosigned.Load()
	if c == nil {
		return nil, 0, fmt.Errorf("%w: no checkpoint cosigned by the witnesses since the receiver opened", ErrNotFound)
	}
	return bytes.Clone(c.note), c.size, nil
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
	return checkpoint.FromSigned(origin, sc), nil
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

// cosign asks the witnesses to cosign sc, a checkpoint the database holds
// (its anchor write beside the round, or done), and returns nil once K of
// them did. A witness keeps one body per tree size: sc is only ever the
// stored checkpoint of its size, which Open anchors as it is after a
// failed anchor write (refreshStored), never a new signature of it.
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
	cosigned := append(signed, res.Lines()...)
	r.cosigned.Store(&cosignedNote{size: sc.Seq, note: cosigned})
	for _, f := range res.Failures {
		// A 409 above this size or a 422 is the witness's unsigned word:
		// it keeps that witness out of K, and is told to the operator,
		// but does not hold back a write that K others cosigned (else
		// one witness, or whoever sits between it and the receiver, could
		// stop every write). Open asks for the signed account.
		var d *witness.DivergenceError
		if errors.As(f.Err, &d) {
			r.opts.Warn(fmt.Sprintf("kvfence: %s: witnesses: %v (unsigned; open will check it)", r.path, d))
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

// checkWitnesses asks every witness for its latest cosigned checkpoint of
// this receiver and compares each with the database's newest checkpoint,
// whose tree Open (or VerifyChain) has checked against the entries. A
// witness ahead of it is ErrRollbackDetected, one beside it
// ErrForkDetected, each wrapping the witness's *witness.DivergenceError;
// fewer than N-K+1 answers is ErrWitnessAnswers. After a recovery (the
// newest checkpoint names the admission the database keeps), a witness
// still on the superseded tree is shown the admission when the receiver
// holds its key (witness.Quorum.Readmit), and is forgiven only if it
// accepts it; without the key, only if the admission verifies with
// recoveryKey, the caller's copy of the recovery public key (nil: not
// forgiven).
func (r *Receiver) checkWitnesses(q *witness.Quorum, timeout time.Duration, recoveryKey ed25519.PublicKey) (witness.CheckResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		res, local, err := r.checkWitnessesOnce(ctx, q, recoveryKey)
		var d *witness.DivergenceError
		if err == nil || r.file || attempt == maxCosignRetries || !errors.As(err, &d) {
			return res, err
		}
		// On a store other processes write (etcd), one may have
		// committed and had the witnesses cosign between the read of the
		// newest checkpoint and their answers: asked again from the newer
		// one, they agree. A store that has not moved is the answer.
		var head audit.Head
		if herr := r.view(func(tx engine.Tx) (err error) {
			head, err = auditChain.ReadHead(tx)
			return err
		}); herr != nil || head.Seq <= local.Size {
			return res, err
		}
	}
}

// maxCosignRetries bounds, on a store other processes write, the rounds
// cosignCovering runs again for a newer anchor, and the questions
// checkWitnesses asks again for a newer checkpoint.
const maxCosignRetries = 8

// cosignCovering is cosign of sc, the checkpoint whose anchor write this
// commit made. On a store other processes write, a round can find the
// witnesses already at another process's newer checkpoint (a 409 above
// sc's size): if the anchor now holds a newer checkpoint of this chain,
// it covers this commit, and K cosignatures of it acknowledge the commit.
// A witness ahead of every anchor is still refused.
func (r *Receiver) cosignCovering(sc audit.SignedCheckpoint) error {
	err := r.cosign(sc)
	for range maxCosignRetries {
		if err == nil || r.file || r.opts.Anchor == nil {
			return err
		}
		a, lerr := r.opts.Anchor.Load()
		if lerr != nil || a.Seq <= sc.Seq || a.Receiver != r.id || !r.durableAnchor(a) || a.Verify(r.pub) != nil {
			return err
		}
		if herr := r.view(func(tx engine.Tx) error {
			h, err := auditChain.HashAt(tx, a.Seq)
			if err == nil && h != a.Head {
				err = fmt.Errorf("%w: the anchor's seq %d has another hash in the store", audit.ErrForkDetected, a.Seq)
			}
			return err
		}); herr != nil {
			return err
		}
		sc = a
		err = r.cosign(sc)
	}
	return err
}

// checkWitnessesOnce is one question of checkWitnesses, and the local
// checkpoint it compared the answers with.
func (r *Receiver) checkWitnessesOnce(ctx context.Context, q *witness.Quorum, recoveryKey ed25519.PublicKey) (witness.CheckResult, checkpoint.Checkpoint, error) {
	var latest audit.SignedCheckpoint
	if err := r.view(func(tx engine.Tx) (err error) {
		if latest, err = auditChain.LatestCheckpoint(tx); err != nil {
			return err
		}
		// What the witnesses are compared with must be this receiver's
		// own signed statement of the stored chain and tree: on a store
		// other processes write, it may be newer than what Open checked.
		if latest.Receiver != r.id || latest.Verify(r.pub) != nil {
			return fmt.Errorf("%w: the database's newest checkpoint is not signed by this receiver", audit.ErrBadSignature)
		}
		h, err := auditChain.HashAt(tx, latest.Seq)
		if err != nil {
			return err
		}
		if h != latest.Head {
			return fmt.Errorf("%w: the newest checkpoint's seq %d has another hash in the store", audit.ErrForkDetected, latest.Seq)
		}
		return auditChain.CheckRoot(tx, latest.Checkpoint, "the database's newest checkpoint")
	}); err != nil {
		return witness.CheckResult{}, checkpoint.Checkpoint{}, fmt.Errorf("kvfence: %s: witnesses: %w", r.path, err)
	}
	local, err := r.noteCheckpoint(latest)
	if err != nil {
		return witness.CheckResult{}, local, err
	}
	consumed, sa, found, err := r.consumedAdmission(latest)
	if err != nil {
		return witness.CheckResult{}, local, fmt.Errorf("kvfence: %s: witnesses: %w", r.path, err)
	}
	if found {
		// Witnesses still on the tree the recovery superseded are asked
		// to accept the recovered one with it (Quorum.SetRecovery).
		q.SetRecovery(consumed)
	}
	res, err := q.Check(ctx, local.Origin, local, func(old, size uint64) (tlog.TreeProof, error) { return r.treeProof(old, size) })
	if err == nil {
		return res, local, nil
	}
	var d *witness.DivergenceError
	if found && errors.As(err, &d) {
		switch {
		case r.opts.Key != nil:
			// A witness still on the tree the recovery superseded is
			// shown the admission, and judges it with the recovery key
			// it trusts: what the database keeps is the receiver's
			// word, and whoever restored the database may hold the
			// receiver's key.
			var signed []byte
			if signed, err = r.signNote(latest); err == nil {
				prove := func(old uint64) (tlog.TreeProof, error) { return r.treeProof(old, latest.Seq) }
				err = q.Readmit(ctx, signed, prove, &res)
			}
		case recoveryKey != nil:
			// Without the key nothing can be shown to the witnesses: the
			// admission is judged here, by the recovery key the caller
			// holds, never by one the database records, and so is what
			// a witness would check of the tree.
			if err = excuseRecovered(res, q, sa, recoveryKey); err == nil {
				err = r.checkAdmittedTree(sa, latest.Seq)
			}
		}
		if err == nil {
			return res, local, nil
		}
	}
	switch {
	case errors.As(err, &d):
		return res, local, fmt.Errorf("kvfence: %s: %w: %w", r.path, d.AuditKind(), err)
	case errors.Is(err, witness.ErrTooFewAnswers):
		return res, local, fmt.Errorf("kvfence: %s: %w", r.path, err)
	}
	return res, local, fmt.Errorf("kvfence: %s: witnesses: %w", r.path, err)
}

// newQuorum makes the quorum of members for this receiver's notes, or nil
// for none.
func (r *Receiver) newQuorum(members []witness.Member, k, faults int) (*witness.Quorum, error) {
	if len(members) == 0 {
		if k != 0 || faults != 0 {
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
	q, err := witness.NewQuorum(witness.QuorumOptions{Members: members, Quorum: k, Faults: faults, Log: logv})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return q, nil
}

// refreshStored moves a lagging anchor up to the database's newest
// checkpoint and, with witnesses, has them cosign it. That checkpoint is
// read again here, for a store other processes write may have moved past
// the head Open read, and must be this receiver's, signed with its key,
// at a seq of this chain whose root is the stored tree's, and at or past
// the head Open checked; the anchor's own rules (CheckAdvance) apply as
// for any write.
func (r *Receiver) refreshStored() error {
	var latest audit.SignedCheckpoint
	if err := r.view(func(tx engine.Tx) (err error) {
		if latest, err = auditChain.LatestCheckpoint(tx); err != nil {
			return err
		}
		if latest.Receiver != r.id || latest.Verify(r.pub) != nil || latest.Seq < r.head.Seq {
			return fmt.Errorf("%w: the database's newest checkpoint (seq %d) is not this receiver's signed checkpoint of its head (seq %d)",
				ErrBadFormat, latest.Seq, r.head.Seq)
		}
		h, err := auditChain.HashAt(tx, latest.Seq)
		if err != nil {
			return err
		}
		if h != latest.Head {
			return fmt.Errorf("%w: the newest checkpoint's seq %d has another hash in the store", audit.ErrForkDetected, latest.Seq)
		}
		return auditChain.CheckRoot(tx, latest.Checkpoint, "the database's newest checkpoint")
	}); err != nil {
		return fmt.Errorf("kvfence: %s: %w", r.path, err)
	}
	err := r.advanceAnchor(latest)
	if err == nil && r.witnesses != nil {
		err = r.cosignCovering(latest)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: moving the anchor up at open: %w", ErrNotAcknowledged, r.path, err)
	}
	return nil
}

// keepCosigned keeps, as CosignedCheckpoint, the database's newest
// checkpoint with the cosignatures of the witnesses whose answer to Open's
// question was that very checkpoint (each cosigned at the time of the
// answer), if K of them were: a proof printed by a receiver that has not
// written since it opened is then to a cosigned note too. It needs the
// signing key; without it, or short of K, it keeps nothing.
func (r *Receiver) keepCosigned(res witness.CheckResult) {
	if r.opts.Key == nil || r.witnesses == nil {
		return
	}
	var latest audit.SignedCheckpoint
	if err := r.view(func(tx engine.Tx) (err error) {
		latest, err = auditChain.LatestCheckpoint(tx)
		return err
	}); err != nil {
		return
	}
	signed, err := r.signNote(latest)
	if err != nil {
		return
	}
	body, _, _ := bytes.Cut(signed, []byte("\n\n"))
	body = append(body, '\n')
	verifiers := map[string]*checkpoint.CosignatureVerifier{}
	for _, m := range r.opts.Witnesses {
		verifiers[m.Name] = m.Verifier
	}
	var lines []byte
	n := 0
	for _, a := range res.Members {
		v := verifiers[a.Member]
		if !a.Answered || a.Size != latest.Seq || a.Note == nil || v == nil {
			continue
		}
		theirs, sigs, ok := bytes.Cut(a.Note, []byte("\n\n"))
		if !ok || !bytes.Equal(append(theirs, '\n'), body) {
			continue
		}
		for _, line := range strings.SplitAfter(string(sigs), "\n") {
			if line == "" {
				continue
			}
			if _, err := v.VerifyLine(body, line); err == nil {
				if !strings.HasSuffix(line, "\n") {
					line += "\n"
				}
				lines = append(lines, line...)
				n++
				break
			}
		}
	}
	if n >= r.witnesses.Threshold() {
		r.cosigned.Store(&cosignedNote{size: latest.Seq, note: append(signed, lines...)})
	}
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

// excuseRecovered returns nil if sa is signed by recoveryKey, the
// caller's copy of the recovery public key, and every witness that
// diverged in res holds exactly the checkpoint that sa names for it (by
// its key name): the tree the recovery key decided to supersede, which the
// witness gives up for the recovered one when it accepts the admission.
// Any other divergence is returned, as is too few answers.
func excuseRecovered(res witness.CheckResult, q *witness.Quorum, sa audit.SignedAdmission, recoveryKey ed25519.PublicKey) error {
	if err := sa.Verify(recoveryKey); err != nil {
		var left []error
		for _, a := range res.Members {
			if a.Answered && a.Err != nil {
				left = append(left, a.Err)
			}
		}
		return fmt.Errorf("%w (the kept recovery admission is not the given recovery key's: %v)", errors.Join(left...), err)
	}
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

// checkAdmittedTree refuses, as a witness would, a database whose newest
// checkpoint (size) is not past the admission's admitted seq, or whose
// tree at that seq is not the admitted root: the stored tree's records
// have been checked against the entries and that checkpoint's root, so
// its older roots are the chain's.
func (r *Receiver) checkAdmittedTree(sa audit.SignedAdmission, size uint64) error {
	admitted := sa.AdmittedHead.Seq
	if size <= admitted {
		return fmt.Errorf("%w: the database's newest checkpoint (size %d) does not extend the admitted seq %d",
			audit.ErrForkDetected, size, admitted)
	}
	root, ok, err := r.admittedRoot(sa)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: the database's tree at the admitted seq %d has root %v, not the admitted %v",
			audit.ErrForkDetected, admitted, root, tlog.Hash(sa.AdmittedRoot))
	}
	return nil
}

// admittedRoot returns the root of the database's audit tree at sa's
// admitted seq, and whether it is the root sa admits.
func (r *Receiver) admittedRoot(sa audit.SignedAdmission) (root tlog.Hash, ok bool, err error) {
	err = r.view(func(tx engine.Tx) (err error) {
		root, err = auditChain.TreeHash(tx, sa.AdmittedHead.Seq)
		return err
	})
	return root, err == nil && audit.Hash(root) == sa.AdmittedRoot, err
}

// cosignIdle acknowledges a batch that committed nothing (every call
// answered from what the store held: a repeated hold, an already applied
// submit) only if K witnesses cosigned a checkpoint covering the store it
// answered from: that state may come from a write whose round fell short
// of K, and an answer from it is no more acknowledged than the write was.
// It runs a round for the anchored checkpoint when no cosigned one this
// receiver knows covers it. The caller holds amu.
func (r *Receiver) cosignIdle(batch []*call) {
	var answered []*call
	for _, c := range batch {
		if c.err == nil {
			answered = append(answered, c)
		}
	}
	if len(answered) == 0 {
		return
	}
	sc := r.anchorNow()
	if c := r.cosigned.Load(); c != nil && c.size >= sc.Seq {
		return
	}
	var err error
	if sc.Seq == 0 || !r.durableAnchor(sc) {
		err = fmt.Errorf("witnesses: no durable anchored checkpoint to have cosigned")
	} else {
		err = r.cosignCovering(sc)
	}
	if err != nil {
		r.notAcknowledged(answered, err)
	}
}
