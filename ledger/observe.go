package ledger

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/witness"
)

// Event is one entry of the ledger's audit chain.
type Event struct {
	// Entry is the decoded entry. Its Decision holds the claim ref and its
	// Epoch the claim's generation (see the package comment).
	Entry audit.Entry
	// Hash is the entry's link hash, the one the next entry's Prev names.
	Hash audit.Hash
}

// Events calls fn with each audit entry from seq since on (from the start
// when since is 0 or 1), in chain order, until fn returns false. It reads
// one entry at a time, so a long chain is never held in memory. An entry
// that does not decode is ErrBadFormat; Events does not verify the links
// (VerifyChain does).
func (l *Ledger) Events(since uint64, fn func(Event) bool) error {
	// A read transaction may run again (on etcd, after a compaction): it
	// goes on after the last entry handed to fn, which sees each once.
	from := audit.SeqKey(since)
	return l.view(func(tx engine.Tx) error {
		return tx.Scan(bucketAudit, from, func(k, v []byte) error {
			e, err := audit.DecodeEntry(v)
			if err != nil {
				return fmt.Errorf("%w: %s: audit entry %x: %v", ErrBadFormat, l.path, k, err)
			}
			from = audit.SeqKey(e.Seq + 1)
			if !fn(Event{Entry: e, Hash: audit.HashEntry(v)}) {
				return engine.StopScan
			}
			return nil
		})
	})
}

// VerifyOptions configures VerifyChain.
type VerifyOptions struct {
	// Anchor is the ledger's anchor store to check against.
	Anchor audit.AnchorStore
	// PublicKey is the ledger's public key, from the operator's own
	// records: the key recorded in the ledger file is not trusted for this.
	PublicKey ed25519.PublicKey
	// MaxAge, if positive, reports an anchor older than this as stale.
	MaxAge time.Duration
	// LockTimeout is as in Options.
	LockTimeout time.Duration
	// Witnesses and WitnessQuorum are as in Options: once the chain and
	// tree verified, every witness is asked for its latest cosigned
	// checkpoint of the ledger (origin checkpoint.LedgerOrigin of the
	// ledger's id and PublicKey), and one ahead of the file is reported
	// as rollback_detected, one beside it as fork_detected. Fewer than
	// N-K+1 answers is an error (ErrWitnessAnswers): the check could not
	// be made.
	Witnesses []witness.Member
	// WitnessQuorum is K, 1 <= K <= len(Witnesses).
	WitnessQuorum int
	// WitnessFaults is F, as in Options.
	WitnessFaults int
	// WitnessTimeout is as in Options.
	WitnessTimeout time.Duration
}

// VerifyChain checks every entry of the ledger's audit chain against its
// anchor, as the receiver's verify-chain does, and reports the first
// problem; it changes neither. Its entries record approvals and claims, not
// a receiver's scopes, so there is no fence to replay (see
// audit.VerifyOptions.NoFenceReplay). It opens the file read-only and
// streams the chain. The error is for faults that prevent checking (a
// missing, locked or foreign file); problems are in the report.
func VerifyChain(path string, opts VerifyOptions) (audit.Report, error) {
	if opts.Anchor == nil {
		return audit.Report{}, fmt.Errorf("%w: an anchor store is required", ErrInvalidArgument)
	}
	// Opened without the anchor, so that a file the anchor refuses is
	// still read: the report, not Open, describes the problem.
	l, err := Open(path, &Options{ReadOnly: true, LockTimeout: opts.LockTimeout})
	if err != nil {
		return audit.Report{}, err
	}
	defer l.Close()
	return l.verifyChain(opts)
}

// VerifyChainEngine is VerifyChain for a ledger kept in e (OpenEngine). The
// ledger owns e from then on and closes it.
func VerifyChainEngine(e engine.Engine, opts VerifyOptions) (audit.Report, error) {
	if opts.Anchor == nil {
		e.Close()
		return audit.Report{}, fmt.Errorf("%w: an anchor store is required", ErrInvalidArgument)
	}
	l, err := openWith(e, "engine store", true, &Options{ReadOnly: true}, defect.Variant{})
	if err != nil {
		return audit.Report{}, err
	}
	defer l.Close()
	// Other processes may write a shared store meanwhile: the anchor is
	// read once, before the chain, so that the chain read after it is at
	// or past it unless the store was rolled back.
	a, err := opts.Anchor.Load()
	if err == nil {
		opts.Anchor = fixedAnchor{a}
	}
	return l.verifyChain(opts)
}

// fixedAnchor is an anchor read once, for a check that must not read it
// again. It cannot be written.
type fixedAnchor struct{ sc audit.SignedCheckpoint }

func (a fixedAnchor) Load() (audit.SignedCheckpoint, error) { return a.sc, nil }

func (a fixedAnchor) Store(*audit.SignedCheckpoint, audit.SignedCheckpoint) error {
	return fmt.Errorf("%w: a verification does not write the anchor", ErrInvalidArgument)
}

func (a fixedAnchor) Supersede(audit.SignedCheckpoint, audit.SignedCheckpoint) error {
	return fmt.Errorf("%w: a verification does not write the anchor", ErrInvalidArgument)
}

// verifyChain is VerifyChain on an open, read-only ledger.
func (l *Ledger) verifyChain(opts VerifyOptions) (audit.Report, error) {
	// A quorum that cannot be made is refused before the chain is read.
	q, err := newQuorum(l.id, opts.PublicKey, opts.Witnesses, opts.WitnessQuorum, opts.WitnessFaults)
	if err != nil {
		return audit.Report{}, err
	}
	if _, fixed := opts.Anchor.(fixedAnchor); !fixed {
		// The tree check below compares the anchor that the chain was
		// verified against, not one read again after it.
		if a, err := opts.Anchor.Load(); err == nil {
			opts.Anchor = fixedAnchor{a}
		}
	}
	var rep audit.Report
	err = l.view(func(tx engine.Tx) error {
		var scanErr error
		entries := func(yield func(k, v []byte) bool) {
			scanErr = tx.Scan(bucketAudit, nil, func(k, v []byte) error {
				if !yield(k, v) {
					return engine.StopScan
				}
				return nil
			})
		}
		var err error
		rep, err = audit.Verify(audit.VerifyOptions{Entries: iter.Seq2[[]byte, []byte](entries), Anchor: opts.Anchor,
			PublicKey: opts.PublicKey, Receiver: l.id, MaxAge: opts.MaxAge, NoFenceReplay: true})
		if err == nil {
			err = scanErr
		}
		if err != nil || !rep.OK() {
			return err
		}
		// Every commit signs its head into the store with its entries:
		// a head no checkpoint signed with the ledger's key covers (an
		// entry appended past the anchor without the key) is not the
		// ledger's, though it links to the anchored chain.
		sc, cerr := ledgerChain.LatestCheckpoint(tx)
		if cerr == nil {
			cerr = sc.Verify(opts.PublicKey)
		}
		if cerr == nil && (sc.Receiver != l.id || sc.Seq != rep.Head.Seq || sc.Head != rep.Head.Hash) {
			cerr = fmt.Errorf("the store's newest checkpoint covers seq %d, the chain ends at seq %d", sc.Seq, rep.Head.Seq)
		}
		if cerr != nil {
			rep.Fail(audit.ProblemStateMismatch, fmt.Errorf("%w: the chain's head is not covered by a checkpoint signed with the ledger's key: %v",
				audit.ErrStateMismatch, cerr))
			return nil
		}
		// The chain and its newest checkpoint are the ledger's: now the
		// tree beside them must be the one the entries make, with the
		// roots the anchor and that checkpoint sign.
		a, err := opts.Anchor.Load()
		if err != nil {
			return err
		}
		if terr := checkTree(tx, a.Checkpoint); errors.Is(terr, audit.ErrTreeMismatch) {
			rep.Fail(audit.ProblemTreeMismatch, terr)
		} else if terr != nil {
			return terr
		}
		return nil
	})
	if err != nil || !rep.OK() || q == nil {
		return rep, err
	}
	return l.verifyWitnesses(rep, q, opts)
}

// verifyWitnesses is VerifyChain's last step: the witnesses' latest
// checkpoints against the store's newest one, whose chain and tree have
// verified under opts.PublicKey.
func (l *Ledger) verifyWitnesses(rep audit.Report, q *witness.Quorum, opts VerifyOptions) (audit.Report, error) {
	_, err := l.checkWitnesses(q, opts.PublicKey, witnessTimeout(opts.WitnessTimeout))
	switch {
	case err == nil:
	case errors.Is(err, audit.ErrRollbackDetected):
		rep.Fail(audit.ProblemRollbackDetected, err)
	case errors.Is(err, audit.ErrForkDetected):
		rep.Fail(audit.ProblemForkDetected, err)
	default:
		return rep, err
	}
	return rep, nil
}
