package audit

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"time"
)

// Problem is a stable code for the first integrity problem Verify found.
// The codes are part of the CLI's JSON output; they are never renamed.
type Problem string

// The problem codes, in the order in which Verify reports them: first the
// anchor, then the chain entry by entry (where a fork is found at the
// anchored seq), then the chain's end (where a damaged anchor slot is
// judged too); then a fence violation found by the replay, and last the
// anchor's age. ProblemAnchorDamaged is an anchor store that holds no
// readable anchor: for a FileAnchor, a file without a valid slot, with two
// slots of one generation, or of the wrong size.
const (
	ProblemOK               Problem = "ok"
	ProblemAnchorMissing    Problem = "anchor_missing"
	ProblemAnchorDamaged    Problem = "anchor_damaged"
	ProblemBadSignature     Problem = "bad_signature"
	ProblemReceiverMismatch Problem = "receiver_mismatch"
	ProblemBadEntry         Problem = "bad_entry"
	ProblemSeqGap           Problem = "seq_gap"
	ProblemBrokenLink       Problem = "broken_link"
	ProblemForkDetected     Problem = "fork_detected"
	ProblemRollbackDetected Problem = "rollback_detected"
	ProblemFenceViolation   Problem = "fence_violation"
	ProblemAnchorStale      Problem = "anchor_stale"
	ProblemStateMismatch    Problem = "state_mismatch"
)

// VerifyOptions says what Verify checks and against what.
type VerifyOptions struct {
	// Entries yields the stored chain in key order, as a bbolt cursor over
	// the audit bucket does: key SeqKey(seq), value the encoded entry.
	// Verify does not keep either slice past the yield, so they may point
	// into a read transaction's memory.
	Entries iter.Seq2[[]byte, []byte]
	// Anchor holds the signed head that the chain must contain.
	Anchor AnchorStore
	// PublicKey is the receiver's key, which must have signed the anchor.
	PublicKey ed25519.PublicKey
	// Receiver is the receiver id that the anchor must name.
	Receiver string
	// MaxAge, if positive, makes an anchor older than MaxAge a problem
	// (anchor_stale). A valid but stale anchor is what an attacker who
	// restores the database together with an old anchor presents; only a
	// bound on age tells it apart, and only if the receiver writes often.
	MaxAge time.Duration
	// Now is the clock for MaxAge. Nil means time.Now.
	Now func() time.Time
	// NoFenceReplay turns off the replay of each scope's control state
	// (see Verify). It is for chains that are not a receiver's, such as
	// the execution ledger's, whose entries do not record scopes, holds
	// and grants.
	NoFenceReplay bool
}

// Report is the outcome of Verify.
type Report struct {
	// Problem is ProblemOK or the first problem found.
	Problem Problem
	// Detail describes the problem so that it stands on its own as
	// evidence: for a rollback or fork, both seqs, both hashes in hex and
	// the anchor's time. It is empty when Problem is ok.
	Detail string
	// Entries and Head describe the part of the chain that verified: all
	// of it, or the entries before the one with a problem (for a fork, up
	// to and including the anchored seq).
	Entries uint64
	Head    Head // the newest entry that verified
	// Anchor is the anchor's position as read from the anchor, verified or
	// not; zero if there is no readable anchor.
	Anchor Head
	// AnchorDamage describes a damaged slot beside the anchor, when the
	// anchor store is a DamageReporter that found one; nil otherwise. It
	// is set whatever the problem, and with ProblemOK too: damage that a
	// crash can explain is not a problem, but it is never left unsaid.
	AnchorDamage *SlotDamage

	err error
}

// OK reports whether Verify found no problem.
func (r Report) OK() bool { return r.Problem == ProblemOK }

// Err returns nil if r is ok, and otherwise an error that wraps the
// sentinel for r.Problem (ErrRollbackDetected, ErrBrokenLink, …;
// ErrBadAnchor for anchor_damaged); a rollback or fork is, or wraps, a
// *RollbackError or *ForkError, or is a *SuspectedRollbackError.
func (r Report) Err() error { return r.err }

// Verify checks a whole chain against its anchor, streaming. It checks the
// anchor's signature and receiver; that every entry decodes canonically, is
// stored under its own seq, and links to the previous entry by hash; that
// seqs run from 1 with no gap; that the chain's hash at the anchored seq is
// the anchored head; and that the chain reaches the anchored seq. If the
// anchor store is a DamageReporter, a damaged slot is reported in the
// Report and judged by SlotDamage.Check against the whole chain.
//
// Unless opts.NoFenceReplay is set, it also replays each scope's control
// state from the receiver's entries (scope_created, activate, hold,
// recovered) and reports an applied submit entry whose scope, epoch and
// grant were not the scope's active grant at that point, or whose scope was
// held (fence_violation): the evidence of a receiver that skipped checks
// 2-4, in its own chain. Entries whose outcome is already_applied or denied
// change nothing and are not checked. A fence violation is reported only
// when the chain itself verifies, since only an intact chain is evidence;
// Entries and Head then cover the whole chain, and the error is a
// *FenceViolationError.
//
// Memory does not grow with the chain's length: the walk keeps only the
// previous entry's position, and the replay one small record per scope, so
// it grows with the number of scopes, not of entries. It reports the first
// problem in the Report. The error is only for faults that prevent
// verifying: bad options, or an anchor store that cannot be read, which for
// a FileAnchor includes a path that is not a regular file or is writable by
// others.
func Verify(opts VerifyOptions) (Report, error) {
	switch {
	case opts.Entries == nil || opts.Anchor == nil:
		return Report{}, errors.New("audit: verify: Entries and Anchor are required")
	case opts.Receiver == "":
		return Report{}, errors.New("audit: verify: Receiver is required")
	case len(opts.PublicKey) != ed25519.PublicKeySize:
		return Report{}, fmt.Errorf("%w: public key is %d bytes, want %d", ErrBadKey, len(opts.PublicKey), ed25519.PublicKeySize)
	}
	var r Report
	var ap Problem // the anchor's problem, if any, with its error in aerr
	anchor, damage, aerr := LoadWithDamage(opts.Anchor)
	r.AnchorDamage = damage
	switch {
	case errors.Is(aerr, ErrAnchorMissing):
		ap = ProblemAnchorMissing
	case errors.Is(aerr, ErrBadAnchor), errors.Is(aerr, ErrBadCheckpoint):
		// There is an anchor, but nothing in it can be read: that is
		// damage to the store, not a signature that failed.
		ap = ProblemAnchorDamaged
	case aerr != nil:
		return Report{}, aerr
	default:
		r.Anchor = Head{Seq: anchor.Seq, Hash: anchor.Head}
		if aerr = checkTrusted(anchor, opts.PublicKey, opts.Receiver); errors.Is(aerr, ErrReceiverMismatch) {
			ap = ProblemReceiverMismatch
		} else if aerr != nil {
			ap = ProblemBadSignature
		}
	}
	// The chain is walked even when the anchor is unusable, so that the
	// report still says how much of it verifies; the anchor's problem is
	// the one reported, since without a trusted anchor no chain is evidence.
	var trusted, next *Checkpoint
	if aerr == nil {
		trusted = &anchor.Checkpoint
		if damage != nil && damage.Next() && damage.Anchor != nil {
			// The damaged slot's checkpoint, if it verifies, is compared
			// with the chain too; the walker keeps the hash at its seq.
			next = &damage.Anchor.Checkpoint
		}
	}
	var fence *fenceReplay
	if !opts.NoFenceReplay {
		fence = newFenceReplay()
	}
	w := walkChain(opts.Entries, trusted, next, fence)
	r.Entries, r.Head = w.head.Seq, w.head
	var derr error
	if aerr == nil && w.err == nil {
		derr = damage.Check(anchor.Checkpoint, opts.PublicKey, opts.Receiver, w.head, w.hashAt)
	}
	switch {
	case aerr != nil:
		r.fail(ap, aerr)
	case w.err != nil:
		r.fail(w.problem, w.err)
	case errors.Is(derr, ErrForkDetected):
		r.fail(ProblemForkDetected, derr)
	case errors.Is(derr, ErrRollbackDetected):
		r.fail(ProblemRollbackDetected, derr)
	case derr != nil:
		return Report{}, derr
	case fence != nil && fence.violation != nil:
		r.fail(ProblemFenceViolation, fence.violation)
	case opts.MaxAge > 0:
		now := time.Now
		if opts.Now != nil {
			now = opts.Now
		}
		if age := now().Sub(time.Unix(0, anchor.At)); age > opts.MaxAge {
			r.fail(ProblemAnchorStale, fmt.Errorf("%w: anchor seq %d (%x) was signed at %s, %v ago, over the maximum age %v",
				ErrAnchorStale, anchor.Seq, anchor.Head[:], formatTime(anchor.At), age.Round(time.Second), opts.MaxAge))
		}
	}
	if r.Problem == "" {
		r.Problem = ProblemOK
	}
	return r, nil
}

// Fail records a problem found beside the chain, such as a state that is
// not the one the head's checkpoint commits to, unless a problem was
// already found: the report names the first.
func (r *Report) Fail(p Problem, err error) {
	if r.Problem == "" || r.Problem == ProblemOK {
		r.fail(p, err)
	}
}

func (r *Report) fail(p Problem, err error) {
	r.Problem, r.Detail, r.err = p, err.Error(), err
}

// checkChain walks entries against a trusted anchor (nil if there is
// none) and stops at the first problem, including a chain that ends before
// the anchor. Each entry that verifies is replayed into fence, if it is not
// nil.
func checkChain(entries iter.Seq2[[]byte, []byte], anchor *Checkpoint, fence *fenceReplay) *walker {
	return walkChain(entries, anchor, nil, fence)
}

// walkChain is checkChain that also keeps the hash at next.Seq, if next is
// not nil, for SlotDamage.Check.
func walkChain(entries iter.Seq2[[]byte, []byte], anchor, next *Checkpoint, fence *fenceReplay) *walker {
	w := &walker{anchor: anchor, next: next, fence: fence}
	for k, v := range entries {
		if !w.step(k, v) {
			return w
		}
	}
	if anchor != nil && w.head.Seq < anchor.Seq {
		w.fail(ProblemRollbackDetected, &RollbackError{Anchor: *anchor, Head: w.head})
	}
	return w
}

// walker checks one entry at a time and keeps only the previous entry's
// position, which is what keeps Verify's memory flat.
type walker struct {
	head    Head
	anchor  *Checkpoint  // nil: no trusted anchor to compare with
	next    *Checkpoint  // nil, or a checkpoint whose seq's hash to keep
	nextAt  Hash         // the hash at next.Seq, once walked
	fence   *fenceReplay // nil: no replay
	e       Entry
	scratch []byte // re-encoding buffer, reused across entries
	problem Problem
	err     error
}

// step checks the entry stored under key k and reports whether to go on.
func (w *walker) step(k, v []byte) bool {
	if len(k) != 8 {
		return w.fail(ProblemBadEntry, fmt.Errorf("%w: after seq %d, key %x is not an 8-byte seq", ErrBadEntry, w.head.Seq, k))
	}
	seq, want := binary.BigEndian.Uint64(k), w.head.Seq+1
	switch {
	case seq == want+1:
		return w.fail(ProblemSeqGap, fmt.Errorf("%w: seq %d follows seq %d; seq %d is missing", ErrSeqGap, seq, w.head.Seq, want))
	case seq > want:
		return w.fail(ProblemSeqGap, fmt.Errorf("%w: seq %d follows seq %d; seqs %d to %d are missing", ErrSeqGap, seq, w.head.Seq, want, seq-1))
	case seq < want:
		return w.fail(ProblemSeqGap, fmt.Errorf("%w: seq %d follows seq %d", ErrSeqGap, seq, w.head.Seq))
	case v == nil:
		return w.fail(ProblemBadEntry, fmt.Errorf("%w: seq %d has no value", ErrBadEntry, seq))
	}
	if err := decodeEntryInto(v, &w.e, &w.scratch); err != nil {
		return w.fail(ProblemBadEntry, fmt.Errorf("%w (stored at seq %d)", err, seq))
	}
	if w.e.Seq != seq {
		return w.fail(ProblemSeqGap, fmt.Errorf("%w: key seq %d holds entry seq %d", ErrSeqGap, seq, w.e.Seq))
	}
	if !bytes.Equal(w.e.Prev, w.head.Hash[:]) {
		if seq == 1 {
			return w.fail(ProblemBrokenLink, fmt.Errorf("%w: entry 1 has prev %x, want 32 zero bytes", ErrBrokenLink, w.e.Prev))
		}
		return w.fail(ProblemBrokenLink, fmt.Errorf("%w: entry %d has prev %x, but entry %d hashes to %x",
			ErrBrokenLink, seq, w.e.Prev, w.head.Seq, w.head.Hash[:]))
	}
	w.head = Head{Seq: seq, Hash: HashEntry(v)}
	if w.next != nil && seq == w.next.Seq {
		w.nextAt = w.head.Hash
	}
	if w.anchor != nil && seq == w.anchor.Seq && w.head.Hash != w.anchor.Head {
		return w.fail(ProblemForkDetected, &ForkError{Anchor: *w.anchor, Hash: w.head.Hash})
	}
	if w.fence != nil {
		w.fence.observe(&w.e)
	}
	return true
}

// hashAt returns the hash kept at next.Seq; it is what SlotDamage.Check
// asks for, and only for a seq the walk passed.
func (w *walker) hashAt(seq uint64) (Hash, error) {
	if w.next == nil || seq != w.next.Seq || seq > w.head.Seq {
		return Hash{}, fmt.Errorf("audit: verify: the hash at seq %d was not kept", seq)
	}
	return w.nextAt, nil
}

func (w *walker) fail(p Problem, err error) bool {
	w.problem, w.err = p, err
	return false
}
