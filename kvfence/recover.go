package kvfence

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"iter"
	"math"
	"time"

	"github.com/kvfence/kvfence/audit"
	bolt "go.etcd.io/bbolt"
)

// KindRecovered is the audit kind of a recovery admission's entry.
const KindRecovered = audit.KindRecovered

// Questioned describes a database whose history disagrees with its anchor,
// as a recovery operator needs to see it before signing an admission.
type Questioned struct {
	Receiver string
	// Anchor is the anchor's position; Head the database's newest entry.
	Anchor audit.Head
	Head   audit.Head
	// EpochHighWater is the highest epoch the anchor vouches for.
	EpochHighWater uint64
	// AnchorDamage describes a damaged slot beside the anchor, if the
	// anchor store reports one (audit.DamageReporter); nil otherwise. A
	// recovery supersedes the anchor above, and its write overwrites the
	// damaged slot.
	AnchorDamage *audit.SlotDamage
}

// Inspect reads a receiver's database head and its anchor without checking
// one against the other and without changing either, for preparing a
// recovery admission. It verifies the anchor's signature under the
// receiver's recorded key.
func Inspect(path string, anchor audit.AnchorStore) (Questioned, error) {
	r, err := Open(path, &Options{ReadOnly: true, anchorUnchecked: true})
	if err != nil {
		return Questioned{}, err
	}
	defer r.Close()
	a, damage, err := audit.LoadWithDamage(anchor)
	if err != nil {
		return Questioned{}, fmt.Errorf("kvfence: %s: anchor: %w", path, err)
	}
	if err := a.Verify(r.pub); err != nil {
		return Questioned{}, fmt.Errorf("kvfence: %s: anchor: %w", path, err)
	}
	return Questioned{Receiver: r.id, Anchor: audit.Head{Seq: a.Seq, Hash: a.Head}, Head: r.head,
		EpochHighWater: a.EpochHighWater, AnchorDamage: damage}, nil
}

// RecoverOptions configures Recover.
type RecoverOptions struct {
	// Key is the receiver's signing key, for the new anchor.
	Key ed25519.PrivateKey
	// Anchor is the receiver's anchor store.
	Anchor audit.AnchorStore
	// RecoveryKey is the operator's copy of the recovery public key. It
	// must equal the one recorded at Init: a database cannot vouch for
	// its own recovery key.
	RecoveryKey ed25519.PublicKey
	// Now is the receiver's clock. Nil means time.Now.
	Now func() time.Time
	// LockTimeout is as in Options.
	LockTimeout time.Duration
}

// RecoverResult reports an applied recovery.
type RecoverResult struct {
	AuditSeq uint64
	// Scopes lists every scope's epochs; all are now held.
	Scopes []HeldScope
	Anchor audit.Head
}

// Recover re-admits a database whose history was questioned (a rollback or
// fork), on the strength of an admission signed by the separately held
// recovery key for exactly this receiver, anchor and database head. In one
// transaction it appends a "recovered" entry, sets every scope's epoch above
// both the anchor's epoch high-water and its own, holds every scope and
// clears every active grant; then it supersedes the anchor. A grant minted
// before the recovery can therefore never be used again.
func Recover(path string, admission []byte, opts RecoverOptions) (RecoverResult, error) {
	if len(opts.RecoveryKey) != ed25519.PublicKeySize {
		return RecoverResult{}, fmt.Errorf("%w: the recovery public key is required", ErrInvalidArgument)
	}
	sa, err := audit.ParseSignedAdmission(admission)
	if err != nil {
		return RecoverResult{}, err
	}
	if err := sa.Verify(opts.RecoveryKey); err != nil {
		return RecoverResult{}, err
	}
	r, err := Open(path, &Options{Key: opts.Key, Now: opts.Now, LockTimeout: opts.LockTimeout, anchorUnchecked: true})
	if err != nil {
		return RecoverResult{}, err
	}
	defer r.Close()
	if r.recoveryPub == nil || !r.recoveryPub.Equal(opts.RecoveryKey) {
		return RecoverResult{}, fmt.Errorf("%w: the recovery key given is not the one recorded at init", audit.ErrBadSignature)
	}
	old, err := opts.Anchor.Load()
	if err != nil {
		return RecoverResult{}, fmt.Errorf("kvfence: %s: anchor: %w", path, err)
	}
	if err := old.Verify(r.pub); err != nil {
		return RecoverResult{}, fmt.Errorf("kvfence: %s: anchor: %w", path, err)
	}
	if err := sa.Admission.Check(r.id, audit.Head{Seq: old.Seq, Hash: old.Head}, r.head); err != nil {
		return RecoverResult{}, err
	}
	var res RecoverResult
	var sc audit.SignedCheckpoint
	err = r.db.Update(func(tx *bolt.Tx) error {
		w := &wtx{tx: tx, chain: audit.NewChain(r.head), now: r.opts.Now(), state: r.state, stateSum: r.stateSum}
		res = RecoverResult{}
		c := tx.Bucket(bucketControl).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			scope := string(k)
			ctl, err := w.control(scope)
			if err != nil {
				return err
			}
			base := max(old.EpochHighWater, ctl.Epoch, epochHighWater(tx))
			if base == math.MaxUint64 {
				return fmt.Errorf("%w: %s", ErrEpochExhausted, scope)
			}
			res.Scopes = append(res.Scopes, HeldScope{Scope: scope, PreviousEpoch: ctl.Epoch, Epoch: base + 1})
			ctl.Epoch, ctl.Mode, ctl.ActiveGrant = base+1, ModeHeld, ""
			ctl.HoldRequestedAt, ctl.HoldCommittedAt = w.now.UnixNano(), w.now.UnixNano()
			if err := w.putControl(scope, ctl); err != nil {
				return err
			}
		}
		for _, s := range res.Scopes {
			if err := w.raiseEpochHighWater(s.Epoch); err != nil {
				return err
			}
		}
		seq, err := w.appendAudit(&audit.Entry{Kind: KindRecovered, Epoch: epochHighWater(tx),
			Note: fmt.Sprintf("superseded anchor %v; admitted head %v; reason: %s",
				sa.SupersededAnchor, sa.AdmittedHead, sa.Reason)})
		if err != nil {
			return err
		}
		res.AuditSeq = seq
		sc, err = w.checkpoint(r.id, opts.Key)
		return err
	})
	if err != nil {
		return RecoverResult{}, err
	}
	if err := opts.Anchor.Supersede(old, sc); err != nil {
		return RecoverResult{}, fmt.Errorf("kvfence: %s: recovered, but the anchor was not replaced: %w", path, err)
	}
	res.Anchor = audit.Head{Seq: sc.Seq, Hash: sc.Head}
	return res, nil
}

// VerifyOptions configures VerifyChain.
type VerifyOptions struct {
	// Anchor is the anchor store to check against.
	Anchor audit.AnchorStore
	// PublicKey is the receiver's public key, from the operator (not from
	// the database).
	PublicKey ed25519.PublicKey
	// MaxAge, if positive, reports an anchor older than this as stale.
	MaxAge time.Duration
	// LockTimeout is as in Options.
	LockTimeout time.Duration
	// Progress, if set, is called with the number of entries read so far
	// every ProgressEvery entries.
	Progress func(entries uint64)
}

// ProgressEvery is how many entries VerifyChain reads between calls of
// VerifyOptions.Progress.
const ProgressEvery = 100_000

// VerifyChain checks every entry of the receiver's audit chain against its
// anchor and reports the first problem; it changes neither. It also
// replays each scope's control state from the chain and reports an applied
// mutation under a grant that was not the scope's active grant as
// audit.ProblemFenceViolation: the evidence of a receiver that skipped
// checks 2-4 (see audit.Verify). It opens the database read-only and
// streams the chain, so memory grows with the number of scopes, not with
// the length of the log. The error is for faults that prevent checking (a
// missing or locked database); problems are in the report.
func VerifyChain(path string, opts VerifyOptions) (audit.Report, error) {
	r, err := Open(path, &Options{ReadOnly: true, LockTimeout: opts.LockTimeout, anchorUnchecked: true})
	if err != nil {
		return audit.Report{}, err
	}
	defer r.Close()
	var rep audit.Report
	err = r.view(func(tx *bolt.Tx) error {
		entries := func(yield func(k, v []byte) bool) {
			c := tx.Bucket(bucketAudit).Cursor()
			var n uint64
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if !yield(k, v) {
					return
				}
				if n++; opts.Progress != nil && n%ProgressEvery == 0 {
					opts.Progress(n)
				}
			}
		}
		var err error
		rep, err = audit.Verify(audit.VerifyOptions{Entries: iter.Seq2[[]byte, []byte](entries), Anchor: opts.Anchor,
			PublicKey: opts.PublicKey, Receiver: r.id, MaxAge: opts.MaxAge})
		return err
	})
	if err != nil || !rep.OK() {
		return rep, err
	}
	// The chain is the anchored one; now the state beside it must be the
	// state that the head's checkpoint commits to. The receiver's key here
	// is the one recorded in the database: the anchor has just verified
	// under the operator's key, so they must agree, or the state check
	// fails on the database's own checkpoint.
	anchor, err := opts.Anchor.Load()
	if err != nil {
		return rep, err
	}
	r.pub = opts.PublicKey
	if _, err := r.checkState(&anchor); errors.Is(err, audit.ErrStateMismatch) {
		rep.Fail(audit.ProblemStateMismatch, err)
	} else if err != nil {
		return rep, err
	}
	return rep, nil
}
